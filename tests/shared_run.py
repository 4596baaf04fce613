"""Work done once per test run and shared by every pytest-xdist worker.

A module-scoped fixture runs once per worker that needs it: a child pytest run that several tests read
would run in as many workers as the tests are spread over. `once` runs it in the first worker that asks,
under a lock, into a folder named after the run (pytest-xdist gives its workers one testrunuid); the
others wait for it and read what it left. Without pytest-xdist it runs in this process, into a new folder.
The controller removes the folders at the run's end (tests/conftest.py).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

DONE = ".done"


def _folder(run_id: str, name: str) -> Path:
    return Path(tempfile.gettempdir()) / f"lm-perf-tests-{run_id}-{name}"


def once(config: pytest.Config, name: str, make: Callable[[Path], None]) -> Path:
    """The folder `make(folder)` filled, made once in this run whichever worker asks first."""
    worker = getattr(config, "workerinput", None)
    if worker is None:
        folder = Path(tempfile.mkdtemp(prefix=f"lm-perf-tests-{name}-"))
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
        make(folder)
        return folder
    folder = _folder(worker["testrunuid"], name)
    folder.mkdir(exist_ok=True)
    fd = os.open(folder.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the others wait here while the first makes it
        if not (folder / DONE).exists():
            make(folder)
            (folder / DONE).touch()
    finally:
        os.close(fd)
    return folder


def remove(run_id: str) -> None:
    for path in Path(tempfile.gettempdir()).glob(f"lm-perf-tests-{run_id}-*"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
