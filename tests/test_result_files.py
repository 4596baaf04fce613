"""Result files written whole or not at all (perf/plugin/result_files.py), paths and empty values refused
before anything runs, and the suite's own messages; each in a child pytest on the CPU."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from perf import harness
from perf.plugin import interrupts
from perf.tools import gate, report

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = "tests/harness_samples/interrupted_bench.py"
SLUG = harness.machine_slug(torch.device("cpu"))
OLD = '{"an earlier run": true}\n'


def _child_setup(umask: int) -> None:
    """The child's umask, and SIGINT as a terminal's job has it: this pytest may ignore it (a background
    job of a non-interactive shell does), and an ignored signal stays ignored in a child."""
    os.umask(umask)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def child(
    tmp_path: Path, *args: str, stop: str = "interrupt", umask: int = 0o022
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "STOP": stop}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--benchmark-max-time=0.02", *args],
        preexec_fn=lambda: _child_setup(umask),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def store(tmp_path) -> Path:
    return tmp_path / "store"


# --------------------------------------------------------------------------- whole or not at all
# interrupt: KeyboardInterrupt in a timed round; dropped: a real SIGINT inside a weakref callback, where
# Python prints the KeyboardInterrupt and drops it; failure: an exception in a timed round.
@pytest.mark.parametrize("stop", ["interrupt", "dropped", "failure"])
def test_an_interrupted_or_failed_run_stores_no_baseline_number_and_leaves_the_json_file(
    tmp_path, store, stop
):
    json_file = tmp_path / "results.json"
    json_file.write_text(OLD)
    proc = child(
        tmp_path,
        SAMPLES,
        f"--benchmark-storage=file://{store}",
        "--benchmark-save=intr",
        f"--benchmark-json={json_file}",
        stop=stop,
    )
    assert proc.returncode == (1 if stop == "failure" else 2), proc.stdout + proc.stderr
    folder = store / SLUG
    assert not list(folder.glob("[0-9][0-9][0-9][0-9]_*.json"))  # no numbered baseline
    (partial,) = folder.glob("partial_*_intr.json")
    assert json_file.read_text() == OLD  # untouched
    beside = tmp_path / "results.partial.json"
    for path in (partial, beside):
        data = json.loads(path.read_text())
        assert [b["name"] for b in data["benchmarks"]] == [
            "test_first",
            "test_second",
        ]  # the cut-off one left out
        assert "exit code" in data["perf"]["partial"]
    assert "results not stored whole: the session ended with exit code" in proc.stdout
    assert str(partial) in proc.stdout and "no baseline number" in proc.stdout
    assert not list(tmp_path.glob(".*.writing")) and not list(folder.glob(".*.writing"))
    if stop == "dropped":
        assert "arrived in tests/harness_samples/interrupted_bench.py::test_cut_off and was dropped" in (
            proc.stdout
        )


def test_the_dropped_interrupt_is_dropped_by_python_without_the_interrupts_plugin(tmp_path):
    """The sample above really lands in a callback: without perf/plugin/interrupts.py the run goes on,
    passes and overwrites the file the user's interrupt should have kept."""
    json_file = tmp_path / "results.json"
    json_file.write_text(OLD)
    proc = child(
        tmp_path, SAMPLES, f"--benchmark-json={json_file}", "-p", "no:perf.plugin.interrupts", stop="dropped"
    )
    assert proc.returncode == 0 and "3 passed" in proc.stdout, proc.stdout + proc.stderr
    assert "KeyboardInterrupt" in proc.stdout + proc.stderr  # printed as unraisable, then dropped
    assert json_file.read_text() != OLD


def test_an_interrupt_after_the_results_are_stored_leaves_them_and_says_so_in_one_line(tmp_path):
    json_file = tmp_path / "results.json"
    json_file.write_text(OLD)
    proc = child(tmp_path, SAMPLES, f"--benchmark-json={json_file}", stop="late")
    assert proc.returncode == 0 and "3 passed" in proc.stdout, proc.stdout + proc.stderr
    assert interrupts.LATE in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len(json.loads(json_file.read_text())["benchmarks"]) == 3


def test_a_run_that_ends_well_writes_the_json_file_and_the_next_number(tmp_path, store):
    json_file = tmp_path / "results.json"
    json_file.write_text(OLD)
    proc = child(
        tmp_path,
        SAMPLES,
        "-k",
        "not cut_off",
        f"--benchmark-storage=file://{store}",
        "--benchmark-save=ok",
        f"--benchmark-json={json_file}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [b["name"] for b in json.loads(json_file.read_text())["benchmarks"]] == [
        "test_first",
        "test_second",
    ]
    assert (store / SLUG / "0001_ok.json").is_file() and not list((store / SLUG).glob("partial_*"))
    assert "not stored whole" not in proc.stdout


def test_result_files_take_the_users_umask_and_an_existing_file_keeps_its_mode(tmp_path, store):
    kept, new = tmp_path / "kept.json", tmp_path / "new" / "results.json"
    kept.write_text(OLD)
    kept.chmod(0o644)
    for json_file, stop in ((kept, "none"), (new, "interrupt")):
        child(
            tmp_path,
            SAMPLES,
            f"--benchmark-storage=file://{store}",
            "--benchmark-save=run",
            f"--benchmark-json={json_file}",
            stop=stop,
            umask=0o027,
        )
    written = [kept, new.with_name("results.partial.json"), *sorted((store / SLUG).glob("*.json"))]
    assert [p.name for p in written[2:]] == ["0001_run.json", written[3].name]  # a number, then a partial
    assert [oct(stat.S_IMODE(p.stat().st_mode)) for p in written] == ["0o644", "0o640", "0o640", "0o640"]


