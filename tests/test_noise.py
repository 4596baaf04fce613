"""The runner's noise file (perf/tools/noise.py, perf/tools/judging/noise_spread.py) and what the gate makes
of it: each benchmark's GPU time judged at max(floor, k x its own run-to-run spread), the clock beside a
slowdown, and a regression explained kernel by kernel; every bad input a note and a fallback."""

from __future__ import annotations

import json
import shutil

import pytest

from perf.tools import noise
from perf.tools.judging.noise_spread import K_MAX, choose_k, spread
from perf.tools.judging.noise_thresholds import load_noise
from perf.tools.judging.regression_rule import GPU_FLOOR
from tests.gate_files import H100, NAMES, rows_of, run_gate, section, short, stats, write_results

STEADY, NOISY = NAMES[0], NAMES[1]


def gpu_info(ms: float, sm_mhz: float | None = None, kernels: list | None = None) -> dict:
    """extra_info of a benchmark whose calls kept the GPU busy for `ms` (a tight spread over 20 calls)."""
    info = {"gpu_ms": ms, "gpu_ms_iqr": ms * 0.001, "gpu_ms_stddev": ms * 0.001, "gpu_calls": 20}
    if sm_mhz is not None:
        info["clocks"] = {"sm_mhz_mean": sm_mhz, "sm_mhz_min": sm_mhz - 30, "samples": 40}
    if kernels is not None:
        info["gpu_kernels"] = kernels
    return info


def result(tmp_path, name: str, gpu_ms: dict[str, float], gpu: str = H100, **info) -> str:
    """A result file of the benchmarks of `gpu_ms` with those GPU times; their wall times unchanged from
    base_ms()'s (2x), so that only the GPU time moves."""
    benchmarks = {n: stats(2 * base_ms()[n] / 1e3, 0.02, seed=i) for i, n in enumerate(gpu_ms)}
    extra = {n: gpu_info(ms, **info.get(n, {})) for n, ms in gpu_ms.items()}
    return str(write_results(tmp_path / name, benchmarks, gpu=gpu, extra=extra))


def base_ms() -> dict[str, float]:
    return {name: 10.0 + i for i, name in enumerate(NAMES)}


def noise_runs(tmp_path, wobble: dict[str, float]) -> list[str]:
    """Three runs of NAMES whose GPU times wobble by +-`wobble` (a fraction) around base_ms()."""
    files = []
    for r, sign in enumerate((0, 1, -1)):
        ms = {n: m * (1 + sign * wobble.get(n, 0.001)) for n, m in base_ms().items()}
        files.append(result(tmp_path, f"run{r}.json", ms))
    return files


def on_h100(device: str) -> str:
    """The processor a run here would be recorded on, as if this machine had the H100 of the runs."""
    return H100


class CopyRunner:
    """Stands in for `pytest ... --benchmark-json=PATH`: copies the next result file there, exits with the
    next code (0 once they run out)."""

    def __init__(self, files: list[str], codes: tuple[int, ...] = ()):
        self.files, self.codes, self.calls = list(files), list(codes), []

    def __call__(self, args, json_path) -> int:
        self.calls.append(list(args))
        if self.files:
            shutil.copyfile(self.files.pop(0), json_path)
        return self.codes.pop(0) if self.codes else 0


@pytest.fixture
def noise_file(tmp_path, capsys):
    runs = noise_runs(tmp_path, {NOISY: 0.02})
    out = tmp_path / "noise.json"
    assert noise.main(["--from", *runs, "--out", str(out)]) == 0
    capsys.readouterr()
    return out, runs


# --------------------------------------------------------------------------- the noise file
def test_spread_is_the_largest_ratio_less_one():
    assert spread([10.0, 10.2, 9.9]) == pytest.approx(10.2 / 9.9 - 1)


def test_k_is_what_the_left_out_run_needed():
    # Two benchmarks: one whose third run fell 3% off the farther of two that agreed within 1%: k 3.
    k, basis = choose_k({"a": [100.0, 101.0, 103.0], "b": [50.0, 50.1, 50.05]})
    assert k == pytest.approx(3.0, rel=0.01) and basis["set_by"] == "a" and not basis["capped"]
    # Within the floor everywhere: k stays at its least, 1.
    assert choose_k({"a": [100.0, 100.5, 101.0]})[0] == 1.0
    # Two runs that agreed exactly and a third far off: capped.
    k, basis = choose_k({"a": [100.0, 100.0, 110.0]})
    assert k == K_MAX and basis["capped"]


