"""The lock that lets `alone` tests run with nothing beside them under pytest-xdist (tests/alone.py).

flock(2) locks taken through separate open files conflict within one process as between processes, so
threads stand for the workers in the unit tests. The last test runs pytest with two workers on tests
that record when they ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests import alone

ROOT = Path(__file__).resolve().parent.parent
# Long enough for a thread that is not blocked to reach its lock first, on a loaded 2-core machine.
SETTLE_S = 0.3


@pytest.fixture
def run_id():
    run = f"test-{uuid.uuid4().hex}"
    yield run
    alone.remove(run)


def _take(
    run_id: str, exclusive: bool, name: str, events: list[str], hold: threading.Event
) -> threading.Thread:
    def body():
        with alone.held(run_id, exclusive):
            events.append(f"{name} in")
            hold.wait(10)
            events.append(f"{name} out")

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def test_shared_holders_run_together(run_id):
    events: list[str] = []
    release = threading.Event()
    threads = [_take(run_id, False, name, events, release) for name in ("a", "b")]
    time.sleep(SETTLE_S)
    assert sorted(events) == ["a in", "b in"]
    release.set()
    for thread in threads:
        thread.join(10)


def test_an_exclusive_holder_waits_for_the_test_inside_and_holds_back_later_ones(run_id):
    events: list[str] = []
    inside, exclusive, later = threading.Event(), threading.Event(), threading.Event()
    threads = [_take(run_id, False, "inside", events, inside)]
    time.sleep(SETTLE_S)
    threads.append(_take(run_id, True, "alone", events, exclusive))
    time.sleep(SETTLE_S)
    threads.append(_take(run_id, False, "later", events, later))  # arrives while `alone` waits
    time.sleep(SETTLE_S)
    assert events == ["inside in"], "the exclusive taker entered beside a shared holder, or was overtaken"
    inside.set()
    time.sleep(SETTLE_S)
    assert events == ["inside in", "inside out", "alone in"]
    exclusive.set()
    later.set()
    for thread in threads:
        thread.join(10)
    assert events == ["inside in", "inside out", "alone in", "alone out", "later in", "later out"]


TIMED_TESTS = """
import json, os, subprocess, sys, time
import pytest

def record(name):
    start = time.time()
    time.sleep(0.4)
    with open(os.environ["ALONE_LOG"], "a") as log:
        log.write(json.dumps([name, start, time.time()]) + "\\n")

@pytest.mark.parametrize("n", range(6))
def test_ordinary(n):
    record(f"ordinary{n}")

@pytest.mark.alone
@pytest.mark.parametrize("n", range(2))
def test_alone(n):
    record(f"alone{n}")
    # A pytest that a test starts, under the same conftest, inherits the worker's environment: it must
    # not wait for the lock that the test holds.
    inner = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "inner"]
    subprocess.run(inner, check=True, timeout=60)
"""


@pytest.mark.slow
def test_under_xdist_nothing_runs_beside_an_alone_test(tmp_path):
    """Two workers, eight tests of 0.4 s: the ordinary ones overlap each other, never an `alone` one."""
    (tmp_path / "test_timed.py").write_text(TIMED_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    alone: runs alone\n")
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "test_inner.py").write_text("def test_inner():\n    pass\n")
    log = tmp_path / "log.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "test_timed.py",
        ],
        cwd=tmp_path,
        env={**os.environ, "ALONE_LOG": str(log), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(runs) == 8
    alone_runs = [r for r in runs if r[0].startswith("alone")]
    others = [r for r in runs if not r[0].startswith("alone")]
    for name, start, end in alone_runs:
        beside = [o[0] for o in runs if o[0] != name and o[1] < end and start < o[2]]
        assert not beside, f"{name} ran beside {beside}"
    overlapping = any(a[1] < b[2] and b[1] < a[2] for a in others for b in others if a is not b)
    assert overlapping, "the ordinary tests ran one at a time: the run did not use two workers"
