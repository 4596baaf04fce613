"""The norms a Transformer layer runs twice per block: the model's RMSNorm against torch's rms_norm and
layer_norm, forward and forward+backward, by hidden width and precision (perf/cases/norm.py)."""

from __future__ import annotations

import pytest
import torch

from perf.cases.norm import MODES, ROWS
from perf.workloads.norm import norm_workload


@pytest.mark.parametrize("mode", MODES)
def test_norm(
    bench, device: torch.device, tier, norm_width: int, precision: str, norm_provider: str, mode: str
):
    rows = ROWS.get(tier.name, 8192)
    bench.benchmark.group = f"norm {mode} d{norm_width} {precision}"
    step, work, norm, x = norm_workload(norm_provider, mode, rows, norm_width, precision, device)
    with torch.no_grad():  # untimed: the provider normalizes rows as fp32 arithmetic does
        got = norm(x).float()
        want = torch.nn.functional.rms_norm(x.float(), (norm_width,), eps=1e-5)
        if norm_provider == "layer_norm":
            want = torch.nn.functional.layer_norm(x.float(), (norm_width,), eps=1e-5)
    tolerance = 1e-4 if precision == "fp32" else 3e-2
    torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)
    bench.run(step, work=work, provider=norm_provider, mode=mode, width=norm_width, rows=rows)
