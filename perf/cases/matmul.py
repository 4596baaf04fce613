"""The matmul suite's cases: math modes by name, each the dtype and the CUDA switches one n x n product
computes with (perf/workloads/matmul.py applies the switches while it runs)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from perf.cases.declare import Axis, Suite, cell


@dataclass(frozen=True)
class MathMode:
    """How a matmul runs: the inputs' and output's dtype and the CUDA switches that change its math."""

    name: str
    dtype: torch.dtype
    tf32: bool = False  # fp32 inputs rounded to TF32's 10 mantissa bits inside the tensor cores
    # cuBLAS may sum partial products (split-K reductions) in bf16/fp16 instead of fp32.
    reduced_precision_reduction: bool = False
    # fp16 only: cuBLAS computes in fp16 (CUBLAS_COMPUTE_16F), every partial sum held in fp16
    # (torch.backends.cuda.matmul.allow_fp16_accumulation).
    fp16_accumulation: bool = False

    def __post_init__(self) -> None:
        if self.fp16_accumulation and self.dtype != torch.float16:
            raise ValueError(f"{self.name}: fp16 accumulation needs fp16 inputs, got {self.dtype}")

    @property
    def precision(self) -> str:
        """'fp32', 'bf16' or 'fp16': the Work precision, which selects the peak for MFU (fp32 with TF32
        on counts against TF32's peak)."""
        return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]

    @property
    def cuda_only(self) -> bool:
        """TF32, the reduced-precision reductions and fp16 accumulation are cuBLAS switches: a CPU
        matmul ignores them."""
        return self.tf32 or self.reduced_precision_reduction or self.fp16_accumulation

    @property
    def switch(self) -> str | None:
        """The cuBLAS switch the mode turns on, in words; None for a mode that turns none on."""
        if self.fp16_accumulation:
            return "fp16 accumulation"
        if self.tf32:
            return "TF32"
        return "reduced-precision reduction" if self.reduced_precision_reduction else None


MATH_MODES: dict[str, MathMode] = {
    mode.name: mode
    for mode in (
        MathMode("fp32", torch.float32),
        MathMode("tf32", torch.float32, tf32=True),
        MathMode("bf16", torch.bfloat16),
        MathMode("bf16_reduced", torch.bfloat16, reduced_precision_reduction=True),
        MathMode("fp16", torch.float16),
        # Beside fp16, from which it differs by the one switch: the end-of-run table lists modes in
        # this order.
        MathMode("fp16_accum", torch.float16, fp16_accumulation=True),
        MathMode("fp16_reduced", torch.float16, reduced_precision_reduction=True),
    )
}


def math_mode(name: str) -> MathMode:
    if name not in MATH_MODES:
        raise ValueError(f"mode: unknown matmul mode {name!r}; accepted: {', '.join(MATH_MODES)}")
    return MATH_MODES[name]


# --------------------------------------------------------------------------- the suites' declarations
SUITES = (
    # Square matmuls n x n @ n x n in every math mode (perf/test_matmul.py).
    Suite(
        "matmul",
        axes=(
            Axis(
                "matmul_sizes",
                id_prefix="n",
                values={"cpu": (256,), "full": (1024, 2048, 4096, 8192, 16384)},
                default=(8192,),
                help="comma-separated n of the n x n matmuls, e.g. 4096,8192",
                read="ints",
            ),
        ),
        cells={"pr": (cell("test_matmul.py::test_matmul"),)},  # every math mode at one size
    ),
    # The harness's time against triton.testing.do_bench's (perf/test_timing_agreement.py): no axes.
    Suite(
        "timing_agreement",
        cells={"pr": (cell("test_timing_agreement.py::test_timing_agreement", case="matmul_bf16_1ms"),)},
    ),
)