def test_noise_file_holds_each_benchmarks_spread_and_the_noise_runs_pass_against_each_other(
    tmp_path, capsys, noise_file
):
    out, runs = noise_file
    data = json.loads(out.read_text())
    assert data["gpu"] == H100 and len(data["runs"]) == 3 and data["floor"] == GPU_FLOOR
    assert data["benchmarks"][NOISY]["gpu_spread"] == pytest.approx(1.02 / 0.98 - 1, rel=1e-4)
    loaded = load_noise(out)
    assert loaded.threshold(STEADY).source == "floor" and loaded.threshold(STEADY).value == GPU_FLOOR
    # The larger of k x its spread and the family-wise bound on its sd, one run against one (sqrt 2).
    by_sd = loaded.figures["gpu"].z_sd * data["benchmarks"][NOISY]["gpu_sd"] * 2**0.5
    assert loaded.threshold(NOISY).value == pytest.approx(max(loaded.k * (1.02 / 0.98 - 1), by_sd), rel=1e-4)
    assert data["benchmarks"][NOISY]["gpu_sd"] > 0 and loaded.figures["gpu"].z_sd > 3
    for i, baseline in enumerate(runs):  # never fail the runs the file was made of
        for current in runs[:i] + runs[i + 1 :]:
            code, output, _ = run_gate(capsys, "--baseline", baseline, "--current", current, "--noise", out)
            assert code == 0, output


def test_noise_runs_the_selection_n_times_and_writes_whole(tmp_path, capsys):
    runs = noise_runs(tmp_path, {})
    runner = CopyRunner(runs)
    out = tmp_path / "gpu" / "noise.json"
    code = noise.main(
        ["--runs", "3", "--out", str(out), "--", "--tier", "pr"], runner=runner, machine=on_h100
    )
    assert code == 0 and len(runner.calls) == 3
    assert all(call[:3] == ["perf/", "--tier", "pr"] for call in runner.calls)
    printed = capsys.readouterr().out
    assert f"{len(NAMES)} benchmarks over 3 runs written to {out}" in printed
    assert f"GPU-time thresholds of {len(NAMES)} benchmarks: {len(NAMES)} at the floor" in printed
    assert not list(out.parent.glob(".*.writing"))  # no temporary file left


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--runs", "1"], "--runs 1: accepted is an integer >= 2"),
        (["--from"], "expected at least one argument"),
    ],
)
def test_bad_options_write_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "noise.json"
    assert noise.main([*argv, "--out", str(out)], runner=CopyRunner([]), machine=on_h100) == 2
    assert message in capsys.readouterr().err and not out.exists()


def test_runs_of_two_gpus_are_refused_and_an_existing_file_stays(tmp_path, capsys):
    out = tmp_path / "noise.json"
    out.write_text("{}")
    h200 = result(tmp_path, "h200.json", base_ms(), gpu="NVIDIA H200")
    code = noise.main(["--from", *noise_runs(tmp_path, {})[:2], h200, "--out", str(out)])
    assert code == 2 and "results of different processors are not comparable" in capsys.readouterr().err
    assert out.read_text() == "{}"


def test_a_failed_run_writes_nothing(tmp_path, capsys):
    out = tmp_path / "noise.json"
    runner = CopyRunner(noise_runs(tmp_path, {}), codes=(0, 1))
    assert noise.main(["--out", str(out)], runner=runner, machine=on_h100) == 2
    assert "failed with exit code 1" in capsys.readouterr().err and not out.exists()


def test_without_a_gpu_it_refuses_in_one_line_and_runs_nothing(tmp_path, capsys):
    out, runner = tmp_path / "noise.json", CopyRunner([])
    code = noise.main(["--out", str(out)], runner=runner, machine=lambda device: "the CPU (Xeon)")
    err = capsys.readouterr().err
    assert code == 2 and runner.calls == [] and not out.exists()
    assert err.count("\n") == 1 and "no CUDA GPU in use (the CPU (Xeon))" in err


