"""The regression gate (perf/tools/gate.py) on synthetic result files: the noise rule, re-measurement with a
fake pytest runner, the report, and every refusal (exit 2 with one line on stderr)."""

from __future__ import annotations

import json
import math
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from perf.tools import gate
from perf.tools.judging.regression_rule import classify
from perf.tools.reading.timings import IQR_PER_SIGMA, Timing, is_host_bound, median_standard_error

ROOT = Path(__file__).resolve().parent.parent
H100 = "NVIDIA H100 80GB HBM3"
NAN = float("nan")
NAMES = [
    f"perf/test_end_to_end.py::test_{mode}[naive-small-fp32-ctx{context}-warm2]"
    for mode in ("forward", "forward_backward", "train_step")
    for context in (128, 256, 512, 1024)
]


# --------------------------------------------------------------------------- synthetic result files
def stats(median: float, iqr_fraction: float = 0.02, rounds: int = 40, seed: int = 0) -> dict:
    """pytest-benchmark stats of `rounds` per-round times, normal around `median` with the given IQR."""
    sigma = median * iqr_fraction / IQR_PER_SIGMA
    if sigma > 0 and rounds > 1:
        normal = statistics.NormalDist(median, sigma)
        data = [normal.inv_cdf((i + 0.5) / rounds) for i in range(rounds)]
    else:
        data = [median] * rounds
    random.Random(seed).shuffle(data)
    q1, _, q3 = statistics.quantiles(data, n=4) if rounds > 1 else (data[0],) * 3
    return {
        "min": min(data),
        "max": max(data),
        "mean": statistics.fmean(data),
        "stddev": statistics.stdev(data) if rounds > 1 else 0.0,
        "median": statistics.median(data),
        "iqr": q3 - q1,
        "q1": q1,
        "q3": q3,
        "rounds": rounds,
        "iterations": 1,
        "data": data,
    }


def write_results(
    path: Path,
    benchmarks: dict[str, dict],
    gpu: str | None = H100,
    extra: dict[str, dict] | None = None,
    gpus: int = 1,
) -> Path:
    """A result file as `pytest --benchmark-json` writes it, with the suite's machine_info.perf;
    `extra` holds extra_info per node id, `gpus` the GPUs visible."""
    perf = {"device": "cuda" if gpu else "cpu", "cpu_model": "Intel(R) Xeon(R) Processor"}
    if gpu:
        perf["gpu"] = {"name": gpu, "count": gpus}
    entries = [
        {
            "name": name.split("::")[1],
            "fullname": name,
            "group": None,
            "stats": s,
            "extra_info": (extra or {}).get(name, {}),
        }
        for name, s in benchmarks.items()
    ]
    path.write_text(json.dumps({"machine_info": {"perf": perf}, "benchmarks": entries}))
    return path


def suite(medians: dict[str, float] | None = None, iqr_fraction: float = 0.02, seed: int = 0) -> dict:
    """Every benchmark of NAMES at 10 ms plus its index (ms), `medians` (seconds) replacing some."""
    medians = {**{name: 0.010 + i * 1e-3 for i, name in enumerate(NAMES)}, **(medians or {})}
    return {name: stats(m, iqr_fraction, seed=seed + i) for i, (name, m) in enumerate(medians.items())}


def run_gate(capsys, *argv, **kwargs) -> tuple[int, str, str]:
    """The gate's command line; a run of its own (a runner given) is on an H100 unless `machine` says."""
    if "runner" in kwargs:
        kwargs.setdefault("machine", lambda device: H100)
    code = gate.main([str(a) for a in argv], **kwargs)
    out, err = capsys.readouterr()
    return code, out, err


def compare_files(tmp_path, capsys, base: dict, current: dict) -> tuple[int, str, str]:
    """The gate on two stored runs (--baseline and --current), no measuring."""
    baseline = write_results(tmp_path / "base.json", base)
    current_file = write_results(tmp_path / "current.json", current)
    return run_gate(capsys, "--baseline", baseline, "--current", current_file)


def short(name: str) -> str:
    """How the verdict's rows show a node id of these tests: its test function and parameters, the
    shortest ending no other benchmark shares (perf/tools/reading/run_info.py's short_names)."""
    return name.split("::")[-1]


