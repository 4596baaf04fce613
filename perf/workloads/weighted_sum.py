"""The weighted-sum suite's step: x (rows, 1024) and w (1024,) on the device, and one call of the
provider's forward or forward+backward, with the bytes it must move (the kernel is memory-bound)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels.weighted_sum import weighted_sum, weighted_sum_reference
from model.precision import parse_dtype
from perf.cases.weighted_sum import COLUMNS, PROVIDERS
from perf.harness import Work

FUNCTIONS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "triton": weighted_sum,
    "torch": weighted_sum_reference,
}


@dataclass
class WeightedSumWorkload:
    step: Callable[[], torch.Tensor | None]
    work: Work
    x: torch.Tensor
    w: torch.Tensor
    function: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def unavailable_reason(provider: str, device: torch.device) -> str | None:
    """Why a provider cannot be timed on `device`, or None."""
    if provider not in PROVIDERS:
        raise ValueError(f"provider: unknown value {provider!r}; accepted: {', '.join(PROVIDERS)}")
    if provider == "triton" and device.type != "cuda":
        return "the Triton kernel needs a CUDA GPU to be timed (its interpreter is for the correctness tests)"
    return None


def weighted_sum_workload(
    provider: str, mode: str, rows: int, precision: str, device: torch.device
) -> WeightedSumWorkload:
    """One call of `provider` in `mode` ('forward', 'forward_backward') on fresh random inputs."""
    dtype = parse_dtype(precision)
    generator = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(rows, COLUMNS, device=device, dtype=dtype, generator=generator)  # (N, D)
    w = torch.randn(COLUMNS, device=device, dtype=dtype, generator=generator)  # (D,)
    function = FUNCTIONS[provider]
    size = x.element_size()
    if mode == "forward":
        # Reads x and w once, writes one value per row.
        moved = size * (rows * COLUMNS + COLUMNS + rows)

        def step() -> torch.Tensor:
            return function(x, w)

    elif mode == "forward_backward":
        x.requires_grad_(True)
        w.requires_grad_(True)
        grad_out = torch.randn(rows, device=device, dtype=dtype, generator=generator)  # (N,)
        # Forward as above; backward reads x, w and grad_out and writes grad_x (N, D) and grad_w.
        moved = size * (2 * rows * COLUMNS + 2 * COLUMNS + 2 * rows) + size * (rows * COLUMNS + COLUMNS)

        def step() -> None:
            torch.autograd.grad(function(x, w), (x, w), grad_out)

    else:
        raise ValueError(f"mode: unknown value {mode!r}; accepted: forward, forward_backward")
    # Two flops (a multiply and an add) per element of x in the forward, twice that in the backward.
    flops = 2 * rows * COLUMNS * (1 if mode == "forward" else 3)
    return WeightedSumWorkload(
        step, Work(flops=flops, bytes_moved=moved, precision=precision), x, w, function
    )
