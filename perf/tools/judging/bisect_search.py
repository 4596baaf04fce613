"""The search behind `python -m perf.tools.bisect`: the first of an ordered list of commits that made a
selection of benchmarks slower than GOOD, given a way to measure one commit. No git and no I/O here
(perf/tools/bisect.py runs it on a repository, through perf/tools/running/bisect_runs.py), so that it is
tested with made-up results.

GOOD is measured first, then a binary search over the candidates (the commits after GOOD up to BAD, the
last). Each probe is judged against GOOD on each benchmark's primary figure (`primary`):
- while no slower commit is known, a probe is bad when a benchmark is slower than at GOOD by the gate's
  rule (perf/tools/judging/regression_rule.py: beyond the threshold and the noise bound);
- once one is known, the benchmarks that moved there decide: a probe is bad when one of them lies nearer
  the earliest known bad figure than GOOD's (past the midpoint of their log ratio), which depends on
  neither the threshold nor where in between the figure moved. One is enough, so that of two slowdowns
  in the range the first is found.
BAD is measured only when every probe before it was good, to confirm it is slower at all. A probe that
cannot be measured is skipped, as `git bisect skip` does: the untried commit nearest the middle is taken.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from perf.tools.judging.regression_rule import HOST_BOUND_THRESHOLD, THRESHOLD, Z, judge_figure
from perf.tools.reading.errors import GateError
from perf.tools.reading.results import ISOLATED, Results, aligned
from perf.tools.reading.run_info import SHORT, short_names
from perf.tools.reading.timings import GPU, WALL, Timing

# A commit's results, or why the selection cannot run at that commit (its pytest failed).
Measure = Callable[[str], "Results | str"]
GOOD, BAD, SKIPPED = "good", "bad", "skipped"


@dataclass(frozen=True)
class Figure:
    """One benchmark's primary figure at two commits."""

    name: str
    figure: str  # GPU or WALL
    base: Timing
    current: Timing

    @property
    def ratio(self) -> float:
        return self.current.median_s / self.base.median_s


@dataclass(frozen=True)
class Step:
    """One measured (or skipped) commit, in the order measured."""

    commit: str
    verdict: str  # GOOD, BAD or SKIPPED; GOOD itself is the first step
    note: str  # the decisive benchmark and its ratio, or why the commit was skipped
    results: Results | None  # None where skipped


@dataclass(frozen=True)
class Answer:
    """Where the search ended. `first_bad` None: no slowdown, or BAD could not be measured (`reason`)."""

    good: str
    candidates: tuple[str, ...]
    steps: tuple[Step, ...]
    first_bad: str | None
    comparison: str | None  # the nearest measured good commit before first_bad (its parent where measured)
    unmeasured: tuple[str, ...]  # commits between comparison and first_bad skipped: any may be the first
    slowed: tuple[Figure, ...]  # the figures first_bad slowed against comparison, most first
    reason: str = ""

    @property
    def measured(self) -> int:
        return sum(step.results is not None for step in self.steps)

    def results_of(self, commit: str) -> Results:
        return next(step.results for step in self.steps if step.commit == commit and step.results)


@dataclass(frozen=True)
class Rule:
    threshold: float = THRESHOLD
    z: float = Z
    host_threshold: float = HOST_BOUND_THRESHOLD


def primary(base: Results, current: Results) -> list[Figure]:
    """Each benchmark of both runs on one figure: its GPU time where both measured it by the same method
    (figures of two methods are not comparable), else its wall time."""
    base, current = aligned([base, current])  # GPU figures of one method (perf/tools/reading/results.py)
    figures = []
    for name in base.timings.keys() & current.timings.keys():
        methods = {run.gpu_methods.get(name, ISOLATED) for run in (base, current)}
        if name in base.gpu_timings and name in current.gpu_timings and len(methods) == 1:
            figures.append(Figure(name, GPU, base.gpu_timings[name], current.gpu_timings[name]))
        else:
            figures.append(Figure(name, WALL, base.timings[name], current.timings[name]))
    return sorted(figures, key=lambda f: f.name)


def slower(figures: Sequence[Figure], rule: Rule) -> list[Figure]:
    """The figures slower by the gate's rule, the largest ratio first."""
    found = [
        f
        for f in figures
        if judge_figure(f.figure, f.base, f.current, rule.threshold, rule.z, rule.host_threshold) == "slower"
    ]
    return sorted(found, key=lambda f: -f.ratio)


def _position(good: Timing, probe: Timing, bad: Timing) -> float:
    """Where the probe's figure lies from GOOD's (0) to the bad one's (1), on a log scale."""
    return math.log(probe.median_s / good.median_s) / math.log(bad.median_s / good.median_s)


