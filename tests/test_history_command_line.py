"""The history's command line as a newcomer types it: `--db` before the command as after it, and its
output piped into `head`, which goes away after a line, ends quietly with exit 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from perf.history.__main__ import db_after_command
from perf.history.__main__ import main as history_main
from perf.tools.reading.errors import tool_main
from tests.corpus_samples import write_set

ROOT = Path(__file__).resolve().parent.parent


def test_db_before_the_command_is_taken_as_after_it(tmp_path, capsys):
    db = str(tmp_path / "h.sqlite")
    [run] = write_set(tmp_path / "runs", 1)
    assert history_main(["--db", db, "import", str(run)]) == 0
    assert history_main([f"--db={db}", "runs"]) == 0
    assert "#1 " in capsys.readouterr().out
    assert db_after_command(["--db", "x", "runs", "--limit", "1"]) == ["runs", "--db", "x", "--limit", "1"]
    assert db_after_command(["runs", "--db", "x"]) == ["runs", "--db", "x"]
    assert db_after_command(["--db", "x"]) == ["--db", "x"]  # no command: argparse says it is needed


def test_output_into_a_reader_that_went_away_ends_quietly(tmp_path):
    db = str(tmp_path / "h.sqlite")
    for run in write_set(tmp_path / "runs", 3):
        assert history_main(["import", "--db", db, str(run)]) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    reader_gone = subprocess.Popen(
        [sys.executable, "-m", "perf.history", "runs", "--db", db],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    reader_gone.stdout.close()  # as `| head -1` does once it has its line
    err = reader_gone.stderr.read().decode()
    assert reader_gone.wait(timeout=120) == 0 and err == "", err


def test_a_broken_pipe_is_no_error():
    def body() -> int:
        raise BrokenPipeError(32, "Broken pipe")

    saved = os.dup(sys.stdout.fileno())
    try:
        assert tool_main("perf.tools.x", body) == 0
    finally:
        os.dup2(saved, sys.stdout.fileno())
        os.close(saved)
