"""Where results are stored and whose they are: baselines/<machine folder>/NNNN_name.json.

One folder per processor model, named from the GPU model (or `cpu <model>` for CPU runs), so that a
comparison never sets one GPU's results against another's. The plugin stores results there and
compares with them; the tools (gate, combine, report) read them back. Nothing here imports torch:
the tools read result files without it.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASELINES = ROOT / "baselines"
PERF = ROOT / "perf"  # the benchmarks' folder; tests/ parametrize and select themselves


def recorded_on(perf_info: object) -> str | None:
    """The processor a result belongs to: the GPU model, or the CPU model for CPU runs."""
    if not isinstance(perf_info, dict):
        return None
    gpu = perf_info.get("gpu")
    if isinstance(gpu, dict) and gpu.get("name"):
        return str(gpu["name"])
    return f"the CPU ({perf_info.get('cpu_model', 'unknown model')})"


def folder_name(processor: str) -> str:
    """The folder under baselines/ of a GPU model, or of 'cpu <model>': lower case, other runs as '-'."""
    return re.sub(r"[^a-z0-9]+", "-", processor.lower()).strip("-")


def machine_folder(perf_info: Mapping[str, Any]) -> str:
    """The baselines/ folder that results with this machine_info.perf belong in."""
    gpu = perf_info.get("gpu")
    if isinstance(gpu, dict) and gpu.get("name"):
        return folder_name(str(gpu["name"]))
    return folder_name(f"cpu {perf_info.get('cpu_model', 'unknown model')}")


def write_whole(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in its folder, renamed into place when complete:
    a result file is whole or not there, never half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".writing", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
