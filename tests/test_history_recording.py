"""A run recorded into the results database (perf/plugin/history.py): with --history, with or without a
result file (then it is the file's document), and never at the cost of the run or its file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from perf.history.store import connect
from perf.plugin.history import record

ROOT = Path(__file__).resolve().parent.parent
SELECTION = ["perf/test_weighted_sum.py", "-k", "torch and forward and not backward", "--device", "cpu"]


def run_suite(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", *SELECTION, "-p", "no:cacheprovider", "-q", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip


def test_a_run_with_history_is_recorded_and_its_file_is_the_same_document(tmp_path):
    db = tmp_path / "history.sqlite"
    done = run_suite("--history", str(db))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "history: recorded 1 benchmarks as run #1 in sqlite:///" in done.stdout
    result = tmp_path / "run.json"
    done = run_suite("--history", str(db), f"--benchmark-json={result}")
    assert "as run #2" in done.stdout, done.stdout
    with connect(str(db), create=False) as history:
        runs = history.runs(include_dirty=True)
        assert len(runs) == 2 and all(r.benchmarks == 1 and r.tier == "cpu" for r in runs)
        # The file holds the document that was recorded: importing it stores nothing.
        assert history.import_file(result).new is False


def test_an_unreachable_database_is_one_line_and_the_run_and_its_file_stand(tmp_path):
    result = tmp_path / "run.json"
    env = {
        **__import__("os").environ,
        "PERF_HISTORY": "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2",
    }
    done = run_suite(f"--benchmark-json={result}", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("history:")]
    assert len(lines) == 1 and lines[0].startswith("history: not recorded: ") and "127.0.0.1" in lines[0]
    assert json.loads(result.read_text())["benchmarks"]


def test_partial_results_are_not_recorded(tmp_path):
    db = tmp_path / "history.sqlite"
    line = record({"perf": {"partial": "interrupted"}, "benchmarks": []}, str(db))
    assert line == "history: not recorded, the results are partial (interrupted)" and not db.exists()