@pytest.mark.parametrize(
    ("args", "code"),
    [(["--presets=foo"], 4), (["-k", "nothing_matches"], 5), (["--presets="], 4)],
)
def test_a_json_file_is_untouched_by_a_run_that_measures_nothing(tmp_path, args, code):
    json_file = tmp_path / "results.json"
    json_file.write_text(OLD)
    proc = child(tmp_path, SAMPLES, f"--benchmark-json={json_file}", *args)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert json_file.read_text() == OLD


def test_a_json_path_that_cannot_be_written_is_a_usage_error(tmp_path):
    proc = child(tmp_path, SAMPLES, "--benchmark-json=/proc/self/results.json")
    assert proc.returncode == 4 and "--benchmark-json: cannot write into /proc/self (" in proc.stderr


def test_partial_results_are_refused_by_the_gate_the_report_and_compare(tmp_path, store, capsys):
    child(tmp_path, SAMPLES, f"--benchmark-storage=file://{store}", "--benchmark-save=intr")
    (partial,) = (store / SLUG).glob("partial_*_intr.json")
    assert gate.main(["--baseline", str(partial), "--current", str(partial)]) == 2
    assert "partial results, not a baseline or a run to judge" in capsys.readouterr().err
    assert report.main([str(partial), "--out", str(tmp_path / "report")]) == 2
    assert "partial results" in capsys.readouterr().err
    proc = child(
        tmp_path,
        SAMPLES,
        "-k",
        "first",
        f"--benchmark-storage=file://{store}",
        f"--benchmark-compare={partial}",
        "--benchmark-compare-fail=median:50%",
    )
    assert proc.returncode == 4 and "it holds partial results" in proc.stderr


# --------------------------------------------------------------------------- paths and values
@pytest.mark.parametrize("absolute", [True, False])
def test_a_path_in_benchmark_compare_is_a_path_absolute_or_relative(tmp_path, store, absolute):
    saved = child(
        tmp_path, SAMPLES, "-k", "first", f"--benchmark-storage=file://{store}", "--benchmark-save=base"
    )
    assert saved.returncode == 0, saved.stdout + saved.stderr
    baseline = store / SLUG / "0001_base.json"
    given = str(baseline) if absolute else os.path.relpath(baseline, ROOT)
    proc = child(
        tmp_path,
        SAMPLES,
        "-k",
        "first",
        f"--benchmark-storage=file://{store}",
        f"--benchmark-compare={given}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "INTERNALERROR" not in proc.stdout + proc.stderr and "comparing against" in proc.stdout
    damaged = tmp_path / "damaged.json"
    damaged.write_text("{")
    proc = child(
        tmp_path,
        SAMPLES,
        "-k",
        "first",
        f"--benchmark-compare={damaged}",
        "--benchmark-compare-fail=median:5%",
    )
    assert (
        proc.returncode == 4
        and "unreadable result file" in proc.stderr
        and "INTERNALERROR" not in proc.stderr
    )


def test_an_unknown_stored_name_says_which_folder_was_searched(tmp_path, store):
    proc = child(
        tmp_path, SAMPLES, "-k", "first", f"--benchmark-storage=file://{store}", "--benchmark-compare=9999"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "cannot compare against '9999': no file of that name, and no stored result starting with it in "
        f"{store / SLUG}/." in proc.stdout
    )


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--presets=", "--presets: empty; accepted: tiny, mini, small"),
        ("--precisions=", "--precisions: empty; accepted: fp32, bf16, fp16"),
        ("--attention-providers=", "--attention-providers: empty; accepted: naive,"),
        ("--allocators=", "--allocators: empty; accepted: default, expandable_segments"),
        ("--contexts=", "--contexts: empty; give at least one value"),
    ],
)
def test_an_empty_value_is_a_usage_error_naming_what_is_accepted(tmp_path, option, message):
    proc = child(tmp_path, SAMPLES, option)
    assert proc.returncode == 4 and message in proc.stderr, proc.stdout + proc.stderr
    assert "passed" not in proc.stdout


# --------------------------------------------------------------------------- messages and noise
def test_the_no_baseline_note_gives_a_command_that_works(tmp_path, store):
    proc = child(
        tmp_path, SAMPLES, "-k", "first", f"--benchmark-storage=file://{store}", "--benchmark-compare"
    )
    assert (
        "save one with `make baseline NAME=...` (`.venv/bin/python -m pytest perf/ --benchmark-save=NAME`"
        in proc.stdout
    )


def test_the_cpu_note_says_which_suites_leave_bf16_out(tmp_path):
    proc = child(tmp_path, SAMPLES, "-k", "first")
    said = " ".join(proc.stdout.split())  # the note as read, whatever its line breaks
    assert "model steps and attention not in bf16" in said and "not run: bf16" not in said


def test_collect_only_lists_node_ids_and_nothing_else(tmp_path):
    proc = child(tmp_path, SAMPLES, "--collect-only")  # child() runs pytest -q
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines[:3] == [f"{SAMPLES}::test_first", f"{SAMPLES}::test_second", f"{SAMPLES}::test_cut_off"]
    assert not any(line.startswith("perf:") for line in proc.stdout.splitlines())


def test_torchs_script_method_warning_is_filtered_and_others_are_not():
    ini = (ROOT / "pytest.ini").read_text()
    assert "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning" in ini
    filters = [line.strip() for line in ini.splitlines() if line.strip().startswith("ignore:")]
    assert all(":" in f.removeprefix("ignore:") for f in filters)  # each by message and category