def test_runs_without_gpu_time_write_no_noise_file(tmp_path, capsys):
    out = tmp_path / "noise.json"
    files = [
        str(write_results(tmp_path / f"cpu{i}.json", {NAMES[0]: stats(0.01, 0.02, seed=i)})) for i in range(3)
    ]
    assert noise.main(["--from", *files, "--out", str(out)]) == 2
    assert "no benchmark has GPU time in every run" in capsys.readouterr().err and not out.exists()


def test_an_interrupted_run_ends_in_one_line_naming_the_partial_results(tmp_path, capsys):
    out, keep = tmp_path / "noise.json", tmp_path / "runs"

    def interrupted(args, json_path) -> int:  # pytest stopped by Ctrl-C: its partial results, exit code 2
        shutil.copyfile(noise_runs(tmp_path, {})[0], json_path.with_name(f"{json_path.stem}.partial.json"))
        return 2

    code = noise.main(["--keep", str(keep), "--out", str(out)], runner=interrupted, machine=on_h100)
    err = capsys.readouterr().err
    assert code == 130 and err.count("\n") == 1 and not out.exists()
    assert f"was interrupted; its partial results are in {keep / 'run1.partial.json'}" in err
    assert (keep / "run1.partial.json").is_file() and not (keep / "run1.json").exists()


# --------------------------------------------------------------------------- the gate with it
def slower(factor: dict[str, float]) -> dict:
    return {n: m * factor.get(n, 1.0) for n, m in base_ms().items()}


def test_a_small_gpu_slowdown_fails_at_its_own_threshold_and_passes_without_a_noise_file(
    tmp_path, capsys, noise_file
):
    out, runs = noise_file
    current = result(tmp_path, "current.json", slower({STEADY: 1.03, NOISY: 1.03}))
    code, output, _ = run_gate(capsys, "--baseline", runs[0], "--current", current, "--noise", out)
    assert code == 1, output
    assert section(output, "regressions") == [short(STEADY)]  # 3% beyond the floor; NOISY's spread is 4%
    assert "regressions (1): slower by more than 1.5% (floor) and the noise bound" in output
    assert [row.split()[0] for row in rows_of(output, short(STEADY))] == ["gpu"]
    assert f"noise: {out} (3 runs" in output
    code, output, _ = run_gate(capsys, "--baseline", runs[0], "--current", current, "--noise", "off")
    assert code == 0 and "GPU and wall time judged at --threshold 5%" in output


@pytest.mark.parametrize(
    ("content", "note"),
    [
        ("{not json", "cannot be read as JSON"),
        ('{"format": "something else"}', "not a noise file of this suite"),
        ('{"format": "perf-noise/1", "k": -1, "floor": 0.015, "gpu": "x", "benchmarks": {}}', "damaged"),
    ],
)
def test_a_damaged_noise_file_is_a_note_and_the_threshold(tmp_path, capsys, noise_file, content, note):
    _, runs = noise_file
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    current = result(tmp_path, "current.json", slower({STEADY: 1.03}))
    code, output, _ = run_gate(capsys, "--baseline", runs[0], "--current", current, "--noise", bad)
    assert code == 0  # judged at 5%, not failed for the file's sake
    assert f"noise: not used, {bad}: " in output and note in output and "--threshold 5%" in output


def test_a_noise_file_of_another_gpu_is_not_used(tmp_path, capsys, noise_file):
    out, runs = noise_file
    data = json.loads(out.read_text())
    data["gpu"] = "NVIDIA H200"
    out.write_text(json.dumps(data))
    current = result(tmp_path, "current.json", slower({STEADY: 1.03}))
    code, output, _ = run_gate(capsys, "--baseline", runs[0], "--current", current, "--noise", out)
    assert code == 0 and "was measured on NVIDIA H200, the baseline on NVIDIA H100" in output


def test_benchmarks_the_noise_file_does_not_know_are_judged_at_the_threshold(tmp_path, capsys, noise_file):
    out, runs = noise_file
    data = json.loads(out.read_text())
    del data["benchmarks"][STEADY]
    out.write_text(json.dumps(data))
    current = result(tmp_path, "current.json", slower({STEADY: 1.03}))
    code, output, _ = run_gate(capsys, "--baseline", runs[0], "--current", current, "--noise", out)
    assert code == 0
    assert "1 benchmark(s) not in the noise file" in output


