"""Square matmuls per math mode: input dtype, TF32, whether cuBLAS may reduce in low precision, and
whether fp16 products accumulate in fp16.

A mode fixes what one n x n @ n x n product computes with; `math_settings` applies its switches
for as long as the block runs. The accuracy of a mode is the product's relative error against an
fp64 product of the same (already rounded) inputs, so it measures the arithmetic, not the inputs'
rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from model.precision import tf32
from perf.cases.matmul import MathMode
from perf.harness import Work

# torch.backends.cuda.matmul's switch for fp16 GEMMs that accumulate in fp16. torch's CUDABlas.cpp
# reads it in every fp16 GEMM (cuBLAS and cuBLASLt, single and batched) and, only when not built for
# ROCm and only on compute capability 7.0 or newer, asks for CUBLAS_COMPUTE_16F with fp16 alpha and
# beta; elsewhere the switch is stored and silently ignored (the GEMM accumulates in fp32). Setting it
# never fails, not even in a CPU build, so the checks below are what keep a measurement from passing
# fp32 accumulation off as fp16.
FP16_ACCUMULATION_FLAG = "allow_fp16_accumulation"
FP16_ACCUMULATION_MIN_CAPABILITY = (7, 0)


def fp16_accumulation_supported() -> bool:
    """Whether the installed torch has the fp16 accumulation switch."""
    return hasattr(torch.backends.cuda.matmul, FP16_ACCUMULATION_FLAG)


def fp16_accumulation_enabled() -> bool:
    """Whether fp16 CUDA matmuls may accumulate in fp16 now; False where torch has no such switch."""
    return bool(getattr(torch.backends.cuda.matmul, FP16_ACCUMULATION_FLAG, False))


def unavailable_reason(mode: MathMode, device: torch.device) -> str | None:
    """Why `mode` cannot be measured on `device`, or None when it can (as far as can be told before a
    matmul runs: `first_step_refusal` catches a cuBLAS that rejects the mode)."""
    if mode.fp16_accumulation and not fp16_accumulation_supported():
        return (
            f"torch {torch.__version__} has no torch.backends.cuda.matmul.{FP16_ACCUMULATION_FLAG}: "
            f"{mode.name} needs fp16 GEMMs that accumulate in fp16"
        )
    if mode.cuda_only and device.type != "cuda":
        return f"needs a CUDA device: {mode.name} is {mode.precision} with cuBLAS's {mode.switch} switch on"
    if mode.fp16_accumulation and torch.version.hip is not None:
        return (
            f"ROCm build (HIP {torch.version.hip}): torch applies {FP16_ACCUMULATION_FLAG} to cuBLAS "
            f"only, so {mode.name} would accumulate in fp32 like fp16"
        )
    if mode.fp16_accumulation:
        capability = tuple(torch.cuda.get_device_capability(device))
        if capability < FP16_ACCUMULATION_MIN_CAPABILITY:
            has, needs = (".".join(map(str, c)) for c in (capability, FP16_ACCUMULATION_MIN_CAPABILITY))
            return (
                f"{torch.cuda.get_device_name(device)} has compute capability {has}: torch applies "
                f"{FP16_ACCUMULATION_FLAG} from {needs} (Volta) on, so {mode.name} would accumulate in "
                "fp32 like fp16"
            )
    return None


def first_step_refusal(workload: MatmulWorkload) -> str | None:
    """Run the workload's first (untimed) step; for an fp16 accumulation mode, return why cuBLAS
    refused it (CUBLAS_STATUS_* in torch's error) instead of raising. None: the step ran.

    Any other error, and any error of another mode, propagates: only this switch asks cuBLAS for a
    compute type (CUBLAS_COMPUTE_16F) that a GPU or cuBLAS version may lack.
    """
    try:
        workload.step()
    except RuntimeError as err:
        if not workload.mode.fp16_accumulation or "CUBLAS_STATUS" not in str(err):
            raise
        message = " ".join(str(err).split())
        return f"cuBLAS rejected {workload.mode.name} ({FP16_ACCUMULATION_FLAG} on): {message}"
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
def fp16_accumulation(enabled: bool) -> Iterator[None]:
    """Allow (or forbid) fp16 cuBLAS matmuls to accumulate in fp16, until the block exits.

    torch's default forbids it. Where torch has no such switch, forbidding it changes nothing (fp16
    matmuls accumulate in fp32 there) and allowing it raises RuntimeError.
    """
    if not fp16_accumulation_supported():
        if enabled:
            raise RuntimeError(
                f"torch {torch.__version__} has no torch.backends.cuda.matmul.{FP16_ACCUMULATION_FLAG}"
            )
        yield
        return
    matmul = torch.backends.cuda.matmul
    saved = getattr(matmul, FP16_ACCUMULATION_FLAG)
    try:
        setattr(matmul, FP16_ACCUMULATION_FLAG, enabled)
        yield
    finally:
        setattr(matmul, FP16_ACCUMULATION_FLAG, saved)


@contextmanager
def math_settings(mode: MathMode) -> Iterator[None]:
    """TF32, the reduced-precision reductions and fp16 accumulation as `mode` wants them, all restored
    on exit: a mode that does not turn a switch on runs with it off, whatever it was before."""
    with (
        tf32(mode.tf32),
        reduced_precision_reductions(mode.reduced_precision_reduction),
        fp16_accumulation(mode.fp16_accumulation),
    ):
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

    On the device of the inputs: at an H100's fp64 tensor-core peak (67 TFLOP/s, datasheet) n = 8192
    is about 16 ms, and its three n x n fp64 buffers (1.5 GiB at 8192) fit beside the benchmark's.
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


def result_info(workload: MatmulWorkload, rel_error: float) -> dict[str, Any]:
    """The figures a matmul result carries in extra_info besides the harness's; call it inside
    `math_settings(workload.mode)`: `fp16_accumulation` is the switch as the matmul ran with it."""
    return {
        "suite": "matmul",
        "mode": workload.mode.name,
        "n": workload.n,
        "rel_error": rel_error,
        "dtype": str(workload.mode.dtype).removeprefix("torch."),
        "fp16_accumulation": fp16_accumulation_enabled(),
    }
