"""Capturing a step into a CUDA graph, as PyTorch's CUDA graphs notes describe it.

The step's inputs must be static (the same tensors every call); warm-up calls run on a side stream
first, so that everything set up once (cuBLAS handles and workspaces, SDPA's kernel choice, the
optimizer's state, the caching allocator's blocks) exists before capture, where none of it may be
created; then one call is captured with `torch.cuda.graph`, and each replay launches all of its
kernels with a single call from the host.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# Calls before capture, on a side stream. PyTorch's CUDA graphs notes warm up with 3 calls; the first
# training step also creates the gradients and AdamW's state.
CAPTURE_WARMUP_CALLS = 3


class NotCapturable(Exception):
    """The step cannot be captured into a CUDA graph; the message says why."""


@dataclass
class Captured:
    """One captured call: its graph, and the function it was captured from.

    The graph holds only the addresses of the tensors it reads and writes (the inputs, the weights,
    the optimizer's state); keeping `fn`, and with it everything it refers to, keeps those tensors
    alive. Without it they are freed once capture returns, and replays read memory that later
    allocations reuse.
    """

    graph: torch.cuda.CUDAGraph
    fn: Callable[[], Any]
    output: Any  # what the captured call returned, in the graph's pool: every replay overwrites it

    def replay(self) -> None:
        self.graph.replay()


def capture(
    fn: Callable[[], Any], device: torch.device, before_capture: Callable[[], Any] | None = None
) -> Captured:
    """Warm `fn` up on a side stream and capture one call.

    `before_capture` runs between the two: a training step sets its gradients to None there, as
    PyTorch's notes do, so that the captured backward allocates them in the graph's pool. An error
    during capture (a host synchronization, an operation CUDA graphs do not take) becomes
    NotCapturable.
    """
    if device.type != "cuda":
        raise NotCapturable(f"CUDA graphs capture CUDA work; this step runs on {device}")
    current = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(current)  # the inputs were written on the current stream
    with torch.cuda.stream(side):
        for _ in range(CAPTURE_WARMUP_CALLS):
            fn()
    current.wait_stream(side)
    if before_capture is not None:
        before_capture()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            output = fn()
    except torch.OutOfMemoryError:
        raise  # the harness makes it a skip naming the configuration, as for any step
    except RuntimeError as err:
        _end_generator_capture(device)
        first_line = (str(err).strip().splitlines() or [""])[0][:300]
        raise NotCapturable(f"capture failed: {type(err).__name__}: {first_line}") from err
    torch.cuda.synchronize(device)
    return Captured(graph, fn, output)


def _end_generator_capture(device: torch.device) -> None:
    """Take the device's random-number generator out of capture mode after a failed capture.

    A capture that fails ends with capture_end raising before it tells the generator that capture is
    over (torch 2.11), and from then on every random op on the device fails ("Offset increment
    outside graph capture encountered unexpectedly"): in a benchmark run, every later benchmark that
    draws random numbers. An empty capture begins and ends the generator's capture mode cleanly.
    """
    with torch.cuda.device(device), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the CUDA Graph is empty"
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            pass


def captured_step(
    step: Callable[[], Any], device: torch.device, before_capture: Callable[[], Any] | None = None
) -> Callable[[], None]:
    """`step` captured once; the returned function replays it, and keeps what the graph uses alive."""
    return capture(step, device, before_capture).replay
