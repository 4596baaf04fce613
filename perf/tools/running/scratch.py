"""The tools' scratch folders in the temporary folder (perf-run-*, perf-base-*): each holds the id of the
process that made it, so that the next run removes those a killed tool left behind, as worktrees.py does
for worktrees. A folder kept on purpose (a run's partial results, named to the user) has its owner removed
and is left alone."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

OWNER_FILE = "owner.pid"
PREFIXES = ("perf-run-", "perf-base-")


def alive(pid: int) -> bool:
    """Whether process `pid` still runs (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def made(prefix: str) -> Path:
    """A new scratch folder owned by this process."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    (folder / OWNER_FILE).write_text(str(os.getpid()))
    return folder


def kept(folder: Path) -> None:
    """`folder` kept for the user: no longer this process's, never removed as abandoned."""
    (folder / OWNER_FILE).unlink(missing_ok=True)


def remove_abandoned(where: Path | None = None) -> list[Path]:
    """Remove the scratch folders whose owner no longer runs (a tool killed outright); returns them."""
    removed = []
    for prefix in PREFIXES:
        for folder in Path(where or tempfile.gettempdir()).glob(f"{prefix}*"):
            try:
                owner = int((folder / OWNER_FILE).read_text())
            except (OSError, ValueError):
                continue  # kept for the user, not one of ours, or being made this moment
            if not alive(owner):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed
