"""The weighted-sum kernel (kernels/weighted_sum.py) against its PyTorch reference: forward and
forward+backward, per row count and precision; bandwidth is what it is about (it reads x once).

Parametrized by the tier through the suite's declaration (perf/cases/weighted_sum.py): sizes (rows) and
providers; the precision is the model's axis. The end of the run tabulates them by the table declared
there.
"""

from __future__ import annotations

import pytest
import torch

from perf.cases.weighted_sum import MODES
from perf.workloads.weighted_sum import unavailable_reason, weighted_sum_workload

WARMUP_STEPS = 2  # the first call compiles the Triton kernel


@pytest.mark.parametrize("mode", MODES)
def test_weighted_sum(
    bench, device: torch.device, weighted_sum_size: int, precision: str, weighted_sum_provider: str, mode: str
):
    provider, rows = weighted_sum_provider, weighted_sum_size
    reason = unavailable_reason(provider, device)
    if reason is not None:
        pytest.skip(f"{provider}: {reason}")
    bench.benchmark.group = f"weighted_sum {mode} rows{rows} {precision}"
    workload = weighted_sum_workload(provider, mode, rows, precision, device)
    # Untimed: the provider computes the reference's result (fp32 accumulation in both).
    with torch.no_grad():
        got, want = (
            workload.function(workload.x, workload.w),
            torch.mv(workload.x.float(), workload.w.float()),
        )
    tolerance = 1e-4 if precision == "fp32" else 2e-2
    torch.testing.assert_close(
        got.float(), want, rtol=tolerance, atol=tolerance * (workload.x.shape[1] ** 0.5)
    )
    bench.run(
        workload,
        warmup_steps=WARMUP_STEPS,
        provider=provider,
        mode=mode,
        rows=rows,
    )
