"""Interrupts and kills, wherever they land (perf/plugin/interrupts.py, perf/tools/running/): during pytest's
start-up and inside a callback they end the run as interrupted without a traceback; a tool that is
interrupted after its child stored whole results keeps them and says so; a verdict printed is the verdict
returned; a child pytest dies with the tool that started it; scratch folders of killed tools are removed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perf.tools import gate
from perf.tools.reading.errors import Interrupted
from perf.tools.reporting import gate_output
from perf.tools.running import ab, runs, scratch
from tests.test_not_a_measurement import good, write

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = "tests/harness_samples/interrupted_bench.py"


def child(*args: str, stop: str = "none", **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "STOP": stop, **env}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--benchmark-max-time=0.02", *args],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_an_interrupt_while_pytest_starts_is_exit_2_without_a_traceback(tmp_path):
    json_file = tmp_path / "r.json"
    json_file.write_text("earlier")
    proc = child("-p", "tests.harness_samples.interrupt_at_startup", SAMPLES, f"--benchmark-json={json_file}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        proc.stderr.strip()
        == "perf: interrupted while pytest was starting; nothing was run and nothing written"
    )
    assert json_file.read_text() == "earlier"


def test_an_interrupt_dropped_inside_a_callback_prints_no_traceback(tmp_path):
    proc = child(SAMPLES, f"--benchmark-json={tmp_path / 'r.json'}", stop="dropped")
    assert proc.returncode == 2 and (tmp_path / "r.partial.json").is_file(), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and "Unraisable" not in proc.stdout + proc.stderr


def _whole_then_interrupted(args, json_path: Path) -> int:
    """A runner whose pytest stored its results whole, then was interrupted (a Ctrl-C as it exited)."""
    json_path.write_text(json.dumps(good()))
    raise KeyboardInterrupt


def test_a_tool_interrupted_after_its_run_ended_keeps_the_results_and_says_where(tmp_path):
    with pytest.raises(Interrupted) as head:
        runs.measure(_whole_then_interrupted, ["perf/"], "head")
    kept = Path(str(head.value).rsplit("kept in ", 1)[1])
    assert str(head.value).startswith(
        "`pytest perf/` was interrupted after it ended; its results are kept in"
    )
    assert json.loads(kept.read_text()) == good()
    with pytest.raises(Interrupted) as base:
        ab.measure_base(_whole_then_interrupted, ["perf/"], tmp_path / "base.json")
    assert str(base.value).endswith(f"its results are kept in {tmp_path / 'base.json'}")
    assert json.loads((tmp_path / "base.json").read_text()) == good()
    with pytest.raises(Interrupted) as unsaved:  # base without --save: its scratch folder is kept instead
        ab.measure_base(_whole_then_interrupted, ["perf/"], None)
    assert str(unsaved.value).startswith("`pytest perf/` on base was interrupted after it ended")
    kept_base = Path(str(unsaved.value).rsplit("kept in ", 1)[1])
    assert scratch.remove_abandoned() == [] and kept.is_file() and kept_base.is_file()  # never removed
    for path in (kept, kept_base):
        path.unlink()
        path.parent.rmdir()


def test_a_verdict_printed_is_the_verdict_returned(tmp_path, capsys, monkeypatch):
    shown = gate_output.show

    def show_then_interrupted(*args, **kwargs):
        shown(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C just after the verdict was printed
        time.sleep(0.05)

    monkeypatch.setattr(gate_output, "show", show_then_interrupted)
    before = signal.getsignal(signal.SIGINT)
    clean = write(tmp_path / "clean.json", good())
    assert gate.main(["--baseline", str(clean), "--current", str(clean)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("PASS: no regression")
    assert signal.getsignal(signal.SIGINT) == before  # as the caller had it


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux's /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_child_pytest_dies_with_the_tool_that_started_it(tmp_path):
    marker = tmp_path / "measuring"
    tool = (
        "import sys; from pathlib import Path; from perf.tools.running.runs import run_pytest_in; "
        f"run_pytest_in(Path({str(ROOT)!r}), ['-p', 'no:cacheprovider', '-q', {SAMPLES!r}], "
        f"Path({str(tmp_path / 'r.json')!r}))"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "CUDA_VISIBLE_DEVICES": "",
        "STOP": "wait",
        "MARKER": str(marker),
    }
    process = subprocess.Popen([sys.executable, "-c", tool], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), "the child pytest never reached its test"
        [pytest_pid] = _children(process.pid)
        process.kill()  # SIGKILL: the tool has no say
        process.wait()
        deadline = time.monotonic() + 30
        while scratch.alive(pytest_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        gone = not scratch.alive(pytest_pid) or "Z" in Path(f"/proc/{pytest_pid}/stat").read_text().split()[2]
        assert gone, "the child pytest outlived the tool"
    finally:
        process.kill()


def test_scratch_folders_of_killed_tools_are_removed_and_kept_ones_are_not(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folders = {}
    for name, owner in (
        ("perf-run-dead", dead.pid),
        ("perf-base-alive", os.getpid()),
        ("perf-run-kept", None),
    ):
        folders[name] = tmp_path / name
        folders[name].mkdir()
        if owner is not None:
            (folders[name] / scratch.OWNER_FILE).write_text(str(owner))
    assert scratch.remove_abandoned(tmp_path) == [folders["perf-run-dead"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["perf-base-alive", "perf-run-kept"]