def test_the_noise_file_beside_the_baselines_is_found(tmp_path, capsys, noise_file):
    out, runs = noise_file
    folder = tmp_path / "baselines" / "nvidia-h100-80gb-hbm3"
    folder.mkdir(parents=True)
    (folder / "noise.json").write_text(out.read_text())
    current = result(tmp_path, "current.json", slower({STEADY: 1.03}))
    code, output, _ = run_gate(
        capsys, "--baseline", runs[0], "--current", current, baselines_dir=tmp_path / "baselines"
    )
    assert code == 1 and f"noise: {folder / 'noise.json'}" in output
    code, output, _ = run_gate(capsys, "--baseline", runs[0], "--current", current, baselines_dir=tmp_path)
    assert code == 0 and "noise: no " in output and "(`make noise` measures it)" in output


# --------------------------------------------------------------------------- the clock beside it
def test_a_slowdown_the_clock_explains_is_listed_not_failed(tmp_path, capsys):
    base = result(tmp_path, "base.json", base_ms(), **{STEADY: {"sm_mhz": 1980.0}})
    # 4% slower with a 4.5% lower clock: within 5% at the baseline's clock.
    current = result(tmp_path, "current.json", slower({STEADY: 1.04}), **{STEADY: {"sm_mhz": 1890.0}})
    code, output, _ = run_gate(
        capsys, "--baseline", base, "--current", current, "--noise", "off", "--threshold", "0.02"
    )
    assert code == 0, output
    assert section(output, "clock moved") == [short(STEADY)]
    assert "1980->1890" in output


def test_a_slowdown_beyond_what_the_clock_explains_still_fails_with_the_clock_beside_it(tmp_path, capsys):
    base = result(tmp_path, "base.json", base_ms(), **{STEADY: {"sm_mhz": 1980.0}})
    current = result(tmp_path, "current.json", slower({STEADY: 1.08}), **{STEADY: {"sm_mhz": 1880.0}})
    code, output, _ = run_gate(
        capsys, "--baseline", base, "--current", current, "--noise", "off", "--threshold", "0.02"
    )
    assert code == 1
    row = next(row for row in rows_of(output, short(STEADY)) if row.split()[0] == "gpu")
    assert "1980->1880" in row
    assert "1 GPU-time regression(s) ran at a lower SM clock" in output


def test_a_slowdown_at_the_same_clock_is_not_the_clocks(tmp_path, capsys):
    base = result(tmp_path, "base.json", base_ms(), **{STEADY: {"sm_mhz": 1980.0}})
    current = result(tmp_path, "current.json", slower({STEADY: 1.04}), **{STEADY: {"sm_mhz": 1975.0}})
    code, output, _ = run_gate(
        capsys, "--baseline", base, "--current", current, "--noise", "off", "--threshold", "0.02"
    )
    assert code == 1 and "clock moved:" not in output


# --------------------------------------------------------------------------- explained kernel by kernel
def kernels(gemm_us: float, added: bool = False) -> list[dict]:
    rows = [
        {"kernel": "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", "launches": 24.0, "us": gemm_us},
        {
            "kernel": "vectorized_elementwise_kernel<4, CUDAFunctor_add<BFloat16>>",
            "launches": 50.0,
            "us": 900.0,
        },
    ]
    if added:
        rows.insert(1, {"kernel": "sin_kernel_cuda", "launches": 12.0, "us": 310.0})
    return rows


def test_a_regression_names_the_kernels_that_changed(tmp_path, capsys):
    base = result(tmp_path, "base.json", base_ms(), **{STEADY: {"kernels": kernels(9000.0)}})
    current = result(
        tmp_path,
        "current.json",
        slower({STEADY: 1.031}),
        **{STEADY: {"kernels": kernels(9000.0, added=True)}},
    )
    code, output, _ = run_gate(
        capsys, "--baseline", base, "--current", current, "--noise", "off", "--threshold", "0.02"
    )
    assert code == 1
    explained = output[output.index("what changed inside") :]
    assert short(STEADY) in explained and "sin_kernel_cuda" in explained and "+310" in explained
    assert "nvjet" not in explained  # unchanged kernels are left out


