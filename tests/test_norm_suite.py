"""The norm suite (perf/cases/norm.py, the example a suite is added by): its options, ids and declared table
in a child pytest on the CPU, and its workloads' results against fp32 arithmetic."""

from __future__ import annotations

import pytest
import torch

from perf.cases.declare import RUN_FIGURES
from perf.cases.norm import PROVIDERS
from perf.harness.bench import Work, derived_figures
from perf.workloads.norm import norm_workload
from tests.suite_runs import run_suite


def test_the_suite_runs_with_its_declared_options_and_shows_its_table(tmp_path):
    proc, results = run_suite(
        tmp_path, "perf/test_norm.py", "--norm-widths=128", "--norm-providers=model_rms,torch_rms"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(results) == [
        f"test_norm[fp32-d128-{provider}-{mode}]"
        for provider in ("model_rms", "torch_rms")
        for mode in ("forward", "forward_backward")
    ]
    assert {x["suite"] for x in results.values()} == {"norm"}  # the bench fixture knows its suite
    assert all(x["gb_per_s"] > 0 and x["rows"] == 256 for x in results.values())
    # The run figures a declared table may show without a suite recording them are what the harness
    # records: on the CPU all but the GPU's own, and tokens/s where a call's work counts tokens.
    not_here = {"gpu_ms", "host_ms", "tokens_per_s"}
    assert all(set(RUN_FIGURES) - not_here <= set(x) for x in results.values()), sorted(results)
    assert "tokens_per_s" in derived_figures(0.5, Work(tokens=8), gpu=None)
    assert "norms: GB/s of the model's RMSNorm" in proc.stdout and "model_rms/torch_rms" in proc.stdout

    bad, _ = run_suite(tmp_path, "perf/test_norm.py", "--norm-providers=apex", "--collect-only")
    assert bad.returncode != 0
    assert "--norm-providers: unknown value 'apex'; accepted: model_rms, torch_rms, layer_norm" in bad.stderr


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("mode", ["forward", "forward_backward"])
def test_a_norm_step_runs_and_its_work_counts_the_bytes_of_its_mode(provider, mode):
    step, work, norm, x = norm_workload(provider, mode, 8, 16, "fp32", torch.device("cpu"))
    step()
    assert work.bytes_moved == (2 if mode == "forward" else 5) * 4 * 8 * 16
    rows = norm(x).detach()
    if provider == "layer_norm":
        torch.testing.assert_close(rows.mean(-1), torch.zeros(8), atol=1e-5, rtol=0)
    else:
        torch.testing.assert_close(rows.pow(2).mean(-1), torch.ones(8), atol=1e-3, rtol=0)


def test_an_unknown_provider_or_mode_names_what_is_accepted():
    with pytest.raises(ValueError, match="provider: unknown value 'apex'; accepted: model_rms"):
        norm_workload("apex", "forward", 8, 16, "fp32", torch.device("cpu"))
    with pytest.raises(
        ValueError, match="mode: unknown value 'backward'; accepted: forward, forward_backward"
    ):
        norm_workload("torch_rms", "backward", 8, 16, "fp32", torch.device("cpu"))
