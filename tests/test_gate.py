"""The regression gate (perf/tools/gate.py) on synthetic result files: the noise rule, comparisons of
stored files, host-bound benchmarks."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from perf.tools.judging.regression_rule import classify
from perf.tools.reading.timings import Timing, is_host_bound, median_standard_error
from tests.gate_files import (
    NAMES,
    NAN,
    FakeRunner,
    compare_files,
    rows_of,
    run_gate,
    section,
    short,
    stats,
    suite,
    write_results,
)


# --------------------------------------------------------------------------- the rule
@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (Timing(10.0, 0.05), Timing(11.0, 0.05), "slower"),  # 10% > 5%, 1.0 > 3 * 0.07
        (Timing(10.0, 0.05), Timing(9.0, 0.05), "faster"),
        (Timing(10.0, 0.05), Timing(10.4, 0.05), "unchanged"),  # beyond noise, under the threshold
        (Timing(10.0, 0.5), Timing(11.0, 0.5), "unchanged"),  # over the threshold, 1.0 < 3 * 0.71
        (Timing(10.0, 0.5), Timing(9.0, 0.5), "unchanged"),
        (Timing(10.0, None), Timing(10.6, 5.0), "slower"),  # one round: the threshold alone
        (Timing(10.0, 0.0), Timing(10.6, 0.0), "slower"),  # identical rounds: no spread to exceed
    ],
)
def test_classify(before, after, expected):
    assert classify(before, after, threshold=0.05, z=3.0) == expected


@pytest.mark.parametrize(
    ("threshold", "z", "message"),
    [
        (0.0, 3.0, "threshold must"),
        (math.inf, 3.0, "threshold must"),
        (0.05, 0.0, "z must"),
        (0.05, NAN, "z must"),
    ],
)
def test_classify_rejects_bad_bounds(threshold, z, message):
    with pytest.raises(ValueError, match=message):
        classify(Timing(1.0, 0.1), Timing(1.0, 0.1), threshold, z)


def test_median_standard_error():
    # sigma = IQR / 1.349; se = 1.2533 sigma / sqrt(rounds)
    assert median_standard_error({"rounds": 25, "iqr": 1.349, "stddev": 9.0}) == pytest.approx(
        1.2533 / 5, 1e-4
    )
    # IQR 0 (rounds at the timer's resolution): the standard deviation stands in
    assert median_standard_error({"rounds": 4, "iqr": 0.0, "stddev": 2.0}) == pytest.approx(1.2533, 1e-4)
    assert median_standard_error({"rounds": 1, "iqr": 1.0, "stddev": 1.0}) is None


# --------------------------------------------------------------------------- comparisons of files
@pytest.mark.parametrize("seed", range(5))
def test_unchanged_results_with_realistic_noise_pass(tmp_path, capsys, seed):
    rng = random.Random(seed)
    base = suite({n: 0.010 * (1 + i / 10) for i, n in enumerate(NAMES)}, iqr_fraction=0.025, seed=seed)
    moved = {n: s["median"] * (1 + rng.choice((-1, 1)) * rng.uniform(0.01, 0.02)) for n, s in base.items()}
    current = {n: stats(m, rng.uniform(0.02, 0.03), seed=100 + i) for i, (n, m) in enumerate(moved.items())}
    code, out, err = compare_files(tmp_path, capsys, base, current)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == lines[-1] == f"PASS: no regression, {len(NAMES)} benchmarks compared"
    counts = "0 regressed, 0 did not persist, 0 host-bound slower, 0 host noise, 0 clock moved, 0 faster, "
    assert f"{len(NAMES)} compared: {counts}" in out


def test_ten_percent_slowdown_with_two_percent_noise_fails_naming_only_it(tmp_path, capsys):
    slow = NAMES[5]
    base = suite()
    current = suite({slow: base[slow]["median"] * 1.10}, seed=50)
    code, out, _ = compare_files(tmp_path, capsys, base, current)
    assert code == 1
    assert section(out, "regressions") == [short(slow)]
    assert [name for name in NAMES if short(name) in out] == [slow]
    lines = out.splitlines()
    assert lines[0] == lines[-1] == f"FAIL: 1 regression (1 in wall time), {len(NAMES)} benchmarks compared"
    # The threshold it was judged at, and where that came from, once for the rows that share it.
    assert "regressions (1): slower by more than 5.0% (--threshold) and the noise bound" in out
    row = next(line for line in lines if line.endswith(short(slow)))
    figure, base_ms, current_ms, ratio, noise_ms = row.split()[:5]
    base_ms, current_ms, ratio, noise_ms = map(float, (base_ms, current_ms, ratio, noise_ms))
    assert figure == "wall"  # the figure that regressed: these results have no GPU time
    assert ratio == pytest.approx(1.10, abs=1e-3)
    assert current_ms - base_ms > noise_ms > 0


def test_ten_percent_slowdown_within_its_own_thirty_percent_spread_passes(tmp_path, capsys):
    noisy = NAMES[2]
    base = {**suite(), noisy: stats(0.012, iqr_fraction=0.30)}
    current = {**suite(seed=9), noisy: stats(0.012 * 1.10, iqr_fraction=0.30, seed=3)}
    code, out, _ = compare_files(tmp_path, capsys, base, current)
    assert code == 0
    assert noisy not in out


def test_improvements_new_and_missing_are_listed_and_do_not_fail(tmp_path, capsys):
    faster, gone = NAMES[0], NAMES[1]
    added = "perf/test_matmul.py::test_matmul[n4096]"
    base = suite()
    current = suite({faster: base[faster]["median"] * 0.8})
    del current[gone]
    current[added] = stats(0.02)
    code, out, _ = compare_files(tmp_path, capsys, base, current)
    assert code == 0
    assert section(out, "improvements") == [short(faster)]
    # Counted, named on request: the current file records no selection, so the one it lacks is missing.
    assert "not compared: 1 new, 1 missing (--list new,missing names them)" in out.splitlines()
    assert added not in out and gone not in out
    assert out.splitlines()[-1] == f"PASS: no regression, {len(NAMES) - 1} benchmarks compared"
    code, out, _ = run_gate(
        capsys,
        "--baseline",
        tmp_path / "base.json",
        "--current",
        tmp_path / "current.json",
        "--list",
        "new,missing",
    )
    assert section(out, "  1 new: not in the baseline") == [added]
    assert section(out, "  1 missing: not in the current file, which records no selection") == [gone]
    assert "--list new,missing names them" not in out


def _collective(world: int, size: str) -> str:
    return f"perf/test_collectives.py::test_collective[all_reduce-bf16-out_of_place-nccl-world{world}-{size}]"


def test_a_baseline_of_other_world_sizes_is_not_comparable_and_never_fails(tmp_path, capsys):
    """A two-GPU baseline compared on one GPU, and a run under torchrun at another world size: the
    baseline's distributed rows are set apart as not comparable, never missing, never failing."""
    two_gpu = {_collective(2, size): stats(0.004) for size in ("1MiB", "1GiB")}
    extra = {name: {"world_size": 2} for name in two_gpu}
    baseline = write_results(tmp_path / "base.json", {**suite(), **two_gpu}, extra=extra, gpus=2)
    one_gpu = write_results(tmp_path / "one.json", suite())
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", one_gpu, "--list", "missing")
    assert code == 0
    lines = out.splitlines()
    assert "not compared: 2 at other world sizes" in lines
    start = lines.index("  2 at other world sizes: not comparable, never failing")
    assert lines[start + 1 : start + 5] == [
        "    the baseline's at world size(s) 2, measured on 2 GPU(s)",
        "    the current file: no distributed benchmark on 1 GPU(s)",
        *(f"    {name}" for name in sorted(two_gpu)),
    ]
    assert "missing" not in out.split("not compared:")[2] and lines[-1].startswith("PASS")

    # Four ranks under torchrun against the two-rank baseline: its own rows are new, the baseline's apart.
    four = {_collective(4, "1MiB"): stats(0.009)}
    torchrun = write_results(
        tmp_path / "four.json", {**suite(), **four}, extra={n: {"world_size": 4} for n in four}, gpus=4
    )
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", torchrun, "--list", "new")
    assert code == 0
    assert "    the current file: world size(s) 4 on 4 GPU(s)" in out.splitlines()
    assert section(out, "  1 new") == list(four)
    # The same world size in both is compared as usual, and a slowdown there fails.
    slower = {_collective(2, "1MiB"): stats(0.004 * 1.5)}
    same = write_results(tmp_path / "same.json", {**suite(), **slower}, extra=extra, gpus=2)
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", same, "--list", "missing")
    assert code == 1 and section(out, "regressions") == [short(name) for name in slower]
    assert "other world sizes" not in out and section(out, "  1 missing") == [_collective(2, "1GiB")]


