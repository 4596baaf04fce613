"""Where results are stored and whose they are: baselines/<machine folder>/NNNN_name.json.

One folder per processor model, named from the GPU model (or `cpu <model>` for CPU runs), so that a
comparison never sets one GPU's results against another's. The plugin stores results there and
compares with them; the tools (gate, combine, report) read them back. Nothing here imports torch:
the tools read result files without it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASELINES = ROOT / "baselines"
PERF = ROOT / "perf"  # the benchmarks' folder; tests/ parametrize and select themselves
CPU_RUN = "the CPU"  # how `recorded_on` names a run without a GPU: 'the CPU (<model>)'


def recorded_on(perf_info: object) -> str | None:
    """The processor a result belongs to: the GPU model, or the CPU model for CPU runs."""
    if not isinstance(perf_info, dict):
        return None
    gpu = perf_info.get("gpu")
    if isinstance(gpu, dict) and gpu.get("name"):
        return str(gpu["name"])
    return f"{CPU_RUN} ({perf_info.get('cpu_model', 'unknown model')})"


def recorded_on_cpu(machine: str) -> bool:
    """Whether `recorded_on` named a CPU: a run without a CUDA GPU."""
    return machine.startswith(f"{CPU_RUN} (")


def folder_name(processor: str) -> str:
    """The folder under baselines/ of a GPU model, or of 'cpu <model>': lower case, other runs as '-'."""
    return re.sub(r"[^a-z0-9]+", "-", processor.lower()).strip("-")


def machine_folder(perf_info: Mapping[str, Any]) -> str:
    """The baselines/ folder that results with this machine_info.perf belong in."""
    gpu = perf_info.get("gpu")
    if isinstance(gpu, dict) and gpu.get("name"):
        return folder_name(str(gpu["name"]))
    return folder_name(f"cpu {perf_info.get('cpu_model', 'unknown model')}")


def partial_name(path: Path) -> Path:
    """Where the partial results of a run given `--benchmark-json=path` go: `results.partial.json`."""
    return path.with_name(f"{path.stem}.partial.json")


def _create_temporary(path: Path) -> Path:
    """A new empty file beside `path`, created as open() creates files: mode 0666 less the umask."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.writing")
        try:
            os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return temporary
        except FileExistsError:
            continue


def _publish(path: Path, data: bytes, place: Callable[[Path, Path], None]) -> None:
    """Write `data` to a temporary file beside `path` and `place` it there; the temporary file is gone
    afterwards, whatever happened (an interrupt included)."""
    temporary = _create_temporary(path)
    try:
        with open(temporary, "wb") as f:
            f.write(data)
        place(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_whole(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in its folder, renamed into place when complete:
    a result file is whole or not there, never half-written. A new file takes the user's umask, an
    existing one keeps its mode, as open() would."""

    def replace(temporary: Path, target: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temporary, stat.S_IMODE(target.stat().st_mode))
        os.replace(temporary, target)

    _publish(path, data, replace)


def write_new(path: Path, data: bytes) -> None:
    """`write_whole` for a file that must not exist yet (a numbered baseline): FileExistsError if it
    does, whoever created it meanwhile; never an overwrite."""

    def link(temporary: Path, target: Path) -> None:
        try:
            os.link(temporary, target)  # fails where the name exists: the check and the write are one
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links: check, then rename
            if target.exists():
                raise FileExistsError(
                    errno.EEXIST, "a stored result is never overwritten", str(target)
                ) from None
            os.replace(temporary, target)

    _publish(path, data, link)
