"""What a result file says of its run beyond the timings: its commit, date, GPU and tier (`describe`, as
the verdicts' heads show them), the benchmarks it selected, their world sizes and the GPUs it saw; and
node ids shortened for rows (`short_names`), so that two benchmarks never look alike."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from perf.tools.reading.results import Results

SHORT = 12  # hex digits that name a commit in messages and folder names


# --------------------------------------------------------------------------- what the run selected
def selection(results: Results) -> set[str] | None:
    """The node ids of the benchmarks a run selected (after -k, tiers and deselection), where it says."""
    perf = results.document.get("perf")
    selected = perf.get("selected") if isinstance(perf, dict) else None
    if not isinstance(selected, list):
        return None
    return {name for name in selected if isinstance(name, str)}


def world_sizes(results: Results) -> dict[str, int]:
    """Each benchmark's world size (extra_info world_size: the ranks it ran on), where it has one."""
    sizes = {}
    for entry in results.document.get("benchmarks", []):
        info = entry.get("extra_info") if isinstance(entry, dict) else None
        size = info.get("world_size") if isinstance(info, dict) else None
        if isinstance(size, int) and not isinstance(size, bool):
            sizes[entry.get("fullname")] = size
    return sizes


def gpu_count(results: Results) -> int | None:
    """The GPUs the run's machine had visible (machine_info.perf.gpu.count), where it says."""
    perf = results.document.get("machine_info", {}).get("perf")
    gpu = perf.get("gpu") if isinstance(perf, dict) else None
    count = gpu.get("count") if isinstance(gpu, dict) else None
    return count if isinstance(count, int) else None


# --------------------------------------------------------------------------- the two runs
@dataclass(frozen=True)
class Side:
    """Where a result file came from, as the verdict's head shows it; None where the file does not say."""

    source: str  # the file, or 'this run'
    commit: str | None  # e.g. 'ce4505d6a57f (clean)'
    recorded: str | None  # e.g. '2026-11-24 19:13 UTC'
    gpu: str
    tier: str | None

    def line(self) -> str:
        """'commit ce4505d6a57f (clean), recorded 2026-11-24 19:13 UTC, NVIDIA H100 80GB HBM3, tier pr'."""
        fields = (("commit", self.commit), ("recorded", self.recorded), ("", self.gpu), ("tier", self.tier))
        known = ", ".join(f"{label} {value}".strip() for label, value in fields if value)
        unknown = [{"recorded": "date"}.get(label, label) for label, value in fields if not value]
        if not unknown:
            return known
        named = unknown[0] if len(unknown) == 1 else f"{', '.join(unknown[:-1])} or {unknown[-1]}"
        return f"{known}; no {named} recorded"


def _commit(document: Mapping[str, Any]) -> str | None:
    """pytest-benchmark's commit_info: its id, and whether the checkout had uncommitted changes."""
    info = document.get("commit_info")
    info = info if isinstance(info, dict) else {}
    commit = info.get("id")
    if not isinstance(commit, str) or not commit or commit == "unknown":
        return None
    dirty = info.get("dirty")
    if dirty is True:
        return f"{commit[:SHORT]} (with uncommitted changes)"
    return f"{commit[:SHORT]} (clean)" if dirty is False else commit[:SHORT]


def _recorded(document: Mapping[str, Any]) -> str | None:
    """pytest-benchmark's datetime, in UTC to the minute."""
    value = document.get("datetime")
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if moment.tzinfo is None:
        return moment.strftime("%Y-%m-%d %H:%M")
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def describe(results: Results, source: str) -> Side:
    """A result file's commit, date, GPU (x count where more than one) and the suite's tier."""
    document = results.document
    count = gpu_count(results)
    gpu = results.machine + (f" x{count}" if count is not None and count > 1 else "")
    perf = document.get("perf")
    tier = perf.get("tier") if isinstance(perf, dict) else None
    return Side(source, _commit(document), _recorded(document), gpu, str(tier) if tier else None)


# --------------------------------------------------------------------------- names
_SEPARATOR = re.compile(r"/|::")


def short_names(names: Iterable[str]) -> dict[str, str]:
    """Each node id's shortest ending at a '/' or '::' before its parameters that no other id of `names`
    ends with, so that two benchmarks never look alike: 'perf/test_matmul.py::test_matmul[n8192-bf16]'
    becomes 'test_matmul[n8192-bf16]' unless another file has a test_matmul[n8192-bf16] too."""
    unique = list(dict.fromkeys(names))

    def endings(name: str) -> list[str]:  # the shortest first, the whole id last
        head = name.split("[", 1)[0]
        cuts = sorted({m.end() for m in _SEPARATOR.finditer(head)}, reverse=True)
        return [name[cut:] for cut in cuts]

    seen = Counter(ending for name in unique for ending in {*endings(name), name})
    return {name: next((e for e in endings(name) if seen[e] == 1), name) for name in unique}
