"""The search behind `python -m perf.tools.bisect`: the first of an ordered list of commits that made a
selection of benchmarks slower than GOOD, given a way to measure one commit (a few runs of it, back to back).
No git and no I/O here (perf/tools/bisect.py runs it on a repository, through
perf/tools/running/bisect_runs.py), so that it is tested with made-up results.

GOOD is measured first, then a binary search over the candidates (the commits after GOOD up to BAD, the
last). Each probe's runs are judged against GOOD's by the A/B's paired rule, kernels included
(perf/tools/judging/kernel_shares.py), its family-wise bound spread over every probe the search may
measure (`Rule.looks`):
- while no slower commit is known, a probe is bad when a benchmark is SLOWER, by its own time or by a
  kernel's share; an UNKNOWN benchmark never makes it bad;
- once one is known, the benchmarks that moved there decide, each by the figure that moved (the one found
  slower, or the kernel's share): a probe is bad when one of them lies nearer the earliest bad probe's
  mean log figure than GOOD's (past the midpoint), which depends on neither the threshold nor where in
  between the figure moved. One is enough, so that of two slowdowns in the range the first is found.
BAD is measured only when every probe before it was good, to confirm it is slower at all. A probe that
cannot be measured is skipped, as `git bisect skip` does: the untried commit nearest the middle is taken.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from perf.tools.judging import kernel_shares
from perf.tools.judging.kernel_shares import GrownKernel, kernel_times
from perf.tools.judging.noise_thresholds import Noise
from perf.tools.judging.paired_rule import FASTER, SAME, SLOWER, THRESHOLD, UNKNOWN, Judgement, Paired, Z
from perf.tools.reading.errors import GateError
from perf.tools.reading.results import Results
from perf.tools.reading.run_info import SHORT, short_names
from perf.tools.reading.timings import WALL

# A commit's runs, or why the selection cannot run at that commit (its pytest failed).
Measure = Callable[[str], "Sequence[Results] | str"]
GOOD, BAD, SKIPPED = "good", "bad", "skipped"
KERNEL = "kernel"  # the figure of a benchmark that moved by a kernel's share


@dataclass(frozen=True)
class Figure:
    """One benchmark's figure at two commits, the geometric mean of each one's runs."""

    name: str
    figure: str  # GPU or WALL
    base_s: float
    current_s: float
    kernels: tuple = ()  # the grown kernels (kernel_shares.GrownKernel) where a kernel decided it

    @property
    def ratio(self) -> float:
        return self.current_s / self.base_s


@dataclass(frozen=True)
class Step:
    """One measured (or skipped) commit, in the order measured."""

    commit: str
    verdict: str  # GOOD, BAD or SKIPPED; GOOD itself is the first step
    note: str  # the decisive benchmark and its ratio, or why the commit was skipped
    results: tuple[Results, ...] | None  # its runs; None where skipped


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
        """Commits measured, GOOD included."""
        return sum(step.results is not None for step in self.steps)

    @property
    def runs(self) -> int:
        """Runs of the selection made, over every commit measured."""
        return sum(len(step.results) for step in self.steps if step.results is not None)

    def results_of(self, commit: str) -> tuple[Results, ...]:
        return next(step.results for step in self.steps if step.commit == commit and step.results)


@dataclass(frozen=True)
class Rule:
    """The paired rule's threshold and z, the runner's noise profile, and the looks the family-wise bound
    covers (None: every probe the search may measure, `expected_measurements`)."""

    threshold: float = THRESHOLD
    z: float = Z
    noise: Noise | None = None
    looks: int | None = None


@dataclass(frozen=True)
class Moved:
    """A benchmark slower at the first bad probe, and the figure later probes are placed by."""

    name: str
    figure: str  # GPU, WALL or KERNEL
    kernel: str | None = None


def _decisive(judgement: Judgement) -> str:
    """The figure that made a benchmark slower: its primary figure, else its wall time (a host-side
    slowdown), else its primary (a kernel decided it)."""
    for figure in (judgement.primary, WALL):
        if judgement.figures[figure].verdict == SLOWER:
            return figure
    return judgement.primary


def figure_of(judgement: Judgement) -> Figure:
    figure = judgement.figures[_decisive(judgement)]
    return Figure(judgement.name, figure.figure, figure.base_s, figure.head_s, judgement.kernels)


def _moved(judgement: Judgement) -> Moved:
    if judgement.kernels:
        return Moved(judgement.name, KERNEL, judgement.kernels[0].kernel)
    return Moved(judgement.name, _decisive(judgement))


def _growth(judgement: Judgement) -> float:
    """How much a slower benchmark grew: its kernel's share where a kernel decided it, else its figure."""
    if judgement.kernels:
        return math.log(judgement.kernels[0].share_ratio)
    return judgement.figures[_decisive(judgement)].effect


