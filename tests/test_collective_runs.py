"""How a collective benchmark records its case: the run's plan, the fields of its result, its skips and
the failure after recording wrong elements; the ids and options of the tiers' collectives."""

from types import SimpleNamespace

import pytest

from perf.cases.collectives import CollectiveCase
from perf.harness import TimingPolicy
from perf.tiers import TIERS
from perf.workloads import collective_runs
from perf.workloads.collective_ranks import CollectiveTimes
from perf.workloads.collective_runs import bench_collective, run_plan, timing_args
from tests.test_harness import _child_pytest

MIB = 2**20
ALL_GATHER = CollectiveCase("all_gather", "bf16", "out_of_place")


class FakeBench:
    """The harness's Bench as far as bench_collective uses it: what it records is kept."""

    def __init__(self, disabled: bool = False):
        self.benchmark = SimpleNamespace(disabled=disabled, group=None)
        self.policy = TimingPolicy(min_round_s=0.005, budget_s=1.0, min_rounds=5)
        self.recorded: dict | None = None

    def record_rounds(self, durations_s, *, work, gpu, **extra):
        self.recorded = {"durations_s": durations_s, "work": work, "gpu": gpu, **extra}
        return extra


def _measured_as(monkeypatch, results):
    monkeypatch.setattr(collective_runs, "measured", lambda bench, tier, backend, world_size: results)


def test_a_result_carries_its_case_and_the_collectives_bus_bandwidth(monkeypatch):
    _measured_as(monkeypatch, {(ALL_GATHER, MIB): CollectiveTimes((0.002, 0.001, 0.003), wrong_elements=0)})
    bench = FakeBench()
    bench_collective(bench, TIERS["cpu"], ALL_GATHER, "gloo", 4, MIB)
    x = bench.recorded
    assert x["durations_s"] == (0.002, 0.001, 0.003) and x["work"].bytes_moved == MIB
    assert x["work"].precision == "bf16"
    assert x["algbw_gbps"] == pytest.approx(MIB / 0.002 / 1e9)
    assert x["busbw_gbps"] == pytest.approx(x["algbw_gbps"] * 3 / 4)  # all-gather: (n - 1) / n
    assert {
        k: x[k] for k in ("suite", "collective", "dtype", "placement", "wrong_elements", "size_bytes")
    } == {
        "suite": "collectives",
        "collective": "all_gather",
        "dtype": "bfloat16",
        "placement": "out_of_place",
        "wrong_elements": 0,
        "size_bytes": MIB,
    }
    assert bench.benchmark.group == "all_gather-bf16-out_of_place gloo world4"


def test_wrong_elements_are_recorded_then_fail_the_benchmark(monkeypatch):
    first = "rank 1, element 5: 0 where 2 was expected"
    times = CollectiveTimes((0.002,), wrong_elements=3, first_wrong=first)
    _measured_as(monkeypatch, {(ALL_GATHER, MIB): times})
    bench = FakeBench()
    with pytest.raises(pytest.fail.Exception) as failed:
        bench_collective(bench, TIERS["cpu"], ALL_GATHER, "gloo", 2, MIB)
    assert str(failed.value).startswith(
        "1MiB all_gather (bf16, out of place), gloo with 2 ranks: 3 wrong elements"
    )
    assert f"the first at {first}" in str(failed.value)
    assert bench.recorded["wrong_elements"] == 3


def test_a_case_the_backend_rejects_skips_with_its_reason(monkeypatch):
    reason = "rank 0: gloo does not run all_gather on bf16 out-of-place: RuntimeError: unsupported"
    _measured_as(monkeypatch, {(ALL_GATHER, MIB): CollectiveTimes(skipped=reason)})
    with pytest.raises(pytest.skip.Exception) as skipped:
        bench_collective(FakeBench(), TIERS["cpu"], ALL_GATHER, "gloo", 2, MIB)
    assert str(skipped.value) == f"1MiB all_gather (bf16, out of place), gloo with 2 ranks: {reason}"


