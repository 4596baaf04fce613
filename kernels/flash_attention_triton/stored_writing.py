"""Writing a stored table of the FlashAttention Triton kernels' tuning (kernels/flash_attention_triton/
stored.py reads it): an entry per tuned case, a run merged into the table of its GPU and versions, and the
file written whole, one case per line. scripts/tune_flash_triton.py is its only writer."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import triton

from kernels.flash_attention_triton.stored import (
    CASE_FIELDS,
    FORMAT_VERSION,
    GPU_INFO_FIELDS,
    KERNELS,
    Case,
    TuningTableError,
    _check_case,
    _check_document,
    case_of,
    read_table,
    shown,
)


def case_entry(
    kernel: str, key: tuple, config: triton.Config, *, ms: float | None = None, shape: dict | None = None
) -> dict:
    """A table entry from a kernel's tuning key and the configuration tuned for it; `ms` is the
    autotuner's timing of it, `shape` what was run to tune it."""
    case = case_of(kernel, key)
    entry: dict[str, Any] = dict(zip(CASE_FIELDS, case, strict=True))
    warps, stages = config.num_warps, config.num_stages
    entry["config"] = {"kwargs": dict(config.kwargs), "num_warps": warps, "num_stages": stages}
    if ms is not None and math.isfinite(ms) and ms > 0:
        entry["ms"] = round(float(ms), 5)
    if shape:
        entry["shape"] = dict(shape)
    return entry


def _check_gpu_info(gpu_info: dict) -> None:
    missing = [name for name in GPU_INFO_FIELDS if name not in gpu_info]
    if missing:
        raise TuningTableError(f"gpu_info lacks {', '.join(missing)}; it needs {', '.join(GPU_INFO_FIELDS)}")
    for name in ("name", "torch", "triton"):
        if not isinstance(gpu_info[name], str) or not gpu_info[name]:
            raise TuningTableError(f"gpu_info[{name!r}] must be a non-empty string; got {gpu_info[name]!r}")


def check_mergeable(base: dict, gpu_info: dict, where: str = "the table") -> None:
    """Refuse to add a run to a table of another GPU or other torch or triton versions: a table holds
    one tuning of one GPU model, and choices timed under another compiler are not comparable."""
    info = base["machine_info"]
    if info["gpu"]["name"] != gpu_info["name"]:
        raise TuningTableError(
            f"{where} was tuned on {info['gpu']['name']}, this run is on {gpu_info['name']}; "
            "a table holds one GPU model (write this one's to its own file)"
        )
    for name in ("triton", "torch"):
        if info[name] != gpu_info[name]:
            raise TuningTableError(
                f"{where} was tuned with {name} {info[name]}, this run has {name} {gpu_info[name]}; parts of "
                f"one table must share the versions: tune every case again into a new table, or run "
                f"with {name} {info[name]}"
            )


def build_table(
    gpu_info: dict, cases: Iterable[dict], command: str, *, base: dict | None = None, date: str | None = None
) -> dict:
    """A table document of `cases` (entries from case_entry) tuned on the GPU `gpu_info` describes
    (GPU_INFO_FIELDS), by `command`; merged into `base`, a table of the same GPU and versions, where
    given: the same case is replaced by this run's entry, and this run is added to the parts."""
    _check_gpu_info(gpu_info)
    new = [(_check_case(entry, f"cases[{i}]")[0], entry) for i, entry in enumerate(cases)]
    parts: list[dict] = []
    merged: dict[Case, dict] = {}
    if base is not None:
        _, stored = _check_document(base)
        check_mergeable(base, gpu_info)
        parts = list(base["machine_info"]["parts"])
        merged = {case: entry for case, (_config, entry) in stored.items()}
    for case, entry in new:
        merged[case] = {**entry, "part": len(parts)}
    parts.append(
        {
            "date": date or datetime.now(UTC).isoformat(timespec="seconds"),
            "command": command,
            **{name: gpu_info[name] for name in GPU_INFO_FIELDS if name != "name"},
            "cases": len(new),
        }
    )
    ordered = sorted(merged.items(), key=lambda item: (KERNELS.index(item[0][0]), *item[0][1:]))
    return {
        "format_version": FORMAT_VERSION,
        "machine_info": {
            "gpu": {"name": gpu_info["name"], "capability": gpu_info["capability"]},
            "torch": gpu_info["torch"],
            "triton": gpu_info["triton"],
            "parts": parts,
        },
        "cases": [entry for _, entry in ordered],
    }


def _new_file_mode() -> int:
    """The mode open() gives a new file: 0666 less the umask (read without changing it, from /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return 0o666 & ~int(line.split()[1], 8)
    return 0o644


def save_table(path: Path, document: dict) -> None:
    """Write atomically (a temporary file renamed over it): a reader never sees half a table. One
    case per line, so that a re-tuning's diff shows the cases that changed."""
    _check_document(document)
    path = Path(path)
    head = json.dumps({k: v for k, v in document.items() if k != "cases"}, indent=2).removesuffix("\n}")
    rows = ",\n".join(f"    {json.dumps(entry)}" for entry in document["cases"])
    text = head + ',\n  "cases": [\n' + rows + "\n  ]\n}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, _new_file_mode())  # mkstemp's 0600 would make a committed table unreadable to a group
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_table(
    path: Path, gpu_info: dict, cases: Iterable[dict], command: str, *, merge: bool = False
) -> dict:
    """Write the table of one tuning run to `path`; with merge, into the table already there (same GPU
    and versions). Without merge an existing file is an error. Returns the document written."""
    path = Path(path)
    _check_gpu_info(gpu_info)
    base = None
    if path.exists():
        if not merge:
            raise TuningTableError(f"{shown(path)} exists; merge adds this run's cases to it")
        base = read_table(path)
        check_mergeable(base, gpu_info, shown(path))
    document = build_table(gpu_info, cases, command, base=base)
    save_table(path, document)
    return document
