"""One verdict per benchmark, shared by the gate (perf/tools/reporting/verdict.py) and the report
(perf/tools/reporting/comparison.py): each benchmark of both runs falls in exactly one category, whatever its
two figures did, and the baseline's benchmarks that the current results lack are sorted by why, so that the
two tools give the same counts for the same pair of files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perf.tools.judging.changes import Change, Comparison
from perf.tools.judging.regression_rule import CLOCK_MOVED, HOST_BOUND_SLOWER, HOST_NOISE
from perf.tools.reading.results import Results
from perf.tools.reading.run_info import selection, world_sizes
from perf.tools.reading.timings import GPU, WALL

SLOWER = "slower"  # a regression: beyond its threshold and the noise bound (and every re-measurement)
NOT_PERSISTED = "did not persist"  # slower once, not when measured again
FASTER = "faster"
UNCHANGED = "unchanged"
# A benchmark falls in the first category that one of its figures is in: a slowdown of its GPU time is
# never hidden by a faster wall time, and a regression is never counted as an improvement too.
PRECEDENCE = (SLOWER, NOT_PERSISTED, HOST_BOUND_SLOWER, HOST_NOISE, CLOCK_MOVED, FASTER)
# A verdict needs most of what the run selected compared: below this share of its benchmarks found in the
# baseline (renamed benchmarks, another suite's file, a run that skipped most of them) it gives none.
LEAST_COMPARED = 0.5


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

    def too_few_compared(self) -> str | None:
        """Why the two runs have too little in common to judge (LEAST_COMPARED of what the current run
        selected: compared, new, or selected and missing), with the likely cause; None where they have
        enough."""
        new, missing = len(self.new), len(self.absent.missing)
        selected = self.compared + new + missing
        if self.compared >= LEAST_COMPARED * selected and self.compared:
            return None
        cause = (
            "renamed benchmarks, or another selection's baseline?"
            if new >= missing
            else f"skipped or failed in {self.current_label}?"
        )
        counts = f"{new} not in the baseline, {missing} of the baseline's without a result"
        return f"only {self.compared} of {selected} benchmarks compared ({counts}): {cause}"


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
        (HOST_NOISE, comparison.host_noise),
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
