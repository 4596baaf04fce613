"""The A/B rule: is head slower than base, judged from runs of both made alternately on one machine.

Runs come in pairs, ABBA first (base, head, head, base), then BA and AB alternately: a drift of the
machine over the minutes of a session (clocks, heat, other load) falls on both sides alike. For each
benchmark and figure the effect is the difference of the mean log medians, m = mean(log head) - mean(log
base), with the standard error se = s * sqrt(1/n_base + 1/n_head), where s is the largest of: the pooled
spread of each side's log medians across its runs, the runner's own run-to-run spread of that figure from
its noise profile (the noise file's sd, from many runs: two runs a side estimate a spread too loosely to
trust), and, while the runs are few, their own standard errors; se is at least the standard error of the
pairs' own log ratios (a machine that drifts between pairs). Three answers, as Chromium's pinpoint gives:

    SLOWER   m > log(1 + threshold), m > z_slower * se, and head slower in every pair
    FASTER   likewise the other way
    SAME     |m| + z * se < log(1 + threshold): the whole noise band lies within the threshold
    UNKNOWN  otherwise: measured again in more pairs while it may still turn SLOWER (some figure it may be
             called slower on has head slower in every pair so far); still UNKNOWN after the last pair, or
             once a pair went the other way on each such figure, it is reported, never failed

z_slower is family-wise: every figure and kernel an A/B judges, at every look (ABBA and each further pair),
is one test, and a gate that runs hundreds of them at z 3 fails clean code in some per cent of gates. The
bound is set so that the chance of any false SLOWER in a gate is at most FALSE_RATE (Bonferroni: each test
at FALSE_RATE / (tests x looks)); --z sets it only where larger. docs/gate.md has its rates on the corpus.

Pure functions of Results (perf/tools/reading/results.py), no I/O; ABRun, what an A/B measured and how it
judged it, is filled in by perf/tools/running/ab.py and shown by perf/tools/reporting/ab_verdict.py.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

from perf.tools.judging.noise_thresholds import Noise
from perf.tools.reading.results import ISOLATED, Results, aligned
from perf.tools.reading.timings import GPU, WALL, Timing

# Base and head run minutes apart on the same machine and alternate, so the drift that makes a stored
# baseline need 5% (regression_rule.THRESHOLD) mostly cancels: 1% is within reach of a few pairs.
THRESHOLD = 0.01
# Standard errors that bound the band of SAME, and the least a SLOWER or FASTER must clear.
Z = 3.0
# The weight of the runner's noise profile against the A/B's own runs' spread (their degrees of freedom): a
# profile of one sitting's 9 runs; 30 instead moved no rate on the corpus by more than 1 point (NOTES.md).
PROFILE_DF = 8
# A sitting's spread is not the next one's (two modes of a GPU time per process, seen on the H200): the
# profile's sd is taken this much larger, the least factor that failed no clean gate of one sitting judged
# with the other's profile (NOTES.md: A second sitting).
PROFILE_SPREAD = 1.5
# The chance of any false SLOWER in one gate, over all its tests and looks: what z_slower is set from.
FALSE_RATE = 0.01
# Pairs of runs at most (ABBA is the first 2): 8 runs bound the time an undecided benchmark may take.
MAX_PAIRS = 4
# Below this many degrees of freedom the spread of the runs' medians is itself uncertain (two runs that agree
# by chance give s near 0): the runs' own standard errors of their medians are then the least s may be.
TRUSTED_DF = 10

SLOWER, FASTER, SAME, UNKNOWN = "slower", "faster", "same", "unknown"


@dataclass(frozen=True)
class Bounds:
    """What the standard errors are judged against in one A/B: z of SAME, the per-test chance a SLOWER may
    have on clean code, and the runner's noise profile (None: the runs' own spread alone)."""

    z: float = Z
    per_test: float = FALSE_RATE  # FALSE_RATE / (tests x looks)
    noise: Noise | None = None

    @property
    def z_slower(self) -> float:
        return max(self.z, NormalDist().inv_cdf(1 - self.per_test))


def family_bounds(
    z: float, tests: int, looks: int, noise: Noise | None, false_rate: float = FALSE_RATE
) -> Bounds:
    """Bounds for a gate of `tests` tests judged `looks` times (Bonferroni over both)."""
    return Bounds(z, false_rate / max(1, tests * looks), noise)


@dataclass(frozen=True)
class FigureVerdict:
    """One figure of one benchmark judged over all its runs."""

    figure: str  # 'wall' or 'gpu'
    verdict: str
    effect: float  # m: log(head / base), from the mean log medians
    se: float  # standard error of m; inf when nothing bounds the noise
    base_s: float  # the geometric mean of base's medians
    head_s: float
    one_way: bool = False  # head slower in every pair so far: further pairs may still call it SLOWER

    @property
    def ratio(self) -> float:
        return math.exp(self.effect)


@dataclass(frozen=True)
class Judgement:
    """One benchmark: its verdict, from its primary figure (and wall time where that is not host-bound)."""

    name: str
    verdict: str
    primary: str  # the figure judged first
    figures: dict[str, FigureVerdict]
    pair_ratios: list[float]  # head / base of each pair of runs, on the primary figure, in run order
    kernels: tuple = ()  # kernels that grew inside it (kernel_shares.py), where they decided it
    may_slow: bool = True  # a figure it may be called slower on is one way so far (judge; kernel_shares)


@dataclass(frozen=True)
class Paired:
    """Every benchmark of both sides: judged ones, and those present on one side only."""

    judged: dict[str, Judgement]
    new: list[str]  # in head only
    missing: list[str]  # in base only
    method_fallbacks: list[str] = field(default_factory=list)  # GPU methods differ: judged on wall
    bounds: Bounds | None = None  # what the standard errors were judged against

    def named(self, verdict: str) -> list[str]:
        return [name for name, j in self.judged.items() if j.verdict == verdict]

    def fallback_line(self) -> str | None:
        """One line for the benchmarks judged on wall time: their GPU times were measured differently."""
        n = len(self.method_fallbacks)
        if not n:
            return None
        return (
            f"{n} benchmark{'s' * (n != 1)} judged on wall time: base and head measured GPU time by "
            "different methods (extra_info gpu_method), whose figures are not comparable"
        )


# The sides of an A/B, and its first pairs of runs: ABBA, every benchmark twice on each side before any is
# judged.
BASE, HEAD = "base", "head"
FIRST_PAIRS = 2


def order(pair: int) -> tuple[str, str]:
    """The sides of pair number `pair` (from 0) in the order they run: ABBA, then BAAB, and so on, so each
    side runs first as often as the other and a drift over the session falls on both alike."""
    base_first = (pair % 2 == 0) == ((pair // 2) % 2 == 0)
    return (BASE, HEAD) if base_first else (HEAD, BASE)


@dataclass
class ABRun:
    """What the A/B measured and how it judged it."""

    base_commit: str
    head_state: str  # e.g. 'HEAD 1a2b3c4d5e6f clean'
    threshold: float
    z: float
    max_pairs: int
    paired: Paired | None = None
    runs: dict[str, list[Results]] = field(default_factory=lambda: {BASE: [], HEAD: []})
    base_failures: list[str] = field(default_factory=list)  # one line per base run that failed
    remeasured: list[int] = field(default_factory=list)  # benchmarks measured again in each further pair
    started: int = 0  # runs started, either side: numbers the files --save keeps
    noise_note: str = ""  # which noise profile bounded the standard errors, or why none did

    @property
    def pairs(self) -> int:
        return FIRST_PAIRS + len(self.remeasured)


def _noise(base: Sequence[Timing], head: Sequence[Timing]) -> float:
    """s: the pooled sample sd of the log medians of each side, at least the runs' own relative standard
    error while the runs are too few to trust their spread."""
    sides = [[math.log(t.median_s) for t in side] for side in (base, head)]
    df = sum(len(side) - 1 for side in sides)
    squares = sum((x - statistics.fmean(side)) ** 2 for side in sides for x in side)
    pooled = math.sqrt(squares / df) if df > 0 else math.inf
    if df >= TRUSTED_DF:
        return pooled
    own = [t.se_s / t.median_s for t in (*base, *head) if t.se_s is not None]
    if not own:
        return pooled
    floor = math.sqrt(statistics.fmean(r * r for r in own))  # the runs' typical relative error
    return floor if pooled == math.inf else max(pooled, floor)


def _pair_se(base: Sequence[Timing], head: Sequence[Timing]) -> float:
    """The standard error of the mean log ratio of the pairs (base and head in run order): a drift that
    moves both of a pair's runs cancels in it, one that moves between pairs widens it. 0 below 2 pairs."""
    logs = [math.log(h.median_s / b.median_s) for b, h in zip(base, head, strict=False)]
    if len(logs) < 2:
        return 0.0
    mean = statistics.fmean(logs)
    return math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1) / len(logs))


