"""The gate's rules replayed on a same-code corpus (perf/tools/reading/corpus.py): how often each calls
unchanged code slower, counted per gate run over every benchmark and kernel it judges, and how often it
catches a slowdown planted in the head's runs (perf/tools/judging/plants.py). No I/O here;
`python -m perf.tools.calibrate` prints the tallies.

- A/B: every deal of four runs of a set in time order as ABBA, judged as the live A/B judges them
  (kernel_shares.judged); the undecided get the further BA/AB pairs the live gate would measure, from the
  set's unused runs that follow, restricted to the undecided benchmarks as a re-measurement is.
- Stored baseline: one run as the baseline, judged against every other run of the current set, each suspect
  measured again on the runs after the current one (`remeasure` 0: a comparison of two stored files); the
  noise file from the set's runs not judged, as one made from the corpus (or `make noise`'s few after it).
- History: every WINDOW consecutive runs as the history, judged against the run after them, on its first
  verdict (no re-measurement): a nightly gate over hundreds of benchmarks stands on it.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from perf.tools.judging import regression_rule
from perf.tools.judging.changes import Rule, compare, judged_again, with_noise
from perf.tools.judging.kernel_shares import judged, to_measure_again
from perf.tools.judging.noise_spread import noise_document
from perf.tools.judging.noise_thresholds import Noise, NoiseThresholds, noise_of
from perf.tools.judging.paired_rule import BASE, FIRST_PAIRS, SLOWER, order
from perf.tools.judging.plants import WHOLE, Plant, kernels_to_plant, planted
from perf.tools.judging.window_rule import WINDOW, points_of, window_baseline
from perf.tools.reading.results import Results, align_to, aligned

AB, STORED, FILES, HISTORY = "A/B", "stored baseline", "stored files", "history"
RUNS_PER_DEAL = 2 * FIRST_PAIRS  # ABBA
NOISE_RUNS = 3  # as `make noise` runs by default
CLEAN = "clean"


@dataclass
class Tally:
    """One rule on one scenario: gate runs replayed and benchmark verdicts, how many were slower."""

    rule: str
    scenario: str  # CLEAN, or the plant
    gates: int = 0
    failed: int = 0  # gate runs with at least one benchmark slower
    verdicts: int = 0  # benchmark verdicts counted (for a plant: those it was planted in)
    slower: int = 0
    judged_by: Counter = field(default_factory=Counter)  # benchmark -> verdicts
    slower_by: Counter = field(default_factory=Counter)  # benchmark -> slower verdicts
    why: Counter = field(default_factory=Counter)  # what made them slower: 'gpu', 'wall', 'kernel'
    again: int = 0  # benchmark runs measured again after the first runs (A/B: the further pairs)

    @classmethod
    def summed(cls, parts: Sequence[Tally]) -> Tally:
        """One tally of the same rule and scenario over several (the sets of a corpus)."""
        total = cls(parts[0].rule, parts[0].scenario)
        for part in parts:
            total.gates += part.gates
            total.failed += part.failed
            total.verdicts += part.verdicts
            total.slower += part.slower
            total.again += part.again
            for mine, theirs in ((total.judged_by, part.judged_by), (total.slower_by, part.slower_by),
                                 (total.why, part.why)):  # fmt: skip
                mine.update(theirs)
        return total

    def add(self, judged_names: Sequence[str], slower: dict[str, str]) -> None:
        """One gate run: the benchmarks it counted, and those slower with the figure that decided each."""
        self.gates += 1
        counted = [name for name in judged_names if name in slower]
        self.failed += bool(counted)
        self.verdicts += len(judged_names)
        self.slower += len(counted)
        self.judged_by.update(judged_names)
        self.slower_by.update(counted)
        self.why.update(slower[name] for name in counted)

    @property
    def gate_rate(self) -> float:
        return self.failed / self.gates if self.gates else float("nan")

    @property
    def verdict_rate(self) -> float:
        return self.slower / self.verdicts if self.verdicts else float("nan")

    def worst(self, count: int = 3) -> list[tuple[str, float]]:
        """The benchmarks most often slower, with their share of their verdicts."""
        rates = {n: self.slower_by[n] / self.judged_by[n] for n in self.slower_by}
        return sorted(rates.items(), key=lambda item: -item[1])[:count]


def _targets(runs: Sequence[Results], plant: Plant | None) -> tuple[list[Results], list[str] | None]:
    """The runs with `plant` in every benchmark it applies to, and those benchmarks (None: no plant)."""
    if plant is None:
        return list(runs), None
    kernels = {} if plant.where == WHOLE else kernels_to_plant(runs[0], plant.where)
    names = sorted(runs[0].timings) if plant.where == WHOLE else sorted(kernels)
    return [planted(run, plant, kernels) for run in runs], names


def _restricted(run: Results, names: set[str]) -> Results:
    """A re-measurement: the run's figures of `names` alone, as a run of those node ids records them."""

    def keep(found: dict) -> dict:
        return {n: v for n, v in found.items() if n in names}

    return replace(
        run,
        timings=keep(run.timings),
        gpu_timings=keep(run.gpu_timings),
        gpu_alternates=keep(run.gpu_alternates),
        gpu_methods=keep(run.gpu_methods),
    )


