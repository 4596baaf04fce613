"""Square matmul throughput and accuracy per math mode: fp32, TF32, bf16 and fp16 with and without
reduced-precision reductions, and fp16 with fp16 accumulation.

The sizes n come from the tier (perf/tiers.py: matmul_sizes); the modes are perf/cases/matmul.py's.
The modes of one n share a pytest-benchmark group; the end of the run tabulates them
(perf/tables/precision.py).
"""

from __future__ import annotations

import pytest
import torch

from perf.cases.matmul import MATH_MODES, math_mode
from perf.workloads.matmul import (
    first_step_refusal,
    math_settings,
    matmul_workload,
    relative_error,
    result_info,
    unavailable_reason,
)

WARMUP_STEPS = 2  # the first call picks the cuBLAS kernel; the error check before timing is one more


@pytest.mark.parametrize("matmul_mode", tuple(MATH_MODES))
def test_matmul(bench, device: torch.device, matmul_size: int, matmul_mode: str):
    mode = math_mode(matmul_mode)
    reason = unavailable_reason(mode, device)
    if reason is not None:
        pytest.skip(reason)
    bench.benchmark.group = f"matmul n={matmul_size}"
    # Open during timing as well: the harness reads the TF32 switch at the end to choose the MFU peak.
    with math_settings(mode):
        workload = matmul_workload(mode, matmul_size, device)
        reason = first_step_refusal(workload)
        if reason is not None:
            pytest.skip(reason)  # math_settings puts the switches back on the way out
        rel_error = relative_error(workload.out, workload.a, workload.b)  # untimed, fp64 buffers freed
        bench.run(workload, warmup_steps=WARMUP_STEPS, **result_info(workload, rel_error))
    # Rounding the output to bf16 alone costs up to 2^-8 = 0.004; an error of 0.1 is a wrong product,
    # not an imprecise one, and its time must not pass as a fast mode's. fp16 accumulation at
    # n = 8192 errs by about 0.003-0.013 (rounding the running sum per 16 products or per product).
    assert rel_error < 0.1, f"{mode.name} n={matmul_size}: relative error {rel_error:.3g} against fp64"