def test_a_size_that_cannot_run_skips_before_any_ranks_start(monkeypatch):
    def no_run(*args):
        raise AssertionError("no ranks should start")

    monkeypatch.setattr(collective_runs, "measured", no_run)
    with pytest.raises(
        pytest.skip.Exception, match=r"6B all_gather \(bf16, out of place\), gloo with 4 ranks: 3 "
    ):
        bench_collective(FakeBench(), TIERS["cpu"], ALL_GATHER, "gloo", 4, 6)
    with pytest.raises(pytest.skip.Exception, match="nccl with 1024 ranks needs 1024 GPUs"):
        bench_collective(FakeBench(), TIERS["cpu"], ALL_GATHER, "nccl", 1024, MIB)
    with pytest.raises(pytest.skip.Exception, match="a collective needs 2 ranks or more"):
        bench_collective(FakeBench(), TIERS["cpu"], ALL_GATHER, "gloo", 1, MIB)


def test_the_run_measures_every_case_at_the_sizes_it_can_run():
    tier = TIERS["cpu"].with_overrides(collective_sizes=(6, 8, 16), collective_dtypes=("fp32", "bf16"))
    plan = {str(case): sizes for case, sizes in run_plan(tier, 4)}
    assert len(plan) == 14
    assert plan["all_reduce-fp32-in_place"] == (8, 16)  # 6 B: not whole fp32 elements
    assert plan["all_reduce-bf16-in_place"] == (6, 8, 16)
    assert plan["all_gather-fp32-in_place"] == (16,)  # 8 B: 2 elements in 4 chunks
    assert plan["all_to_all-bf16-out_of_place"] == (8, 16)


def test_disabled_benchmarks_run_each_case_once():
    assert timing_args(FakeBench(disabled=True)) == (0.0, 1, 1)
    assert timing_args(FakeBench()) == (1.0, 5, 200)


# --------------------------------------------------------------------------- ids and options
def _ids(proc) -> list[str]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line.split("::")[1] for line in proc.stdout.splitlines() if "::" in line]


def test_fp32_all_reduce_keeps_its_names_and_the_gpu_tiers_run_every_case(tmp_path):
    files = ("perf/test_allreduce.py", "perf/test_collectives.py", "--collect-only", "--device=cpu")
    ids = _ids(_child_pytest(tmp_path, *files, "--tier=full", "--world-sizes=2", "--collective-sizes=1G"))
    allreduce = [i for i in ids if i.startswith("test_allreduce")]
    assert allreduce[:2] == ["test_allreduce[nccl-world2-1GiB]", "test_allreduce[gloo-world2-1GiB]"]
    assert allreduce[2:] == ["test_allreduce[bf16-nccl-world2-1GiB]", "test_allreduce[bf16-gloo-world2-1GiB]"]
    nccl = [i for i in ids if i.startswith("test_collective[") and "-nccl-" in i]
    assert len(nccl) == 12  # 14 cases less all-reduce's two
    assert "test_collective[all_gather-bf16-out_of_place-nccl-world2-1GiB]" in nccl
    assert "test_collective[all_to_all-fp32-out_of_place-nccl-world2-1GiB]" in nccl
    # The default tier leaves gloo (CPU tensors) to `full`: the same nccl cells, none of gloo.
    only = ("--world-sizes=2", "--collective-sizes=1G")
    default = _ids(_child_pytest(tmp_path, *files, "--tier=default", *only))
    assert default == [i for i in ids if "gloo" not in i]


def test_an_unknown_collective_stops_the_run_naming_the_accepted_ones(tmp_path):
    proc = _child_pytest(
        tmp_path, "perf/test_collectives.py", "--collect-only", "--collectives=all_gather,gather"
    )
    assert proc.returncode != 0
    assert (
        "--collectives: unknown value 'gather'; accepted: all_reduce, all_gather, reduce_scatter, broadcast, "
        "all_to_all"
    ) in proc.stderr
