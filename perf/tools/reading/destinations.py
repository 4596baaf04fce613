"""Where a command writes at its end, checked before it runs anything: a run of minutes must not be lost to
a folder that cannot take its file. A destination is refused when it is a link loop or a broken link, a
folder where a file is wanted (or the other way round), or in a folder that cannot be made or cannot take a
new file (read-only, not a folder). The check leaves nothing behind: a folder that exists takes a file made
and removed, one still to be made needs its nearest existing folder writable.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from perf.tools.reading.errors import GateError

FILE, FOLDER = "file", "folder"


def _dangling(path: Path) -> bool:
    """A link that leads nowhere: to itself, round a loop, or to nothing."""
    return os.path.islink(path) and not os.path.exists(path)


def cannot_write(path: Path, kind: str = FILE) -> str | None:
    """Why `path` cannot take a `kind` (FILE or FOLDER) written there, in a few words; None where it can."""
    for part in (path, *path.parents):
        if _dangling(part):
            return f"{part} is a link loop or a broken link"
    if kind == FILE and path.is_dir():
        return f"{path} is a folder; give a file path"
    if kind == FOLDER and path.exists() and not path.is_dir():
        return f"{path} is a file; give a folder"
    folder = path if kind == FOLDER else path.parent
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent  # the folders the write would make: made then, not now
    if not existing.is_dir():
        return f"cannot write into {folder} ({existing} is not a folder)"
    try:
        if existing == folder:  # a file made and removed: what the write needs, tried
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".perf-check-"):
                pass
        elif not os.access(existing, os.W_OK | os.X_OK):
            return f"cannot write into {folder} ({existing} is not writable)"
    except OSError as err:
        return f"cannot write into {folder} ({err.strerror or err})"
    return None


def checked(path: Path | None, option: str, kind: str = FILE) -> Path | None:
    """`path` where it can take a `kind`, else GateError naming `option`; None passes (not given)."""
    if path is not None and (wrong := cannot_write(path, kind)) is not None:
        raise GateError(f"{option} {path}: {wrong}; nothing was run")
    return path