# --------------------------------------------------------------------------- host-bound benchmarks
def host_ms(median_s: float, share: float) -> dict:
    """extra_info of a call that keeps the host busy for `share` of its median time."""
    return {"median_ms": median_s * 1e3, "host_ms": share * median_s * 1e3}


def host_bound_files(
    tmp_path, host_share_before: float, host_share_after: float
) -> tuple[Path, Path, str, str]:
    """NAMES[0] 20% slower with the given host shares, NAMES[1] (GPU-bound) 10% slower."""
    launch_bound, gpu_bound = NAMES[0], NAMES[1]
    base = suite()
    slower = {launch_bound: base[launch_bound]["median"] * 1.2, gpu_bound: base[gpu_bound]["median"] * 1.1}
    current = suite(slower, seed=7)
    before = {launch_bound: host_ms(base[launch_bound]["median"], host_share_before)}
    after = {launch_bound: host_ms(current[launch_bound]["median"], host_share_after)}
    return (
        write_results(tmp_path / "base.json", base, extra=before),
        write_results(tmp_path / "current.json", current, extra=after),
        launch_bound,
        gpu_bound,
    )


def test_host_bound_slowdown_within_its_threshold_is_listed_and_a_gpu_bound_one_fails(tmp_path, capsys):
    baseline, current, launch_bound, gpu_bound = host_bound_files(tmp_path, 0.95, 0.97)
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", current)
    assert code == 1
    assert section(out, "regressions") == [short(gpu_bound)]
    # Listed with the threshold it was judged at, and where that came from.
    title = "host-bound slower (1, never failing): wall time slower by more than 5% but within 25.0% "
    assert section(out, title + "(--host-bound-threshold)") == [short(launch_bound)]
    assert ", 1 host-bound slower, " in out.splitlines()[5]


