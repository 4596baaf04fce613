"""What the gate finds between a baseline and a run: each benchmark judged on each figure by the gate's
rule (perf/tools/judging/regression_rule.py) at its own threshold, and each re-measurement of the suspects
judged (perf/tools/running/remeasure.py measures them again)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from perf.tools.judging.noise_thresholds import NoiseThresholds
from perf.tools.judging.regression_rule import (
    CLOCK_MOVED,
    HOST_BOUND_SLOWER,
    HOST_BOUND_THRESHOLD,
    HOST_NOISE,
    THRESHOLD,
    Threshold,
    Z,
    judge_figure,
    noise_bound,
)
from perf.tools.reading.results import ISOLATED, Results
from perf.tools.reading.timings import GPU, WALL, Timing

# The threshold a change records when none was given: the gate's default, from --threshold.
DEFAULT_THRESHOLD = Threshold(THRESHOLD, "--threshold")


@dataclass(frozen=True)
class Rule:
    """The gate's rule for one comparison: the wall-time threshold, the noise bound, the host-bound
    threshold, and each benchmark's GPU-time threshold (a noise file's, or the wall's)."""

    threshold: float
    z: float = Z
    host_threshold: float = HOST_BOUND_THRESHOLD
    gpu: Callable[[str], Threshold] | None = None  # None: the GPU time at `threshold` too
    wall: Callable[[str], Threshold] | None = None  # None: the wall time at `threshold`
    # Whether the runner's noise showed the benchmark host-bound (None: it does not know).
    host_bound: Callable[[str], bool | None] | None = None

    def limit(self, name: str, figure: str) -> Threshold:
        if figure == GPU and self.gpu is not None:
            return self.gpu(name)
        if figure == WALL and self.wall is not None:
            return self.wall(name)
        return Threshold(self.threshold, "--threshold")

    def as_measured(self, name: str, figure: str, baseline: Timing) -> Timing:
        """The baseline's figure, host-bound where the noise showed the benchmark to be."""
        if figure == WALL and self.host_bound is not None and self.host_bound(name):
            return replace(baseline, host_bound=True)
        return baseline

    def judge(self, name: str, figure: str, baseline: Timing, current: Timing) -> str:
        limit = self.limit(name, figure).value
        baseline = self.as_measured(name, figure, baseline)
        host = max(self.host_threshold, limit)  # a noise threshold above it is what the runs showed
        return judge_figure(figure, baseline, current, limit, self.z, host)

    def judged_at(self, name: str, figure: str, baseline: Timing, verdict: str) -> Threshold:
        """The threshold `verdict` was reached at: a slowdown of a wall time host-bound in the baseline
        (or in the noise) is judged at the host-bound threshold, or the noise's where that is larger
        (regression_rule.judge); everything else at `limit`."""
        limit = self.limit(name, figure)
        host_bound = self.as_measured(name, figure, baseline).host_bound
        if figure == WALL and host_bound and verdict in ("slower", HOST_BOUND_SLOWER, HOST_NOISE):
            if limit.value > self.host_threshold:
                return limit
            return Threshold(self.host_threshold, "--host-bound-threshold")
        return limit


def with_noise(rule: Rule, thresholds: NoiseThresholds) -> Rule:
    """`rule` with each benchmark's GPU and wall thresholds, and host-bound classification, from a noise
    file (perf/tools/judging/noise_thresholds.py)."""
    return replace(rule, gpu=thresholds.gpu, wall=thresholds.wall, host_bound=thresholds.host_bound)


@dataclass(frozen=True)
class Change:
    name: str  # pytest node id
    baseline: Timing
    current: Timing
    noise_s: float | None  # the bound of `noise_bound`; None when only the threshold applied
    remeasured: tuple[float, ...] = ()  # ratios of the re-measurements, in order
    figure: str = WALL  # which of the benchmark's figures changed: WALL or GPU
    threshold: Threshold = DEFAULT_THRESHOLD  # the one it was judged at

    @property
    def ratio(self) -> float:
        return self.current.median_s / self.baseline.median_s


@dataclass(frozen=True)
class Comparison:
    compared: int
    suspects: list[Change]  # slower beyond threshold and noise, not yet measured again
    improvements: list[Change]
    host_bound: list[Change]  # host-bound and slower within their own threshold: listed (see `judge`)
    new: list[str]  # in the current run only
    missing: list[str]  # in the baseline only
    # Benchmarks judged on wall time alone, by why their GPU time could not be compared.
    wall_only: dict[str, list[str]] = field(default_factory=dict)
    clock_moved: list[Change] = field(default_factory=list)  # GPU time slower, within it at the same clock
    host_noise: list[Change] = field(default_factory=list)  # host-bound wall slower, GPU not: files only


