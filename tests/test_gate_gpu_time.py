"""The gate on GPU busy time (extra_info gpu_ms): judged beside the wall time at the threshold, host-bound
or not; a figure missing on either side falls back to wall time and is listed with its reason."""

from __future__ import annotations

import pytest

from perf.tools.judging.regression_rule import overall, verdicts
from perf.tools.reading.timings import GPU, WALL, Timing, gpu_timing
from tests.gate_files import NAMES, FakeRunner, rows_of, run_gate, section, short, suite, write_results

HOST_BOUND = NAMES[0]


def gpu(ms: float, spread: float = 0.004, calls: int = 5) -> dict:
    """extra_info of a benchmark whose calls kept the GPU busy for `ms`, with an IQR of `spread`."""
    return {"gpu_ms": ms, "gpu_ms_iqr": ms * spread, "gpu_ms_stddev": ms * spread, "gpu_calls": calls}


def host_bound_with_gpu(median_s: float, gpu_ms: float) -> dict:
    """A host-bound step (the host busy for 95% of it) that keeps the GPU busy for `gpu_ms`."""
    return {"median_ms": median_s * 1e3, "host_ms": 0.95 * median_s * 1e3, **gpu(gpu_ms)}


def with_gpu(benchmarks: dict, gpu_ms: dict[str, float] | None = None) -> dict:
    """extra_info for every benchmark: GPU busy time half its median, or `gpu_ms` where given."""
    gpu_ms = gpu_ms or {}
    return {name: gpu(gpu_ms.get(name, s["median"] * 1e3 / 2)) for name, s in benchmarks.items()}


def files(tmp_path, base: dict, base_extra: dict | None, current: dict, current_extra: dict | None):
    return (
        write_results(tmp_path / "base.json", base, extra=base_extra),
        write_results(tmp_path / "current.json", current, extra=current_extra),
    )


def regression_rows(out: str) -> list[tuple[str, str]]:
    """(figure, benchmark as shown) of each row under 'regressions' whose verdict is the section's."""
    return [
        (row.split()[0], name)
        for name in section(out, "regressions")
        for row in rows_of(out, name)
        if "faster" not in row.split()
    ]


# --------------------------------------------------------------------------- the rule
def test_gpu_timing_reads_median_and_spread():
    timing = gpu_timing(gpu(20.0, spread=0.01, calls=9))
    assert timing.median_s == pytest.approx(0.020)
    # IQR 0.2 ms over 9 calls: sigma 0.2 / 1.349 ms, standard error of the median 1.2533 sigma / 3.
    assert timing.se_s == pytest.approx(1.2533 * 0.0002 / 1.349 / 3, rel=1e-3)
    assert not timing.host_bound  # the host's share has no bearing on GPU time


@pytest.mark.parametrize("info", [{}, {"gpu_ms": 0.0}, {"gpu_ms": True}, {"gpu_ms": "5"}, "no dict", None])
def test_gpu_timing_is_none_without_a_positive_figure(info):
    assert gpu_timing(info) is None


def test_verdicts_judge_each_figure_both_runs_have():
    steady = Timing(0.010, 1e-6)
    host_bound = Timing(0.010, 1e-6, host_bound=True)
    found = verdicts(
        {WALL: host_bound, GPU: steady}, {WALL: Timing(0.0115, 1e-6), GPU: Timing(0.011, 1e-6)}, 0.05, 3
    )
    # Wall 15% slower but host-bound (25%): listed; GPU 10% slower: slower, host-bound or not.
    assert found == {WALL: "host-bound slower", GPU: "slower"}
    assert overall(found) == "slower (gpu)"
    assert verdicts({WALL: steady}, {WALL: steady, GPU: steady}, 0.05, 3) == {WALL: "unchanged"}
    assert overall({WALL: "faster", GPU: "faster"}) == "faster (wall, gpu)"
    assert overall({WALL: "unchanged", GPU: "unchanged"}) == "unchanged"


# --------------------------------------------------------------------------- stored runs
def host_bound_gate(tmp_path, capsys, wall_ratio: float, gpu_ms_after: float) -> tuple[int, str]:
    """The gate on a host-bound step (4 ms of GPU work in the baseline) whose wall time moved by
    `wall_ratio` and whose GPU time became `gpu_ms_after`; every other benchmark unchanged."""
    base = suite()
    current = suite({HOST_BOUND: base[HOST_BOUND]["median"] * wall_ratio}, seed=4)
    before = {**with_gpu(base), HOST_BOUND: host_bound_with_gpu(base[HOST_BOUND]["median"], 4.0)}
    after = {**with_gpu(base), HOST_BOUND: host_bound_with_gpu(current[HOST_BOUND]["median"], gpu_ms_after)}
    baseline, current_file = files(tmp_path, base, before, current, after)
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", current_file)
    return code, out


