"""The parts of one suite run, measured in several pytest invocations, read as one result document and
stored as one baseline (`python -m perf.tools.combine`).

Each part is read as the gate reads a result file (load_results); the parts must come from one machine (the
same GPU, driver, CUDA, torch and triton) and one commit, and no benchmark may be in two parts. The document
goes to baselines/<gpu>/NNNN_<name>.json, the next free number, compact as any stored baseline; nothing is
overwritten.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perf.storage import BASELINES, compact_json, machine_folder, write_new
from perf.tools.reading.errors import GateError
from perf.tools.reading.results import load_results

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# What makes two parts one commit's: its id, and whether the tree had changes beyond it.
COMMIT_KEYS = ("id", "dirty")


def _read(path: Path) -> dict[str, Any]:
    # The gate's checks: readable, benchmarks with names and medians, machine info.
    return dict(load_results(path, "part").document)


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested dict as {'gpu.name': ..., 'torch': ...}; anything else as itself under `prefix`."""
    if not isinstance(value, dict):
        return {prefix: value}
    found: dict[str, Any] = {}
    for key, inner in value.items():
        found |= _flat(inner, f"{prefix}.{key}" if prefix else str(key))
    return found


def differences(first: Any, other: Any, shown: int = 3) -> str:
    """Where two values differ, key by key ("gpu.name 'NVIDIA H200' here, 'NVIDIA H100' there"), the first
    `shown` of them and a count of the rest."""
    a, b = _flat(first), _flat(other)
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
    listed = [f"{k or 'the value'} {b.get(k)!r} against {a.get(k)!r}" for k in keys[:shown]]
    rest = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return "; ".join(listed) + rest


def _same(parts: Sequence[tuple[Path, dict[str, Any]]], what: str, value_of) -> None:
    first_path, first = parts[0]
    for path, data in parts[1:]:
        if value_of(data) != value_of(first):
            raise GateError(
                f"part {path}: its {what} differs from part {first_path}'s ("
                f"{differences(value_of(first), value_of(data))}); "
                "a baseline holds one machine and one commit"
            )


def combine(paths: Sequence[Path]) -> dict[str, Any]:
    """One pytest-benchmark document holding every part's benchmarks, machine and commit of the first."""
    if not paths:
        raise GateError("no parts given")
    parts = [(path, _read(path)) for path in paths]
    _same(parts, "machine_info.perf", lambda data: data["machine_info"].get("perf"))
    _same(parts, "commit", lambda data: {k: (data.get("commit_info") or {}).get(k) for k in COMMIT_KEYS})
    seen: dict[str, Path] = {}
    for path, data in parts:
        for entry in data["benchmarks"]:
            name = entry["fullname"]
            if name in seen:
                raise GateError(f"part {path}: {name} is also in part {seen[name]}; each benchmark once")
            seen[name] = path
    first = parts[0][1]
    return {
        **first,
        "benchmarks": [entry for _, data in parts for entry in data["benchmarks"]],
        # What the parts selected together: the gate lists a selected benchmark without a result.
        "perf": _selection(parts),
        # The last part's end: when the run was complete. Each part's own time stays in `parts`.
        "datetime": max(str(data.get("datetime", "")) for _, data in parts),
        "parts": [
            {"file": path.name, "datetime": data.get("datetime"), "benchmarks": len(data["benchmarks"])}
            for path, data in parts
        ],
    }


def _selection(parts: Sequence[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    perfs = [data.get("perf") if isinstance(data.get("perf"), dict) else {} for _, data in parts]
    selected = sorted({name for perf in perfs for name in perf.get("selected") or ()})
    tiers = sorted({str(perf["tier"]) for perf in perfs if perf.get("tier")})
    return {"tier": ",".join(tiers) or None, "selected": selected}


def store(document: dict[str, Any], name: str, baselines: Path = BASELINES) -> Path:
    """Write `document` as the next numbered file of its machine's folder; never over another file."""
    folder = baselines / machine_folder(document["machine_info"]["perf"])
    folder.mkdir(parents=True, exist_ok=True)
    numbers = [int(p.name[:4]) for p in folder.glob("[0-9][0-9][0-9][0-9]_*.json")]
    path = folder / f"{max(numbers, default=0) + 1:04d}_{name}.json"
    write_new(path, compact_json(document))  # whole, compact as any stored baseline, never over a file
    return path