def _decided_by(judgement) -> str:
    if judgement.kernels:
        return "kernel"
    return judgement.primary if judgement.figures[judgement.primary].verdict == SLOWER else "wall"


def ab_deals(runs: int, limit: int | None = None, seed: int = 0) -> list[tuple[int, ...]]:
    """Every choice of four of `runs` runs in time order (an ABBA), or `limit` of them drawn at random."""
    deals = list(itertools.combinations(range(runs), RUNS_PER_DEAL))
    if limit is not None and len(deals) > limit:
        deals = sorted(random.Random(seed).sample(deals, limit))
    return deals


def _following(used: Sequence[int], runs: int) -> list[int]:
    """The runs not in `used`: those after its last first, then the earlier ones."""
    rest = [i for i in range(runs) if i not in used]
    return [i for i in rest if i > used[-1]] + [i for i in rest if i < used[-1]]


def replay_ab(
    runs: Sequence[Results],
    *,
    threshold: float,
    z: float,
    max_pairs: int,
    plant: Plant | None = None,
    deals: Sequence[tuple[int, ...]] | None = None,
    noise: Noise | None = None,
) -> Tally:
    """The A/B rule on deals of `runs` (one set, oldest first): base and head from the same runs, the
    head's planted where `plant` is given; `noise` the runner's noise profile the live A/B would read."""
    looks = max_pairs - FIRST_PAIRS + 1

    def judge(base: list[Results], head: list[Results]):
        return judged(base, head, threshold, z, noise=noise, looks=looks)

    heads, names = _targets(runs, plant)
    tally = Tally(AB, CLEAN if plant is None else str(plant))
    for deal in deals if deals is not None else ab_deals(len(runs)):
        order_of_runs = [*deal, *_following(deal, len(runs))]
        sides: dict[str, list[Results]] = {BASE: [], "head": []}
        for pair in range(FIRST_PAIRS):
            for side, index in zip(order(pair), order_of_runs[2 * pair : 2 * pair + 2], strict=True):
                sides[side].append(runs[index] if side == BASE else heads[index])
        paired = judge(sides[BASE], sides["head"])
        pair = FIRST_PAIRS
        while (
            pair < max_pairs
            and (unknown := set(to_measure_again(paired, sides[BASE], sides["head"])))
            and 2 * pair + 2 <= len(order_of_runs)
        ):
            for side, index in zip(order(pair), order_of_runs[2 * pair : 2 * pair + 2], strict=True):
                run = runs[index] if side == BASE else heads[index]
                sides[side].append(_restricted(run, unknown))
            tally.again += 2 * len(unknown)
            paired = judge(sides[BASE], sides["head"])
            pair += 1
        counted = sorted(paired.judged) if names is None else [n for n in names if n in paired.judged]
        slower = {n: _decided_by(paired.judged[n]) for n in counted if paired.judged[n].verdict == SLOWER}
        tally.add(counted, slower)
    return tally