def kernel_effect(
    name: str, kernel: str, base: Sequence[Results], head: Sequence[Results], share: bool = True
) -> float | None:
    """The mean log share of one kernel in a benchmark's GPU time (`share` False: its time per call) at head
    less at base; None where either side has no table with it."""

    def mean_log(runs: Sequence[Results]) -> float | None:
        tables = [t for t in (kernel_times(r, name) for r in runs) if t and kernel in t]
        values = [t[kernel] / sum(t.values()) if share else t[kernel] for t in tables]
        return statistics.fmean(math.log(v) for v in values) if values else None

    at_base, at_head = mean_log(base), mean_log(head)
    return None if at_base is None or at_head is None else at_head - at_base


def moved_kernel(name: str, kernel: str, base: Sequence[Results], head: Sequence[Results]) -> GrownKernel:
    """A kernel that decided a step, not grown by the rule over one commit of it: its ratios, no se."""
    share, time = (kernel_effect(name, kernel, base, head, flag) or 0.0 for flag in (True, False))
    return GrownKernel(kernel, math.exp(time), math.exp(share), math.nan)


def _counts(paired: Paired) -> str:
    verdicts = [j.verdict for j in paired.judged.values()]
    shown = ((SAME, "same"), (UNKNOWN, "undecided"), (FASTER, "faster"))
    parts = [f"{verdicts.count(v)} {word}" for v, word in shown if verdicts.count(v)]
    return f"{', '.join(parts)} of {len(verdicts)}"


