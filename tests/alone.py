"""Tests marked `alone` run with no other test at once when pytest-xdist spreads the tests over processes.

`make test` runs the tests in as many processes as the machine has cores. Most of them only compare
results, but a few time the GPU or the host (a spin kernel's 2 ms, sleeps timed against each other) and
read wrong when another process's kernels share the GPU or its compilations take the cores; others start
several processes of their own with heartbeats and deadlines. Every test of every worker therefore
holds a lock: shared for ordinary tests, exclusive for `alone` ones, over the test's setup, call and
teardown.

The lock is fair, so that an exclusive test is not starved by the stream of shared ones: a worker takes
the turnstile before the room. A shared taker passes the turnstile at once and holds the room shared;
an exclusive one holds the turnstile while it waits for the room, so no new test enters until the tests
inside have finished. Both are flock(2) locks on two files named after the run's id, which pytest-xdist
gives every worker of one run alike (its testrunuid); a crashed worker's locks go with its process. Only
the workers take them: a pytest that a test starts is not one, though it inherits their environment.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

MARK = "alone"


def lock_files(run_id: str) -> tuple[Path, Path]:
    """The turnstile and the room of one run, in the temporary folder every worker sees."""
    base = Path(tempfile.gettempdir()) / f"lm-perf-tests-{run_id}"
    return base.with_suffix(".turnstile"), base.with_suffix(".room")


@contextlib.contextmanager
def _flocked(path: Path, operation: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, operation)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases its lock


@contextlib.contextmanager
def held(run_id: str, exclusive: bool) -> Iterator[None]:
    """The run's lock, exclusive or shared, for as long as the block runs."""
    turnstile, room = lock_files(run_id)
    if exclusive:
        with _flocked(turnstile, fcntl.LOCK_EX), _flocked(room, fcntl.LOCK_EX):
            yield
    else:
        with _flocked(turnstile, fcntl.LOCK_EX):
            pass
        with _flocked(room, fcntl.LOCK_SH):
            yield


def remove(run_id: str) -> None:
    for path in lock_files(run_id):
        path.unlink(missing_ok=True)


class ExclusiveRow:
    """The exclusive lock held over a row of `alone` tests, from the first to the last, so that the
    other workers' tests drain once for the row rather than once for each of its tests."""

    def __init__(self) -> None:
        self._held: contextlib.ExitStack | None = None

    def enter(self, run_id: str) -> None:
        if self._held is None:
            stack = contextlib.ExitStack()
            stack.enter_context(held(run_id, exclusive=True))
            self._held = stack

    def leave(self) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None
