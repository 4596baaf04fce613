"""A Ctrl-C during a tool's pytest run (perf/tools/running/runs.py): the tool passes it to pytest, which
stores its partial results and says so; the tool then ends with one line and exit code 130, no traceback, and
no result file but the partial one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A tool in miniature: perf/tools/running/runs.py's measure and perf/tools/reading/errors.py's tool_main
# around one run of the sample benchmarks.
DRIVER = """
import sys
from pathlib import Path
from perf.tools.reading.errors import tool_main
from perf.tools.running.runs import measure, run_pytest
args = ["-p", "no:cacheprovider", "-q", "--benchmark-max-time=0.02"]
args += ["tests/harness_samples/interrupted_bench.py"]
sys.exit(tool_main("perf.tools.x", lambda: measure(run_pytest, args, "run", save=Path(sys.argv[1])) and 0))
"""


def stopped_tool(tmp_path: Path, signum: int) -> tuple[subprocess.Popen, str, str]:
    """DRIVER run until its benchmark waits, then sent `signum`: the tool, its stdout and stderr."""
    save, marker = tmp_path / "current.json", tmp_path / "waiting"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "STOP": "wait"}
    tool = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(save)],
        cwd=ROOT,
        env={**env, "MARKER": str(marker)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # SIGINT as a terminal's job has it, even where this pytest ignores it (a background job).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 240
        while not marker.exists() and tool.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), "the benchmark never started waiting"
        tool.send_signal(signum)
        out, err = tool.communicate(timeout=120)
    finally:
        tool.kill()
    return tool, out, err


def test_ctrl_c_reaches_pytest_once_and_the_tool_says_one_line(tmp_path):
    save = tmp_path / "current.json"
    tool, out, err = stopped_tool(tmp_path, signal.SIGINT)  # as a terminal's Ctrl-C reaches the tool
    partial = tmp_path / "current.partial.json"
    assert tool.returncode == 130, out + err
    assert err.splitlines()[-1] == (
        f"perf.tools.x: interrupted: `pytest {' '.join(DRIVER_ARGS)}` was interrupted; "
        f"its partial results are in {partial}"
    ), err
    assert "Traceback" not in err and f"Wrote benchmark data in: {partial}" in err  # pytest's own line
    assert "results not stored whole: the session ended with exit code 2 (interrupted)" in " ".join(
        out.split()
    )
    assert not save.exists()
    assert [b["name"] for b in json.loads(partial.read_text())["benchmarks"]] == ["test_first", "test_second"]
    assert not list(tmp_path.glob(".*.writing"))


DRIVER_ARGS = [
    "-p",
    "no:cacheprovider",
    "-q",
    "--benchmark-max-time=0.02",
    "tests/harness_samples/interrupted_bench.py",
]


def test_a_termination_passed_on_ends_the_tool_as_interrupted_not_as_a_failed_run(tmp_path):
    # pytest ended by SIGTERM exits -15 (no handler of its own): a tool that passed the signal on must say
    # it was stopped, never read the run as failed and go on (an A/B would judge what it had).
    tool, out, err = stopped_tool(tmp_path, signal.SIGTERM)  # as `timeout` or a CI runner sends it
    assert tool.returncode == 130, out + err
    assert err.splitlines()[-1].startswith("perf.tools.x: interrupted: "), err
    assert "failed with exit code" not in err and "Traceback" not in err
    assert not (tmp_path / "current.json").exists()