def test_without_kernel_tables_the_gate_says_why_there_is_no_breakdown(tmp_path, capsys):
    base = result(tmp_path, "base.json", base_ms())
    current = result(
        tmp_path, "current.json", slower({STEADY: 1.031}), **{STEADY: {"kernels": kernels(9000.0)}}
    )
    code, output, _ = run_gate(
        capsys, "--baseline", base, "--current", current, "--noise", "off", "--threshold", "0.02"
    )
    assert code == 1
    lines = output.splitlines()
    reason = next(i for i, line in enumerate(lines) if line.startswith("  1 without a kernel breakdown: "))
    assert "the baseline has no kernel table" in lines[reason] and lines[reason + 1] == f"    {short(STEADY)}"


# --------------------------------------------------------------------------- a narrower selection
def test_benchmarks_outside_the_runs_selection_are_counted_and_selected_ones_listed(tmp_path, capsys):
    base = result(tmp_path, "base.json", base_ms())
    kept = {n: m for n, m in base_ms().items() if n not in (NAMES[2], NAMES[3])}
    current = tmp_path / "current.json"
    result(tmp_path, "current.json", kept)
    data = json.loads(current.read_text())
    data["perf"] = {"tier": "pr", "selected": [n for n in NAMES if n != NAMES[3]]}  # NAMES[2] skipped
    current.write_text(json.dumps(data))
    code, output, _ = run_gate(
        capsys, "--baseline", base, "--current", current, "--noise", "off", "--list", "missing"
    )
    assert code == 0
    assert section(output, "  1 missing: selected by the current file, no result") == [NAMES[2]]
    assert section(output, "  1 outside the current file's selection") == [NAMES[3]]


# --------------------------------------------------------------------------- wall time and methods
def mixed_result(tmp_path, name: str, wall_ms: dict, gpu_ms: dict, method: str | None = None, **info) -> str:
    """A result file with the given wall and GPU medians per benchmark; `method` its gpu_method."""
    benchmarks = {n: stats(ms / 1e3, 0.001, seed=i) for i, (n, ms) in enumerate(wall_ms.items())}
    extra = {
        n: gpu_info(ms) | ({"gpu_method": method} if method else {}) | info.get(n, {})
        for n, ms in gpu_ms.items()
    }
    return str(write_results(tmp_path / name, benchmarks, extra=extra))


