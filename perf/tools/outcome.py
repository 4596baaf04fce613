"""One verdict per benchmark, shared by the gate (perf/tools/verdict.py) and the report (perf/tools/report/):
each benchmark of both runs falls in exactly one category, whatever its two figures did; the baseline's
benchmarks that the current results lack are sorted by why; and both runs are described (commit, date,
GPU, tier), so that the two tools give the same counts for the same pair of files.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from perf.tools.changes import Change, Comparison
from perf.tools.regression_rule import CLOCK_MOVED, GPU, HOST_BOUND_SLOWER, WALL
from perf.tools.results import Results

SLOWER = "slower"  # a regression: beyond its threshold and the noise bound (and every re-measurement)
NOT_PERSISTED = "did not persist"  # slower once, not when measured again
FASTER = "faster"
UNCHANGED = "unchanged"
# A benchmark falls in the first category that one of its figures is in: a slowdown of its GPU time is
# never hidden by a faster wall time, and a regression is never counted as an improvement too.
PRECEDENCE = (SLOWER, NOT_PERSISTED, HOST_BOUND_SLOWER, CLOCK_MOVED, FASTER)
# What `gate --list` names one by one: new benchmarks, the baseline's not compared (missing, outside the
# selection, at other world sizes), those judged on wall time alone.
LISTS = ("new", "missing", "wall-only")


@dataclass(frozen=True)
class Moved:
    """A benchmark that moved: its category and each figure that moved with its own verdict, the ones
    that decided the category first."""

    name: str
    category: str
    changes: tuple[tuple[str, Change], ...]  # (the figure's verdict, its change)

    def figures(self) -> list[str]:
        """The figures that put it in its category, e.g. ['gpu']."""
        return [c.figure for word, c in self.changes if word == self.category]


@dataclass(frozen=True)
class Absent:
    """The baseline's benchmarks that the current results lack, by why."""

    missing: list[str]  # selected by the current run, or it records no selection: skipped, failed, renamed
    unselected: list[str]  # outside the current run's recorded selection (perf.selected): not compared
    other_worlds: dict[int, list[str]]  # at a world size the current run measured nothing at
    selection_recorded: bool  # whether the current results say what their run selected


@dataclass(frozen=True)
class Outcome:
    """Every benchmark of two runs once: in a category where it moved, or counted unchanged, new, absent."""

    compared: int  # benchmarks in both runs
    moved: dict[str, list[Moved]]  # by category, every category of PRECEDENCE; the largest change first
    new: list[str]  # in the current results only
    absent: Absent
    wall_only: dict[str, list[str]]  # benchmarks without GPU time on a side, by why
    own_run: bool  # the gate's own run (else --current: a stored file)
    remeasured: int  # times suspects were measured again (0: every suspect is a regression)

    def count(self, category: str) -> int:
        if category == UNCHANGED:
            return self.compared - sum(map(len, self.moved.values()))
        return len(self.moved[category])

    @property
    def regressions(self) -> list[Moved]:
        return self.moved[SLOWER]

    def by_figure(self) -> dict[str, int]:
        """Regressions per figure that failed; a benchmark slower on both counts in both."""
        return {f: sum(f in m.figures() for m in self.regressions) for f in (GPU, WALL)}

    @property
    def current_label(self) -> str:
        return "this run" if self.own_run else "the current file"


def classify(
    comparison: Comparison,
    regressions: Sequence[Change],
    not_persisted: Sequence[Change],
    baseline: Results,
    current: Results,
    own_run: bool,
    remeasured: int = 0,
) -> Outcome:
    """Each benchmark of `comparison` in the first category of PRECEDENCE that one of its figures is in;
    `regressions` and `not_persisted` are the suspects after re-measurement (all suspects without it)."""
    sources = (
        (SLOWER, regressions),
        (NOT_PERSISTED, not_persisted),
        (HOST_BOUND_SLOWER, comparison.host_bound),
        (CLOCK_MOVED, comparison.clock_moved),
        (FASTER, comparison.improvements),
    )
    found: dict[str, list[tuple[str, Change]]] = {}  # in the order of the lists: the largest change first
    for word, changes in sources:
        for change in changes:
            found.setdefault(change.name, []).append((word, change))
    moved: dict[str, list[Moved]] = {category: [] for category in PRECEDENCE}
    for name, changes in found.items():
        category = next(c for c in PRECEDENCE if any(word == c for word, _ in changes))
        ordered = sorted(changes, key=lambda pair: pair[0] != category)  # stable: the deciding first
        moved[category].append(Moved(name, category, tuple(ordered)))
    return Outcome(
        compared=comparison.compared,
        moved=moved,
        new=list(comparison.new),
        absent=absent(comparison.missing, baseline, current),
        wall_only=comparison.wall_only,
        own_run=own_run,
        remeasured=remeasured,
    )


# --------------------------------------------------------------------------- benchmarks not compared
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


def absent(missing: Sequence[str], baseline: Results, current: Results) -> Absent:
    """The baseline's benchmarks the current results lack: those at a world size the current run measured
    nothing at (a two-GPU baseline compared on one GPU), those outside the current run's recorded
    selection (a narrower tier, -k: perf.selected), and the rest, missing."""
    before, now = world_sizes(baseline), set(world_sizes(current).values())
    selected = selection(current)
    other_worlds: dict[int, list[str]] = {}
    lost, unselected = [], []
    for name in missing:
        size = before.get(name)
        if size is not None and size not in now:
            other_worlds.setdefault(size, []).append(name)
        elif selected is not None and name not in selected:
            unselected.append(name)
        else:
            lost.append(name)
    return Absent(lost, unselected, dict(sorted(other_worlds.items())), selected is not None)


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
        return f"{commit[:12]} (with uncommitted changes)"
    return f"{commit[:12]} (clean)" if dirty is False else commit[:12]


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