def _slower_of(comparison_suspects, again: Sequence[Results], rule: Rule, methods) -> dict[str, str]:
    """The suspects still slower after each re-measurement in `again`, with the figure of each."""
    remaining = list(comparison_suspects)
    ratios = {(c.name, c.figure): [] for c in remaining}
    for run in again:
        if not remaining:
            break
        remaining, _ = judged_again(remaining, align_to(run, methods), rule, ratios)
    return {c.name: c.figure for c in remaining}


def _stored_rule(noise: Noise | None, baseline: Results, threshold: float, z: float, host: float) -> Rule:
    thresholds = NoiseThresholds(threshold, noise, baseline.gpu_methods, [])
    return with_noise(Rule(threshold, z, host), thresholds)


def replay_stored(
    baseline_runs: Sequence[Results],
    current_runs: Sequence[Results],
    *,
    same_set: bool,
    remeasure: int,
    noise_runs: int | None = None,
    threshold: float = regression_rule.THRESHOLD,
    z: float = regression_rule.Z,
    host_threshold: float = regression_rule.HOST_BOUND_THRESHOLD,
    plant: Plant | None = None,
) -> Tally:
    """The gate against a stored baseline and its noise file: every run of `baseline_runs` as the baseline,
    every other run of `current_runs` judged against it, its suspects measured again on the runs after it.
    The noise file: the `noise_runs` runs after the baseline (`make noise`'s few), or None: every run of the
    baseline's set that is not judged (a noise file from the corpus)."""
    currents, names = _targets(current_runs, plant)
    tally = Tally(STORED if remeasure else FILES, CLEAN if plant is None else str(plant))
    n = len(baseline_runs)
    for b in range(n):
        fixed = [(b + 1 + i) % n for i in range(noise_runs)] if noise_runs else []
        used = {b, *fixed} if same_set else set()
        others = [i for i in range(len(current_runs)) if i not in used]
        for position, c in enumerate(others):
            again = [others[(position + 1 + k) % len(others)] for k in range(remeasure)]
            judged_here = {c, *again} if same_set else set()
            noisy = fixed or [i for i in range(n) if i != b and i not in judged_here]
            document = noise_document([baseline_runs[i] for i in noisy], "replay")
            noise = noise_of(document, Path("the replay's noise runs"))
            baseline, current = aligned([baseline_runs[b], currents[c]])
            rule = _stored_rule(noise, baseline, threshold, z, host_threshold)
            measured = [currents[i] for i in again]
            slower = _slower_of(
                compare(baseline, current, rule, remeasurable=bool(remeasure)).suspects,
                measured,
                rule,
                baseline.gpu_methods,
            )
            counted = sorted(set(baseline.timings) & set(current.timings))
            tally.add(counted if names is None else [x for x in names if x in counted], slower)
    return tally


def replay_history(
    runs: Sequence[Results],
    *,
    window: int = WINDOW,
    threshold: float = regression_rule.THRESHOLD,
    z: float = regression_rule.Z,
    host_threshold: float = regression_rule.HOST_BOUND_THRESHOLD,
    plant: Plant | None = None,
) -> Tally:
    """The gate against history: each `window` consecutive runs (oldest first) as the history, the run
    after them judged on its first verdict."""
    currents, names = _targets(runs, plant)
    points = [points_of(run) for run in runs]
    tally = Tally(HISTORY, CLEAN if plant is None else str(plant))
    for t in range(window, len(runs)):
        current = currents[t]
        series = {name: [p[name] for p in points[t - window : t] if name in p] for name in current.timings}
        found = window_baseline(current, series)
        baseline = Results(
            Path("window"), current.machine, found.timings, found.gpu_timings, {}, {}, found.gpu_methods
        )
        noise = found.noise(Path("the replay's window"), current.machine, window)
        rule = _stored_rule(noise, baseline, threshold, z, host_threshold)
        slower = {c.name: c.figure for c in compare(baseline, current, rule).suspects}
        counted = sorted(set(baseline.timings) & set(current.timings))
        tally.add(counted if names is None else [x for x in names if x in counted], slower)
    return tally