class _Search:
    def __init__(self, good: str, candidates: Sequence[str], measure: Measure, rule: Rule, on_step) -> None:
        self.good, self.candidates, self.measure, self.rule = good, tuple(candidates), measure, rule
        self.on_step = on_step or (lambda step: None)
        self.steps: list[Step] = []
        self.base: Results | None = None
        self.names: dict[str, str] = {}
        self.moved: list[str] = []  # the benchmarks slower at the first bad probe found
        self.bad: Results | None = None  # the earliest bad probe's results

    def record(self, step: Step) -> None:
        self.steps.append(step)
        self.on_step(step)

    def show(self, figure: Figure) -> str:
        return f"{self.names.get(figure.name, figure.name)} {figure.figure} {figure.ratio:.3f}x GOOD"

    def judge(self, results: Results) -> tuple[str, str] | None:
        """(verdict, note) of a measured probe; None where it shares no benchmark with GOOD."""
        figures = primary(self.base, results)
        if not figures:
            return None
        if self.bad is None:
            found = slower(figures, self.rule)
            if found:
                self.moved = [f.name for f in found]
                return BAD, self.show(found[0])
            return GOOD, self.show(max(figures, key=lambda f: f.ratio))
        references = {f.name: f for f in primary(self.base, self.bad) if f.name in self.moved}
        placed = [
            (_position(f.base, f.current, references[f.name].current), f)
            for f in figures
            if f.name in references and references[f.name].ratio > 1
        ]
        if not placed:
            return None
        where, decisive = max(placed, key=lambda p: p[0])
        verdict = BAD if where > 0.5 else GOOD
        bad_ratio = references[decisive.name].ratio
        share = min(max(where, 0), 1)
        return verdict, f"{self.show(decisive)} (bad at {bad_ratio:.3f}x: {share:.0%} of the way)"

    def run(self) -> Answer:
        base = self.measure(self.good)
        if isinstance(base, str):
            raise GateError(
                f"GOOD {self.good[:SHORT]}: the selection cannot run there; nothing to compare with ({base})"
            )
        self.base = base
        self.names = short_names(base.timings)
        self.record(Step(self.good, GOOD, "the reference", base))
        last = len(self.candidates) - 1
        lo, hi, hi_measured, skipped = -1, last, False, set()
        while True:
            between = [i for i in range(lo + 1, hi) if i not in skipped]
            if not between and hi_measured:
                break
            middle = (lo + hi) // 2
            probe = min(between, key=lambda i: (abs(i - middle), i)) if between else hi
            commit = self.candidates[probe]
            results = self.measure(commit)
            judged = None if isinstance(results, str) else self.judge(results)
            if judged is None:
                why = results if isinstance(results, str) else "it shares no benchmark with GOOD"
                self.record(Step(commit, SKIPPED, why, None))
                skipped.add(probe)
                if probe == last:
                    return self.answer(None, f"BAD {commit[:SHORT]} could not be measured ({why})")
                continue
            verdict, note = judged
            self.record(Step(commit, verdict, note, results))
            if verdict == BAD:
                hi, hi_measured, self.bad = probe, True, results
            elif probe == last:
                return self.answer(None, "no slowdown between GOOD and BAD in this selection")
            else:
                lo = probe
        comparison = self.good if lo < 0 else self.candidates[lo]
        unmeasured = tuple(self.candidates[i] for i in range(lo + 1, hi))
        return self.answer(self.candidates[hi], "", comparison, unmeasured)

    def answer(
        self,
        first_bad: str | None,
        reason: str,
        comparison: str | None = None,
        unmeasured: Sequence[str] = (),
    ) -> Answer:
        slowed: list[Figure] = []
        if first_bad is not None:
            before = next(s.results for s in self.steps if s.commit == comparison and s.results is not None)
            figures = primary(before, self.bad)
            # Slower by the rule; where the step was split over commits, those that moved past the middle.
            slowed = slower(figures, self.rule) or sorted(
                (f for f in figures if f.name in self.moved and f.ratio > 1), key=lambda f: -f.ratio
            )
        return Answer(
            self.good, self.candidates, tuple(self.steps), first_bad, comparison, tuple(unmeasured),
            tuple(slowed), reason,
        )  # fmt: skip


def search(
    good: str,
    candidates: Sequence[str],
    measure: Measure,
    rule: Rule | None = None,
    on_step: Callable[[Step], None] | None = None,
) -> Answer:
    """The first of `candidates` (the commits after `good`, oldest first, BAD last) slower than `good`;
    `on_step` is called with each step as it is made. GOOD that cannot be measured is a GateError."""
    if not candidates:
        raise ValueError("candidates: at least one commit after GOOD is needed")
    return _Search(good, candidates, measure, rule or Rule(), on_step).run()


def expected_measurements(candidates: int) -> int:
    """The commits a search measures without skips, BAD not needed: GOOD and a halving of the rest."""
    return 1 + math.ceil(math.log2(candidates)) if candidates > 1 else 2
