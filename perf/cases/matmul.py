"""The matmul suite's cases: math modes by name, each the dtype and the CUDA switches one n x n product
computes with (perf/workloads/matmul.py applies the switches while it runs)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MathMode:
    """How a matmul runs: the inputs' and output's dtype and the two CUDA switches that change its math."""

    name: str
    dtype: torch.dtype
    tf32: bool = False  # fp32 inputs rounded to TF32's 10 mantissa bits inside the tensor cores
    # cuBLAS may sum partial products (split-K reductions) in bf16/fp16 instead of fp32.
    reduced_precision_reduction: bool = False

    @property
    def precision(self) -> str:
        """'fp32', 'bf16' or 'fp16': the Work precision, which selects the peak for MFU (fp32 with TF32
        on counts against TF32's peak)."""
        return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]

    @property
    def cuda_only(self) -> bool:
        """TF32 and the reduced-precision reductions are cuBLAS switches: a CPU matmul ignores them."""
        return self.tf32 or self.reduced_precision_reduction


MATH_MODES: dict[str, MathMode] = {
    mode.name: mode
    for mode in (
        MathMode("fp32", torch.float32),
        MathMode("tf32", torch.float32, tf32=True),
        MathMode("bf16", torch.bfloat16),
        MathMode("bf16_reduced", torch.bfloat16, reduced_precision_reduction=True),
        MathMode("fp16", torch.float16),
        MathMode("fp16_reduced", torch.float16, reduced_precision_reduction=True),
    )
}


def math_mode(name: str) -> MathMode:
    if name not in MATH_MODES:
        raise ValueError(f"mode: unknown matmul mode {name!r}; accepted: {', '.join(MATH_MODES)}")
    return MATH_MODES[name]