def judge_figure(
    figure: str,
    base: Sequence[Timing],
    head: Sequence[Timing],
    threshold: float = THRESHOLD,
    z: float = Z,
    *,
    z_slower: float | None = None,
    sd: float | None = None,
) -> FigureVerdict:
    """The verdict of one figure from its runs on each side (at least one each): SAME within z standard
    errors, SLOWER or FASTER beyond z_slower (default z) and the same way in every pair; `sd`, the runner's
    run-to-run sd of the log figure (its noise profile), bounds the spread from below."""
    log_base = statistics.fmean(math.log(t.median_s) for t in base)
    log_head = statistics.fmean(math.log(t.median_s) for t in head)
    effect = log_head - log_base
    scale = math.sqrt(1 / len(base) + 1 / len(head))
    se = max(_noise(base, head) * scale, _pair_se(base, head))
    if sd is not None:  # the profile's many runs weigh against the few of this A/B
        df = len(base) + len(head) - 2
        wide = PROFILE_SPREAD * sd * scale
        se = math.sqrt((PROFILE_DF * wide**2 + df * se**2) / (PROFILE_DF + df))
    bound = math.log1p(threshold)
    beyond = z if z_slower is None else z_slower
    pairs = [math.log(r) for r in _pair_ratios(base, head)]
    one_way = all(p > 0 for p in pairs)  # head slower in every pair
    if effect > bound and effect > beyond * se and one_way:
        verdict = SLOWER
    elif -effect > bound and -effect > beyond * se and all(p < 0 for p in pairs):
        verdict = FASTER
    elif abs(effect) + z * se < bound:
        verdict = SAME
    else:
        verdict = UNKNOWN
    return FigureVerdict(figure, verdict, effect, se, math.exp(log_base), math.exp(log_head), one_way)


