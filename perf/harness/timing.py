"""Clocks that agree with the device: a host clock read after the GPU's queue has drained, and marks
(CUDA events on a GPU, the host clock on the CPU) that time phases inside a step without a
synchronization between them."""

from __future__ import annotations

import time
from typing import Any

import torch


def synchronize(device: torch.device | None = None) -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize(device if device is not None and device.type == "cuda" else None)


def synchronized_timer() -> float:
    """pytest-benchmark's timer: waits for queued GPU work, then reads the host clock.

    A round is `start = timer(); fn() x iterations; end = timer()`, so each round's time covers all
    the device work its iterations queued, while the iterations themselves run back to back
    without host synchronization in between.
    """
    synchronize()
    return time.perf_counter()


def mark(cuda: bool) -> Any:
    """A point in a step's timeline: a recorded CUDA event on the GPU, the host clock on the CPU."""
    if not cuda:
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def elapsed_ms(start: Any, end: Any, cuda: bool) -> float:
    """Milliseconds between two marks; CUDA events must have completed (synchronize first)."""
    return start.elapsed_time(end) if cuda else (end - start) * 1e3


class RoundEvents:
    """`fn` with a CUDA event recorded before the first and after the last call of each timed round of
    `iterations` calls: the device's time for the rounds themselves, without the host's synchronization
    between them (extra_info gpu_rounds_ms). Two events a round; the calls run as they would unwrapped."""

    def __init__(self, fn: Any, iterations: int):
        if iterations < 1:
            raise ValueError(f"iterations must be >= 1; got {iterations}")
        self.fn, self.iterations = fn, iterations
        self.calls = 0
        self.marks: list[list[Any]] = []  # [start, end] per round; end is absent while a round runs

    def __call__(self) -> Any:
        first, last = self.calls % self.iterations == 0, self.calls % self.iterations == self.iterations - 1
        if first:
            self.marks.append([mark(True)])
        result = self.fn()
        if last:
            self.marks[-1].append(mark(True))
        self.calls += 1
        return result

    def per_call_ms(self) -> list[float]:
        """Milliseconds per call of each finished round; waits for the device."""
        synchronize()
        return [
            elapsed_ms(start, end, True) / self.iterations
            for start, end in (m for m in self.marks if len(m) == 2)
        ]
