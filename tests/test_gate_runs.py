"""The regression gate (perf/tools/gate.py) measuring: re-measurement with a fake pytest runner, every
refusal (exit 2 with one line on stderr), the module entry point and saved runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perf.tools import gate
from tests.gate_files import (
    H100,
    NAMES,
    ROOT,
    FakeRunner,
    run_gate,
    section,
    short,
    stats,
    suite,
    write_results,
)


# --------------------------------------------------------------------------- re-measurement
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