def _pair_ratios(base: Sequence[Timing], head: Sequence[Timing]) -> list[float]:
    return [h.median_s / b.median_s for b, h in zip(base, head, strict=False)]


def judge(
    name: str,
    base_runs: Sequence[Results],
    head_runs: Sequence[Results],
    threshold: float = THRESHOLD,
    bounds: Bounds | None = None,
) -> tuple[Judgement, bool]:
    """One benchmark over the runs that have it: (its judgement, whether its GPU figure was set aside
    because the two sides measured it by different methods)."""
    bounds = bounds or Bounds()
    base_runs = [r for r in base_runs if name in r.timings]
    head_runs = [r for r in head_runs if name in r.timings]
    on_gpu = all(name in r.gpu_timings for r in (*base_runs, *head_runs))
    methods = {r.gpu_methods.get(name, ISOLATED) for r in (*base_runs, *head_runs)} if on_gpu else set()
    fell_back = len(methods) > 1
    wanted = [WALL] + ([GPU] if on_gpu and not fell_back else [])
    figures = {}
    for figure in wanted:
        base = [r.figures(name)[figure] for r in base_runs]
        head = [r.figures(name)[figure] for r in head_runs]
        sd = bounds.noise.figure_sd(name, figure) if bounds.noise is not None else None
        figures[figure] = judge_figure(
            figure, base, head, threshold, bounds.z, z_slower=bounds.z_slower, sd=sd
        )
    primary = GPU if GPU in figures else WALL
    verdict = figures[primary].verdict
    host_bound = any(r.timings[name].host_bound for r in base_runs)
    wall_counts = primary == GPU and not host_bound
    if wall_counts and figures[WALL].verdict == SLOWER:
        verdict = SLOWER  # the GPU is not slower, the time the user waits is: launches, syncs, copies
    ratios = _pair_ratios(
        [r.figures(name)[primary] for r in base_runs], [r.figures(name)[primary] for r in head_runs]
    )
    may_slow = figures[primary].one_way or (wall_counts and figures[WALL].one_way)
    return Judgement(name, verdict, primary, figures, ratios, may_slow=may_slow), fell_back


def judge_all(
    base_runs: Sequence[Results],
    head_runs: Sequence[Results],
    threshold: float = THRESHOLD,
    bounds: Bounds | None = None,
) -> Paired:
    """Every benchmark of either side; those of one side only are new or missing, never judged."""
    runs = aligned([*base_runs, *head_runs])  # GPU figures of one method (perf/tools/reading/results.py)
    base_runs, head_runs = runs[: len(base_runs)], runs[len(base_runs) :]
    in_base = {name for r in base_runs for name in r.timings}
    in_head = {name for r in head_runs for name in r.timings}
    judged, fallbacks = {}, []
    for name in sorted(in_base & in_head):
        judged[name], fell_back = judge(name, base_runs, head_runs, threshold, bounds)
        if fell_back:
            fallbacks.append(name)
    return Paired(judged, sorted(in_head - in_base), sorted(in_base - in_head), fallbacks, bounds)
