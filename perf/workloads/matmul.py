"""Square matmuls per math mode: input dtype, TF32, and whether cuBLAS may reduce in low precision.

A mode fixes what one n x n @ n x n product computes with; `math_settings` applies its switches
for as long as the block runs. The accuracy of a mode is the product's relative error against an
fp64 product of the same (already rounded) inputs, so it measures the arithmetic, not the inputs'
rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from model.precision import tf32
from perf.cases.matmul import MathMode
from perf.harness import Work


def unavailable_reason(mode: MathMode, device: torch.device) -> str | None:
    """Why `mode` cannot be measured on `device`, or None when it can."""
    if mode.cuda_only and device.type != "cuda":
        switch = "TF32" if mode.tf32 else "reduced-precision reduction"
        return f"needs a CUDA device: {mode.name} is {mode.precision} with cuBLAS's {switch} switch on"
    return None


# torch 2.13 keeps a second flag beside each reduced-precision switch (split-K allowed) and resets
# it to True whenever the switch is set to a plain bool; where it exists, both are saved and put back.
REDUCTION_FLAGS = ("allow_bf16_reduced_precision_reduction", "allow_fp16_reduced_precision_reduction")


def _reduction_setting(flag: str) -> bool | tuple[bool, bool]:
    matmul = torch.backends.cuda.matmul
    try:
        split_k = getattr(matmul, f"{flag}_split_k")
    except AttributeError:
        return getattr(matmul, flag)
    return getattr(matmul, flag), split_k


@contextmanager
def reduced_precision_reductions(allowed: bool) -> Iterator[None]:
    """Allow (or forbid) bf16 and fp16 cuBLAS matmuls to reduce in their own precision, until the block exits.

    torch's defaults allow both; forbidding them keeps every partial sum in fp32.
    """
    matmul = torch.backends.cuda.matmul
    saved = {flag: _reduction_setting(flag) for flag in REDUCTION_FLAGS}
    try:
        for flag in REDUCTION_FLAGS:
            setattr(matmul, flag, allowed)
        yield
    finally:
        for flag, setting in saved.items():
            setattr(matmul, flag, setting)


@contextmanager
def math_settings(mode: MathMode) -> Iterator[None]:
    """TF32 and the reduced-precision reductions as `mode` wants them, both restored on exit."""
    with tf32(mode.tf32), reduced_precision_reductions(mode.reduced_precision_reduction):
        yield


def matmul_inputs(
    n: int, dtype: torch.dtype, device: torch.device, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two seeded standard-normal n x n matrices in `dtype`: the same draws, rounded, for every dtype."""
    g = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(n, n, generator=g, device=device)  # (n, n)
    b = torch.randn(n, n, generator=g, device=device)  # (n, n)
    return a.to(dtype), b.to(dtype)


def relative_error(product: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    """||product - A B||_F / ||A B||_F, with A B computed in fp64 from the inputs as given.

    On the device of the inputs: fp64 runs at 67 TFLOP/s on an H100, 16 ms for n = 8192, and its
    three n x n fp64 buffers (1.5 GiB at 8192) fit beside the benchmark's.
    """
    exact = a.double() @ b.double()  # (n, n)
    norm = torch.linalg.vector_norm(exact)
    exact.sub_(product)  # in place: the difference needs no fourth buffer
    return (torch.linalg.vector_norm(exact) / norm).item()


@dataclass
class MatmulWorkload:
    """Inputs, a preallocated output, and the step that overwrites it: the timed call allocates nothing."""

    mode: MathMode
    n: int
    a: torch.Tensor  # (n, n)
    b: torch.Tensor  # (n, n)
    out: torch.Tensor  # (n, n)
    step: Callable[[], None]
    work: Work


def matmul_workload(mode: MathMode, n: int, device: torch.device) -> MatmulWorkload:
    """C = A B for n x n matrices in the mode's dtype; run `step` inside `math_settings(mode)`."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected an integer >= 1, got {n!r}")
    a, b = matmul_inputs(n, mode.dtype, device)
    out = torch.empty(n, n, dtype=mode.dtype, device=device)

    def step() -> None:
        torch.mm(a, b, out=out)

    # n^2 outputs, each n multiplies and n adds.
    return MatmulWorkload(mode, n, a, b, out, step, Work(flops=2 * n**3, precision=mode.precision))