def gpu_missing_reason(baseline: Results, current: Results, name: str) -> str | None:
    """Why the GPU times of a benchmark in both runs cannot be compared, or None if they can."""
    if name not in baseline.gpu_timings:
        return f"the baseline has no GPU time: {baseline.gpu_absent.get(name, 'not recorded')}"
    if name not in current.gpu_timings:
        return f"this run has no GPU time: {current.gpu_absent.get(name, 'not recorded')}"
    before, after = baseline.gpu_methods.get(name, ISOLATED), current.gpu_methods.get(name, ISOLATED)
    if before != after:
        # A burst's steady figure and an isolated call's differ by the clock state alone: never one figure.
        return f"GPU time measured by another method (the baseline's {before}, this run's {after})"
    return None


def compare(baseline: Results, current: Results, rule: Rule, *, remeasurable: bool = True) -> Comparison:
    """Every benchmark of both runs judged on each figure both have; one Change per benchmark and
    figure that moved. Where the suspects cannot be measured again (`remeasurable` False: two stored files),
    a host-bound benchmark's wall time slower while its GPU time is not is HOST_NOISE, not a suspect."""
    found: dict[str, list[Change]] = {
        "slower": [], "faster": [], HOST_BOUND_SLOWER: [], CLOCK_MOVED: [], HOST_NOISE: [],
    }  # fmt: skip
    wall_only: dict[str, list[str]] = {}
    common = [name for name in current.timings if name in baseline.timings]
    for name in common:
        before, after = baseline.figures(name), current.figures(name)
        reason = gpu_missing_reason(baseline, current, name)
        verdicts = {}
        for figure in (GPU, WALL):  # the GPU time's verdict first: a host-bound wall's depends on it
            if figure not in before or figure not in after or (figure == GPU and reason is not None):
                continue
            verdict = verdicts[figure] = rule.judge(name, figure, before[figure], after[figure])
            host_bound = rule.as_measured(name, figure, before[figure]).host_bound
            if figure == WALL and verdict == "slower" and host_bound and not remeasurable:
                verdict = HOST_NOISE if verdicts.get(GPU, "slower") != "slower" else verdict
            if verdict in found:
                bound = noise_bound(before[figure], after[figure], rule.z)
                threshold = rule.judged_at(name, figure, before[figure], verdict)
                found[verdict].append(
                    Change(name, before[figure], after[figure], bound, (), figure, threshold)
                )
        if reason is not None:
            wall_only.setdefault(reason, []).append(name)
    return Comparison(
        compared=len(common),
        suspects=sorted(found["slower"], key=lambda c: -c.ratio),
        improvements=sorted(found["faster"], key=lambda c: c.ratio),
        host_bound=sorted(found[HOST_BOUND_SLOWER], key=lambda c: -c.ratio),
        new=sorted(name for name in current.timings if name not in baseline.timings),
        missing=sorted(name for name in baseline.timings if name not in current.timings),
        wall_only=wall_only,
        clock_moved=sorted(found[CLOCK_MOVED], key=lambda c: -c.ratio),
        host_noise=sorted(found[HOST_NOISE], key=lambda c: -c.ratio),
    )


def judged_again(
    remaining: Sequence[Change], again: Results, rule: Rule, ratios: Mapping[tuple[str, str], list[float]]
) -> tuple[list[Change], list[Change]]:
    """One re-measurement of the suspects still `remaining`: (still suspect, did not persist). A suspect
    stays one where `again` shows it slower on the same figure, or lacks that figure; the ratio of each one
    measured is added to its list in `ratios` (by name and figure)."""
    still, not_persisted = [], []
    for change in remaining:
        timing = again.figures(change.name).get(change.figure) if change.name in again.timings else None
        if timing is None:
            # Skipped, not collected or without that figure this time: nothing showed it to be
            # noise, so it stays a suspect; a gate must not pass because a figure went missing.
            still.append(change)
            continue
        ratios[change.name, change.figure].append(timing.median_s / change.baseline.median_s)
        verdict = rule.judge(change.name, change.figure, change.baseline, timing)
        (still if verdict == "slower" else not_persisted).append(change)
    return still, not_persisted


def with_ratios(changes: Sequence[Change], ratios: Mapping[tuple[str, str], list[float]]) -> list[Change]:
    """`changes`, each with the ratios of its re-measurements."""
    return [replace(c, remeasured=tuple(ratios[c.name, c.figure])) for c in changes]
