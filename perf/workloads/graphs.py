"""The model's inference forward, launched op by op (eager) or replayed from a captured CUDA graph.

A replay launches every kernel of the captured forward with one call from the host, so what a
graph saves is the host's time to launch them: most where the forward is short and bound by the
host (small presets, bf16). Capture (perf/workloads/capture.py) follows PyTorch's CUDA graphs notes: a
static input buffer, warm-up calls on a side stream, then `torch.cuda.graph`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from model.config import ModelConfig
from model.precision import autocast, check_precision
from perf.harness import Work
from perf.workloads.capture import Captured, capture
from perf.workloads.lm import build_model, lm_config, random_batch

GRAPH_VARIANTS = ("eager", "cuda_graph")

Forward = Callable[[torch.Tensor], torch.Tensor]


def inference_model(preset: str, context: int, device: torch.device) -> tuple[ModelConfig, nn.Module]:
    """The project's model with SDPA attention, in eval mode and with frozen parameters.

    Frozen, because autocast caches its low-precision copies of leaf tensors that require grad:
    a capture would fill that cache with tensors of the graph's private memory pool.
    """
    config = lm_config(preset, context)
    model = build_model("sdpa", config, device).eval().requires_grad_(False)
    return config, model


def inference_forward(model: nn.Module, precision: str, device: torch.device) -> Forward:
    """token ids (B, T) -> logits (B, T, V) without autograd, under the precision's autocast."""
    check_precision(precision)

    def forward(token_ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), autocast(precision, device.type):
            return model(token_ids)  # (B, T, V)

    return forward


@dataclass
class CapturedForward:
    """A forward captured into a CUDA graph; it reads `static_input` and writes `static_output`."""

    captured: Captured  # the graph, and the forward whose weights it reads (kept alive by it)
    static_input: torch.Tensor  # (B, T)

    @property
    def static_output(self) -> torch.Tensor:
        return self.captured.output  # (B, T, V)

    def replay(self) -> None:
        self.captured.replay()

    def __call__(self, token_ids: torch.Tensor) -> torch.Tensor:
        """The forward of `token_ids`, by replay; the result is overwritten by the next replay."""
        self.static_input.copy_(token_ids)
        self.replay()
        return self.static_output


def capture_forward(forward: Forward, example_input: torch.Tensor) -> CapturedForward:
    """Capture `forward` of a CUDA tensor of `example_input`'s shape and dtype into a graph."""
    if example_input.device.type != "cuda":
        raise ValueError(
            f"example_input: CUDA graphs capture CUDA work; got a tensor on {example_input.device}, "
            "accepted: a tensor on a cuda device"
        )
    static_input = example_input.clone()  # (B, T)
    return CapturedForward(capture(lambda: forward(static_input), example_input.device), static_input)


@dataclass
class ForwardWorkload:
    """The inference forward of one batch as `step`, launched as `variant` says."""

    config: ModelConfig
    variant: str
    step: Callable[[], object]
    work: Work


def forward_workload(
    variant: str, preset: str, precision: str, context: int, device: torch.device
) -> ForwardWorkload:
    """The preset's forward of a random batch, eager or as a replay of its captured graph."""
    if variant not in GRAPH_VARIANTS:
        raise ValueError(f"variant: unknown value {variant!r}; accepted: {', '.join(GRAPH_VARIANTS)}")
    config, model = inference_model(preset, context, device)
    forward = inference_forward(model, precision, device)
    inputs, _ = random_batch(config, device)  # (B, T)
    if variant == "eager":

        def step() -> torch.Tensor:
            return forward(inputs)

    else:
        # The bound method keeps the static input and the model alive: the graph reads both.
        step = capture_forward(forward, inputs).replay
    tokens = config.batch_size * context
    # The causal half of attention's score square: the work the model's causal attention does.
    flops = config.flops_per_token(context, "forward", attention="causal") * tokens
    work = Work(flops=flops, tokens=tokens, precision=precision)
    return ForwardWorkload(config, variant, step, work)