def test_host_bound_threshold_option_sets_their_threshold(tmp_path, capsys):
    baseline, current, launch_bound, gpu_bound = host_bound_files(tmp_path, 0.95, 0.97)
    code, out, _ = run_gate(
        capsys, "--baseline", baseline, "--current", current, "--host-bound-threshold", 0.1
    )
    assert code == 1
    assert section(out, "regressions") == [short(launch_bound), short(gpu_bound)]
    assert "host-bound slower (" not in out
    # Each row shows the threshold it was judged at: the host-bound one's is --host-bound-threshold's.
    assert "10.0% (--host-bound-threshold)" in rows_of(out, short(launch_bound))[0]
    assert "5.0% (--threshold)" in rows_of(out, short(gpu_bound))[0]


def test_host_bound_slowdown_beyond_its_threshold_fails(tmp_path, capsys):
    launch_bound = NAMES[0]
    base = suite()
    current = write_results(tmp_path / "c.json", suite({launch_bound: base[launch_bound]["median"] * 1.3}))
    before = {launch_bound: host_ms(base[launch_bound]["median"], 0.95)}
    baseline = write_results(tmp_path / "base.json", base, extra=before)
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", current)
    assert code == 1
    assert section(out, "regressions") == [short(launch_bound)]
    assert "slower by more than 25.0% (--host-bound-threshold) and the noise bound" in out


def test_benchmark_that_became_host_bound_is_judged_as_gpu_bound(tmp_path, capsys):
    """A change that makes the GPU wait on the host (a sync per step) must not hide behind the rule."""
    baseline, current, launch_bound, gpu_bound = host_bound_files(tmp_path, 0.3, 0.97)
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", current)
    assert code == 1
    assert section(out, "regressions") == [short(launch_bound), short(gpu_bound)]
    assert "--host-bound-threshold)" not in out.split("regressions")[1]  # both judged at --threshold


def test_host_bound_threshold_applies_to_re_measurements(tmp_path, capsys):
    launch_bound = NAMES[0]
    base = suite()
    before = {launch_bound: host_ms(base[launch_bound]["median"], 0.95)}
    baseline = write_results(tmp_path / "base.json", base, extra=before)
    runner = FakeRunner(
        suite({launch_bound: base[launch_bound]["median"] * 1.3}),
        {launch_bound: stats(base[launch_bound]["median"] * 1.15)},  # > 5%, < 20%: not slower
    )
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--host-bound-threshold", 0.2, runner=runner)
    assert code == 0
    assert section(out, "did not persist") == [short(launch_bound)]


@pytest.mark.parametrize(
    "info, expected",
    [
        ({"median_ms": 10.0, "host_ms": 8.0}, True),
        ({"median_ms": 10.0, "host_ms": 7.9}, False),
        ({"median_ms": 10.0, "host_ms": 30.0}, True),  # a single call from an idle GPU can take longer
        ({"median_ms": 10.0}, False),
        ({"median_ms": 10.0, "host_ms": None}, False),
        ({"median_ms": 0, "host_ms": 1.0}, False),
        ("not a dict", False),
    ],
)
def test_is_host_bound(info, expected):
    assert is_host_bound(info) is expected