def rows_of(out: str, name: str) -> list[str]:
    """The verdict's rows of one benchmark (as shown): those ending in its name, or those under it."""
    lines = out.splitlines()
    found = []
    for i, line in enumerate(lines):
        words = line.split()
        if words and words[0] in ("gpu", "wall") and words[-1] == name:
            found.append(line)
        elif line == f"  {name}":
            for row in lines[i + 1 :]:
                if not row.startswith("    ") or row.split()[0] not in ("gpu", "wall"):
                    break
                found.append(row)
    return found


def section(out: str, title: str) -> list[str]:
    """The benchmarks listed under the section of the verdict whose title starts with `title`, as shown:
    rows ending in a benchmark's name, names heading their rows (long names), or names one per line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    inside = " " * (len(title) - len(title.lstrip()) + 2)  # a section's lines are indented deeper
    names = []
    for line in lines[start + 1 :]:
        if not line.startswith(inside):
            break
        words = line.split()
        if words[0] == "figure" or (line.startswith(inside + "  ") and words[0] in ("gpu", "wall")):
            continue  # the column header, or a row under its benchmark's name
        names.append(words[-1])
    return list(dict.fromkeys(names))  # a benchmark with two rows once


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


# --------------------------------------------------------------------------- re-measurement
class FakeRunner:
    """Stands in for `pytest ... --benchmark-json=PATH`: writes the next prepared result file."""

    def __init__(self, *runs: dict[str, dict] | tuple[dict, dict], exit_code: int = 0):
        self.runs = list(runs)
        self.exit_code = exit_code
        self.calls: list[list[str]] = []

    def __call__(self, args, json_path: Path) -> int:
        self.calls.append(list(args))
        if self.runs:
            run = self.runs.pop(0)
            # A run is its benchmarks' stats, or (stats, extra_info per node id).
            benchmarks, extra = run if isinstance(run, tuple) else (run, None)
            write_results(json_path, benchmarks, extra=extra)
        return self.exit_code


def test_suspect_that_vanishes_when_measured_again_does_not_persist(tmp_path, capsys):
    slow = NAMES[3]
    base = suite()
    runner = FakeRunner(suite({slow: base[slow]["median"] * 1.2}), {slow: base[slow]})
    baseline = write_results(tmp_path / "base.json", base)
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--", "-k", "end_to_end", runner=runner)
    assert code == 0
    assert section(out, "did not persist") == [short(slow)]
    assert "regressions (" not in out
    # perf/ first; then only the suspect, with the same options; no second re-measurement once it is gone
    assert runner.calls == [["perf/", "-k", "end_to_end"], [slow, "-k", "end_to_end"]]


def test_suspect_that_stays_in_every_re_measurement_is_a_regression(tmp_path, capsys):
    slow, flaky = NAMES[3], NAMES[7]
    base = suite()
    slower = {slow: base[slow]["median"] * 1.2, flaky: base[flaky]["median"] * 1.2}
    runner = FakeRunner(
        suite(slower), suite(slower, seed=1), {slow: stats(base[slow]["median"] * 1.15), flaky: base[flaky]}
    )
    baseline = write_results(tmp_path / "base.json", base)
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--remeasure", 2, runner=runner)
    assert code == 1
    title = "regressions (1): slower by more than 5.0% (--threshold) and the noise bound, in each of 2 "
    assert section(out, title) == [short(slow)]
    assert section(out, "did not persist") == [short(flaky)]
    assert [call[:1] for call in runner.calls] == [["perf/"], [slow], [slow]]
    assert sorted(runner.calls[1]) == sorted([slow, flaky])


def test_node_ids_replace_the_default_selection(tmp_path, capsys):
    node = "perf/test_end_to_end.py::test_forward"
    runner = FakeRunner(suite())
    baseline = write_results(tmp_path / "base.json", suite())
    assert run_gate(capsys, "--baseline", baseline, "--", node, "--tier", "cpu", runner=runner)[0] == 0
    assert runner.calls == [[node, "--tier", "cpu"]]


def test_without_re_measurement_every_suspect_is_a_regression(tmp_path, capsys):
    slow = NAMES[0]
    base = suite()
    runner = FakeRunner(suite({slow: base[slow]["median"] * 1.2}))
    baseline = write_results(tmp_path / "base.json", base)
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--remeasure", 0, runner=runner)
    assert (code, len(runner.calls)) == (1, 1)
    title = "regressions (1): slower by more than 5.0% (--threshold) and the noise bound, not measured again:"
    assert section(out, title) == [short(slow)]


def test_default_baseline_is_the_newest_of_this_machine(tmp_path, capsys):
    from perf import harness

    folder = tmp_path / harness.machine_slug(harness.resolve_device("auto"))
    folder.mkdir()
    slow = NAMES[0]
    write_results(folder / "0001_old.json", suite({slow: 0.005}))
    newest = write_results(folder / "0002_new.json", suite())
    current = write_results(tmp_path / "current.json", suite())
    code, out, _ = run_gate(capsys, "--current", current, baselines_dir=tmp_path)
    assert code == 0
    assert out.splitlines()[1] == f"baseline: {newest}"


# --------------------------------------------------------------------------- refusals: exit 2
def refused(capsys, *argv, **kwargs) -> str:
    code, out, err = run_gate(capsys, *argv, **kwargs)
    assert code == 2
    assert "PASS" not in out
    assert err.count("\n") == 1 and err.startswith("perf.tools.gate: error: ")
    return err


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    return {
        "base": write_results(tmp_path / "base.json", suite()),
        "current": write_results(tmp_path / "current.json", suite()),
    }


def test_truncated_file_is_refused_naming_it(tmp_path, capsys, files):
    truncated = tmp_path / "truncated.json"
    truncated.write_text(files["current"].read_text()[:500])
    err = refused(capsys, "--baseline", files["base"], "--current", truncated)
    assert f"--current {truncated}: not valid JSON" in err


@pytest.mark.parametrize("gpu", ["NVIDIA H200", None])
def test_file_from_another_processor_is_refused_naming_it(tmp_path, capsys, files, gpu):
    other = write_results(tmp_path / "other.json", suite(), gpu=gpu)
    err = refused(capsys, "--baseline", files["base"], "--current", other)
    assert f"--current {other} was recorded on {gpu or 'the CPU (Intel(R) Xeon(R) Processor)'}" in err
    assert f"--baseline {files['base']} on {H100}" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("", "not valid JSON"),
        ("[1, 2]", "not a result file of pytest-benchmark (no benchmarks, no machine_info): another tool's"),
        ('{"machine_info": {"perf": {}}, "benchmarks": []}', "no benchmarks in it"),
        ('{"benchmarks": [{"fullname": "x", "stats": {"median": 1.0}}]}', "no machine_info.perf"),
        ('{"machine_info": {"perf": {}}, "benchmarks": [{"fullname": "x"}]}', "benchmark x: no stats.median"),
        (
            '{"machine_info": {"perf": {}}, "benchmarks": [{"stats": {"median": 1.0}}]}',
            "benchmark #0 has no fullname",
        ),
    ],
)
def test_bad_baseline_file_is_refused(tmp_path, capsys, files, content, message):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    err = refused(capsys, "--baseline", path, "--current", files["current"])
    assert f"--baseline {path}: {message}" in err


def test_unreadable_file_is_refused(tmp_path, capsys, files):
    err = refused(capsys, "--baseline", tmp_path, "--current", files["current"])
    assert f"--baseline {tmp_path}: cannot be read" in err


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--threshold", "0"], "--threshold 0: accepted is a fraction > 0 and < 1"),
        (["--threshold", "1"], "--threshold 1: accepted is a fraction > 0 and < 1"),
        (["--threshold", "-0.1"], "--threshold -0.1: accepted"),
        (["--threshold", "five"], "argument --threshold: invalid float value: 'five'"),
        (["--z", "0"], "--z 0: accepted is a positive number"),
        (["--z", "inf"], "--z inf: accepted is a positive number"),
        (["--remeasure", "-1"], "--remeasure -1: accepted is an integer >= 0"),
        (["--host-bound-threshold", "1"], "--host-bound-threshold 1: accepted is a fraction > 0 and < 1"),
        (["--remeasure", "1.5"], "argument --remeasure: invalid int value"),
        (["--color"], "unrecognized arguments: --color"),
        (["--", "-k", "forward"], "leave them out with --current"),
    ],
)
def test_bad_option_is_refused(capsys, files, option, message):
    err = refused(capsys, "--baseline", files["base"], "--current", files["current"], *option)
    assert message in err


def test_no_stored_baseline_for_this_machine_is_refused(tmp_path, capsys, files):
    err = refused(capsys, "--current", files["current"], baselines_dir=tmp_path / "empty")
    assert "no stored baseline for " in err and "give --baseline FILE" in err


def test_run_on_another_processor_than_the_baseline_is_refused_before_anything_runs(capsys, files):
    runner = FakeRunner(suite())
    other = write_results(files["base"].with_name("h200.json"), suite(), gpu="NVIDIA H200")
    err = refused(capsys, "--baseline", other, runner=runner)
    assert f"--baseline {other} was recorded on NVIDIA H200, this run would be on {H100}" in err
    assert "(nothing was run)" in err and runner.calls == []


def test_the_device_among_pytest_arguments_decides_the_machine(capsys, files):
    asked = []
    machine = lambda device: asked.append(device) or "the CPU (Intel(R) Xeon(R) Processor)"  # noqa: E731
    err = refused(
        capsys, "--baseline", files["base"], "--", "--device=cpu", runner=FakeRunner(), machine=machine
    )
    assert asked == ["cpu"] and "this run would be on the CPU" in err


def test_a_selection_that_does_not_exist_is_refused_before_anything_runs(capsys, files):
    runner = FakeRunner(suite())
    err = refused(capsys, "--baseline", files["base"], "--", "perf/test_nope.py", runner=runner)
    assert "perf/test_nope.py: no such file or folder under perf/" in err and runner.calls == []


def test_failed_pytest_run_is_refused(capsys, files):
    runner = FakeRunner(suite(), exit_code=1)
    err = refused(capsys, "--baseline", files["base"], "--", "-k", "forward", runner=runner)
    assert "`pytest perf/ -k forward` failed with exit code 1" in err


def test_pytest_run_without_benchmarks_is_refused(capsys, files):
    runner = FakeRunner(exit_code=5)  # nothing collected: pytest writes no result file
    err = refused(capsys, "--baseline", files["base"], "--", "-k", "nothing", runner=runner)
    assert "ran no benchmark (exit code 5)" in err


def test_failed_re_measurement_is_refused(capsys, files):
    slow = NAMES[0]
    base = json.loads(files["base"].read_text())["benchmarks"][0]["stats"]["median"]
    runner = FakeRunner(suite({slow: base * 1.2}))

    def failing_second_run(args, json_path):
        code = runner(args, json_path)
        return code if len(runner.calls) == 1 else 1  # a test failed (2 would be an interrupt)

    err = refused(capsys, "--baseline", files["base"], runner=failing_second_run)
    assert f"`pytest {slow}` failed with exit code 1" in err


# --------------------------------------------------------------------------- the module entry point
def test_module_entry_point_exit_codes(tmp_path, files):
    slow = NAMES[0]
    base = json.loads(files["base"].read_text())["benchmarks"][0]["stats"]["median"]
    slower = write_results(tmp_path / "slower.json", suite({slow: base * 1.2}))
    command = [sys.executable, "-m", "perf.tools.gate", "--baseline", str(files["base"]), "--current"]
    failed = subprocess.run([*command, str(slower)], cwd=ROOT, capture_output=True, text=True, check=False)
    assert failed.returncode == 1, failed.stderr
    assert "FAIL: 1 regression" in failed.stdout and short(slow) in failed.stdout
    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"benchmarks": [')
    refusal = subprocess.run(
        [*command, str(truncated)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert refusal.returncode == 2
    assert refusal.stderr.startswith(f"perf.tools.gate: error: --current {truncated}: not valid JSON")
    assert "Traceback" not in refusal.stderr


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as exit_info:
        gate.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--baseline", "--current", "--threshold", "--host-bound-threshold", "--z", "--remeasure"):
        assert option in out


def test_save_keeps_the_runs_results(tmp_path, capsys):
    base = suite()
    baseline = write_results(tmp_path / "base.json", base)
    saved = tmp_path / "artifacts" / "current.json"
    code, _, _ = run_gate(capsys, "--baseline", baseline, "--save", saved, runner=FakeRunner(suite()))
    assert code == 0
    assert {b["fullname"] for b in json.loads(saved.read_text())["benchmarks"]} == set(base)


def test_save_with_current_is_refused(tmp_path, capsys):
    files = {name: write_results(tmp_path / f"{name}.json", suite()) for name in ("base", "now")}
    err = refused(
        capsys, "--baseline", files["base"], "--current", files["now"], "--save", tmp_path / "x.json"
    )
    assert "--save keeps the results of the gate's own run" in err