def test_host_bound_step_with_ten_percent_more_gpu_work_fails_on_gpu_time(tmp_path, capsys):
    """The case wall time misses: a host-bound step whose wall time reads faster (the host was quicker
    this run) while its GPU does 10% more work."""
    code, out = host_bound_gate(tmp_path, capsys, wall_ratio=0.9, gpu_ms_after=4.4)
    assert code == 1
    assert regression_rows(out) == [(GPU, short(HOST_BOUND))]
    # One benchmark, in one section: its faster wall time is shown beside the GPU time that failed.
    wall = next(row for row in rows_of(out, short(HOST_BOUND)) if row.split()[0] == WALL)
    assert wall.split()[-2:] == ["faster", short(HOST_BOUND)]
    assert "improvements" not in out and ", 0 faster, " in out
    assert out.splitlines()[-1].startswith("FAIL: 1 regression (1 in gpu time)")
    assert "without GPU time to compare" not in out


def test_same_gpu_time_with_a_wall_time_within_the_host_bound_threshold_passes(tmp_path, capsys):
    code, out = host_bound_gate(tmp_path, capsys, wall_ratio=1.2, gpu_ms_after=4.01)
    assert code == 0
    assert section(out, "host-bound slower") == [short(HOST_BOUND)]


def test_gpu_time_within_its_own_spread_passes(tmp_path, capsys):
    base = suite()
    noisy = {name: gpu(5.0, spread=0.3, calls=3) for name in base}
    slower = {name: gpu(5.5, spread=0.3, calls=3) for name in base}  # 10%, but 30% spread over 3 calls
    baseline, current_file = files(tmp_path, base, noisy, suite(seed=1), slower)
    assert run_gate(capsys, "--baseline", baseline, "--current", current_file)[0] == 0


def test_faster_gpu_time_is_an_improvement(tmp_path, capsys):
    base = suite()
    baseline, current_file = files(
        tmp_path, base, with_gpu(base), suite(seed=1), with_gpu(base, {NAMES[2]: 3})
    )
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", current_file)
    assert code == 0
    assert section(out, "improvements") == [short(NAMES[2])]
    assert [row.split()[0] for row in rows_of(out, short(NAMES[2]))] == [GPU]


def test_baseline_without_gpu_time_falls_back_to_wall_time_and_says_so(tmp_path, capsys):
    base = suite()
    slower_gpu = with_gpu(base, {NAMES[4]: 100.0})  # would fail if it were compared
    baseline, current_file = files(tmp_path, base, None, suite(seed=1), slower_gpu)
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", current_file)
    assert code == 0
    lines = out.splitlines()
    heading = lines.index(f"judged on wall time alone ({len(NAMES)}, without GPU time to compare on a side):")
    assert lines[heading + 1].startswith(f"  {len(NAMES)}: the baseline has no GPU time: no gpu_ms")
    assert lines[heading + 2] == lines[-1]  # a reason shared by every benchmark: counted, not listed
    assert f"judged on wall time alone: {len(NAMES)}, without GPU time on a side (why: below)" in lines


def test_run_without_gpu_time_lists_the_benchmarks_and_the_reason(tmp_path, capsys):
    base = suite()
    after = with_gpu(base)
    reason = "a CUDA profiling tool holds CUPTI in this process"
    for name in NAMES[:2]:
        after[name] = {"gpu_ms_absent": reason}
    baseline, current_file = files(tmp_path, base, with_gpu(base), suite(seed=1), after)
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", current_file)
    assert code == 0
    assert f"  2: this run has no GPU time: {reason}" in out.splitlines()
    assert section(out, f"  2: this run has no GPU time: {reason}") == NAMES[:2]


def test_gpu_suspect_is_re_measured_on_its_gpu_time(tmp_path, capsys):
    slow, flaky = NAMES[3], NAMES[6]
    base = suite()
    baseline = write_results(tmp_path / "base.json", base, extra=with_gpu(base))
    first = with_gpu(
        base, {slow: base[slow]["median"] * 1e3 / 2 * 1.1, flaky: base[flaky]["median"] * 1e3 / 2 * 1.1}
    )
    again = {slow: gpu(base[slow]["median"] * 1e3 / 2 * 1.09), flaky: gpu(base[flaky]["median"] * 1e3 / 2)}
    runner = FakeRunner((suite(seed=1), first), (suite(seed=2), again), (suite(seed=3), again))
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--remeasure", 2, runner=runner)
    assert code == 1
    assert regression_rows(out) == [(GPU, short(slow))]
    assert section(out, "did not persist") == [short(flaky)]
    assert [call[:1] for call in runner.calls] == [["perf/"], [slow], [slow]]


def test_gpu_suspect_without_gpu_time_when_re_measured_stays_a_suspect(tmp_path, capsys):
    slow = NAMES[3]
    base = suite()
    baseline = write_results(tmp_path / "base.json", base, extra=with_gpu(base))
    first = with_gpu(base, {slow: base[slow]["median"] * 1e3})  # twice the baseline's GPU time
    runner = FakeRunner(
        (suite(seed=1), first), ({slow: base[slow]}, {slow: {"gpu_ms_absent": "profiler failed"}})
    )
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--remeasure", 1, runner=runner)
    assert code == 1  # a gate does not pass because a figure went missing
    assert regression_rows(out) == [(GPU, short(slow))]