def test_wall_time_is_judged_at_its_own_noise_and_a_host_bound_step_is_known_by_its_runs(tmp_path, capsys):
    # STEADY's wall stays within 0.5%; NOISY's wall moves by 10% while its GPU time holds: host-bound.
    gpu = {STEADY: 5.0, NOISY: 5.0}
    runs = [
        mixed_result(
            tmp_path, f"run{i}.json", {STEADY: 10.0 * (1 + d / 2), NOISY: 20.0 * (1 + 5 * d)}, gpu, "burst"
        )
        for i, d in enumerate((0.0, 0.01, -0.01))
    ]
    out = tmp_path / "noise.json"
    assert noise.main(["--from", *runs, "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["benchmarks"][NOISY]["host_bound"] and not data["benchmarks"][STEADY]["host_bound"]
    assert data["benchmarks"][STEADY]["gpu_method"] == "burst" and data["wall_floor"] == 0.02
    loaded = load_noise(out)
    assert loaded.threshold(STEADY, "wall").value == pytest.approx(
        data["k_wall"] * (1.005 / 0.995 - 1), rel=1e-3
    )
    assert loaded.threshold(NOISY, "wall").value == pytest.approx(
        data["k_wall"] * (1.05 / 0.95 - 1), rel=1e-3
    )
    for i, baseline in enumerate(runs):  # the runs the file was made of pass against each other
        for current in runs[:i] + runs[i + 1 :]:
            code, output, _ = run_gate(capsys, "--baseline", baseline, "--current", current, "--noise", out)
            assert code == 0, output
    # A 4% wall slowdown of the steady step fails (floor 2%, under --threshold's 5%); NOISY's 20% passes.
    current = mixed_result(tmp_path, "current.json", {STEADY: 10.4, NOISY: 24.0}, gpu, "burst")
    code, output, _ = run_gate(capsys, "--baseline", runs[0], "--current", current, "--noise", out)
    assert code == 1 and section(output, "regressions") == [short(STEADY)], output
    assert "wall time at max(2.0%" in output
    # Without the noise file it is the other way round: 5% for both, NOISY's 20% judged as GPU-bound.
    code, output, _ = run_gate(capsys, "--baseline", runs[0], "--current", current, "--noise", "off")
    assert code == 1 and section(output, "regressions") == [short(NOISY)], output


def test_runs_of_two_methods_make_no_noise_file(tmp_path, capsys):
    runs = [
        mixed_result(tmp_path, f"r{i}.json", {STEADY: 10.0}, {STEADY: 5.0}, m)
        for i, m in enumerate(("burst", "burst", None))
    ]
    out = tmp_path / "noise.json"
    assert noise.main(["--from", *runs, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "measured by different methods in the runs (burst, isolated)" in err and not out.exists()


def test_gpu_time_of_another_method_is_not_compared_and_said_once(tmp_path, capsys):
    # The baseline's GPU times are isolated calls (no gpu_method), this run's a burst and 30% lower:
    # never judged as one figure; the wall times decide, and one line says why.
    wall = {STEADY: 10.0, NOISY: 12.0}
    baseline = mixed_result(tmp_path, "old.json", wall, {STEADY: 5.0, NOISY: 6.0})
    current = mixed_result(tmp_path, "new.json", wall, {STEADY: 3.5, NOISY: 8.0}, "burst")
    code, output, _ = run_gate(capsys, "--baseline", baseline, "--current", current, "--noise", "off")
    assert code == 0, output
    reason = "GPU time measured by another method (the baseline's isolated, this run's burst)"
    assert output.count(reason) == 1 and "2 compared" in output, output
    # Slower in wall time: still caught.
    slower_wall = mixed_result(
        tmp_path, "slow.json", {STEADY: 11.0, NOISY: 12.0}, {STEADY: 3.5, NOISY: 8.0}, "burst"
    )
    code, output, _ = run_gate(capsys, "--baseline", baseline, "--current", slower_wall, "--noise", "off")
    assert code == 1 and section(output, "regressions") == [short(STEADY)], output


def test_a_noise_file_of_another_method_sets_no_gpu_threshold(tmp_path, capsys, noise_file):
    out, _runs = noise_file  # isolated GPU times (no gpu_method)
    baseline = mixed_result(tmp_path, "b.json", {n: 2 * m for n, m in base_ms().items()}, base_ms(), "burst")
    current = mixed_result(tmp_path, "c.json", {n: 2 * m for n, m in base_ms().items()}, base_ms(), "burst")
    code, output, _ = run_gate(capsys, "--baseline", baseline, "--current", current, "--noise", out)
    assert code == 0, output
    assert f"{len(NAMES)} benchmark(s) whose GPU-time noise was measured by another method" in output


def test_runs_that_chose_rounds_and_burst_are_compared_on_the_burst_they_all_recorded(tmp_path, capsys):
    # The steady method chose the rounds' figure in one run and the burst in another (a benchmark at the
    # edge of GPU-bound): the burst figure, recorded in both, is the one compared.
    wall = {STEADY: 10.0}
    rounds = {STEADY: {"gpu_burst_ms": 5.0, "gpu_rounds_ms": 4.0}}
    base = mixed_result(tmp_path, "base.json", wall, {STEADY: 4.0}, "rounds", **rounds)
    same = mixed_result(
        tmp_path, "same.json", wall, {STEADY: 5.0}, "burst", **{STEADY: {"gpu_rounds_ms": 5.3}}
    )
    code, output, _ = run_gate(capsys, "--baseline", base, "--current", same, "--noise", "off")
    assert code == 0 and "another method" not in output, output  # 5.0 against 5.0, not 4.0 against 5.0
    slower = mixed_result(tmp_path, "slower.json", wall, {STEADY: 5.5}, "burst")
    code, output, _ = run_gate(capsys, "--baseline", base, "--current", slower, "--noise", "off")
    assert code == 1 and section(output, "regressions") == [short(STEADY)], output
    # A noise file from such runs holds the burst's spread, and says so.
    out = tmp_path / "noise.json"
    assert noise.main(["--from", base, same, "--out", str(out)]) == 0
    data = json.loads(out.read_text())["benchmarks"][STEADY]
    assert data["gpu_method"] == "burst" and data["gpu_ms"] == [5.0, 5.0]