class _Search:
    def __init__(self, good: str, candidates: Sequence[str], measure: Measure, rule: Rule, on_step, profile):
        self.good, self.candidates, self.measure, self.rule = good, tuple(candidates), measure, rule
        self.on_step = on_step or (lambda step: None)
        self.profile = profile
        self.looks = rule.looks or expected_measurements(len(self.candidates))
        self.noise = rule.noise
        self.steps: list[Step] = []
        self.base: tuple[Results, ...] = ()
        self.names: dict[str, str] = {}
        self.moved: list[Moved] = []  # the benchmarks slower at the first bad probe found
        self.references: dict[Moved, float] = {}  # their log growth at the earliest bad probe

    def record(self, step: Step) -> None:
        self.steps.append(step)
        self.on_step(step)

    def paired(self, base: Sequence[Results], head: Sequence[Results]) -> Paired:
        rule = self.rule
        return kernel_shares.judged(base, head, rule.threshold, rule.z, noise=self.noise, looks=self.looks)

    def short(self, name: str) -> str:
        return self.names.get(name, name)

    def show(self, judgement: Judgement) -> str:
        figure = judgement.figures[_decisive(judgement)]
        said = f"{self.short(judgement.name)} {figure.figure} {figure.ratio:.3f}x GOOD"
        if not judgement.kernels:
            return said
        grown = judgement.kernels[0]
        return (
            f"{self.short(judgement.name)} kernel {grown.kernel} {grown.share_ratio:.3f}x its share ({said})"
        )

    def effect(
        self, moved: Moved, runs: Sequence[Results], paired: Paired, base: Sequence[Results] = ()
    ) -> float | None:
        """The log growth of a moved benchmark's figure from `base` (GOOD's) to `runs`, judged `paired`."""
        if moved.kernel is not None:
            return kernel_effect(moved.name, moved.kernel, base or self.base, runs)
        judgement = paired.judged.get(moved.name)
        figure = judgement.figures.get(moved.figure) if judgement else None
        return figure.effect if figure else None

    def judge(self, runs: Sequence[Results]) -> tuple[str, str, dict[Moved, float]] | None:
        """(verdict, note, the moved benchmarks' log growth) of a probe; None where it shares no benchmark
        with GOOD, or none of those that moved."""
        paired = self.paired(self.base, runs)
        if not paired.judged:
            return None
        if not self.moved:
            found = sorted(paired.named(SLOWER), key=lambda n: -_growth(paired.judged[n]))
            if not found:
                top = max(paired.judged.values(), key=lambda j: j.figures[j.primary].effect)
                return GOOD, f"{self.show(top)} ({_counts(paired)})", {}
            moved = [_moved(paired.judged[name]) for name in found]
            effects = {m: e for m in moved if (e := self.effect(m, runs, paired)) is not None}
            return BAD, self.show(paired.judged[found[0]]), effects
        effects = {m: e for m in self.moved if (e := self.effect(m, runs, paired)) is not None}
        placed = [m for m in effects if m in self.references]
        if not placed:
            return None
        decisive = max(placed, key=lambda m: effects[m] / self.references[m])
        where = effects[decisive] / self.references[decisive]
        verdict = BAD if where > 0.5 else GOOD
        figure = f"kernel {decisive.kernel} share" if decisive.kernel else decisive.figure
        share = min(max(where, 0), 1)
        note = (
            f"{self.short(decisive.name)} {figure} {math.exp(effects[decisive]):.3f}x GOOD "
            f"(bad at {math.exp(self.references[decisive]):.3f}x: {share:.0%} of the way)"
        )
        return verdict, note, effects

    def run(self) -> Answer:
        base = self.measure(self.good)
        if isinstance(base, str):
            raise GateError(
                f"GOOD {self.good[:SHORT]}: the selection cannot run there; nothing to compare with ({base})"
            )
        self.base = tuple(base)
        if self.profile is not None:  # the runner's noise profile, for the GPU GOOD ran on
            self.noise = self.profile(self.base[0])
        self.names = short_names(self.base[0].timings)
        self.record(Step(self.good, GOOD, "the reference", self.base))
        last = len(self.candidates) - 1
        lo, hi, hi_measured, skipped = -1, last, False, set()
        while True:
            between = [i for i in range(lo + 1, hi) if i not in skipped]
            if not between and hi_measured:
                break
            middle = (lo + hi) // 2
            probe = min(between, key=lambda i: (abs(i - middle), i)) if between else hi
            commit = self.candidates[probe]
            runs = self.measure(commit)
            judged = None if isinstance(runs, str) else self.judge(runs)
            if judged is None:
                unshared = "none of the benchmarks that moved" if self.moved else "no benchmark of GOOD"
                why = runs if isinstance(runs, str) else f"it has {unshared}"
                self.record(Step(commit, SKIPPED, why, None))
                skipped.add(probe)
                if probe == last:
                    return self.answer(None, f"BAD {commit[:SHORT]} could not be measured ({why})")
                continue
            verdict, note, effects = judged
            self.record(Step(commit, verdict, note, tuple(runs)))
            if verdict == BAD:
                hi, hi_measured = probe, True
                self.moved = self.moved or list(effects)
                # The earliest bad probe is the reference; a figure that did not grow there places nothing.
                self.references = {m: e for m, e in effects.items() if m in self.moved and e > 0}
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
            runs = {s.commit: s.results for s in self.steps if s.results is not None}
            before, after = runs[comparison], runs[first_bad]
            paired = self.paired(before, after)
            found = sorted(paired.named(SLOWER), key=lambda n: -_growth(paired.judged[n]))
            slowed = [figure_of(paired.judged[name]) for name in found]
            if not slowed:  # the step was split over commits: those that moved, where they grew at all
                for m in self.references:
                    if m.name in paired.judged and (self.effect(m, after, paired, before) or 0) > 0:
                        kernels = (moved_kernel(m.name, m.kernel, before, after),) if m.kernel else ()
                        slowed.append(replace(figure_of(paired.judged[m.name]), kernels=kernels))
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
    profile: Callable[[Results], Noise | None] | None = None,
) -> Answer:
    """The first of `candidates` (the commits after `good`, oldest first, BAD last) slower than `good`;
    `on_step` is called with each step as it is made; `profile`, given GOOD's first run, the runner's noise
    profile (in place of `rule.noise`). GOOD that cannot be measured is a GateError."""
    if not candidates:
        raise ValueError("candidates: at least one commit after GOOD is needed")
    return _Search(good, candidates, measure, rule or Rule(), on_step, profile).run()


def expected_measurements(candidates: int) -> int:
    """The commits a search measures without skips, BAD not needed: GOOD and a halving of the rest. It is
    also the most probes a search without skips measures (BAD among them), the looks of its bound."""
    return 1 + math.ceil(math.log2(candidates)) if candidates > 1 else 2
