"""Where a command writes at its end, checked before it runs anything: a run of minutes must not be lost to
a folder that cannot take its file (perf/storage.py `cannot_write` says why one cannot); refused in one line
naming the option."""

from __future__ import annotations

from pathlib import Path

from perf.storage import FILE, cannot_write
from perf.tools.reading.errors import GateError


def checked(path: Path | None, option: str, kind: str = FILE) -> Path | None:
    """`path` where it can take a `kind`, else GateError naming `option`; None passes (not given)."""
    if path is not None and (wrong := cannot_write(path, kind)) is not None:
        raise GateError(f"{option} {path}: {wrong}; nothing was run")
    return path
