"""What the gate finds between a baseline and a run: each benchmark judged on each figure by the gate's
rule (perf/tools/regression_rule.py) at its own threshold, and suspects confirmed by measuring again."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from perf.tools.regression_rule import (
    CLOCK_MOVED,
    FIGURES,
    GPU,
    HOST_BOUND_SLOWER,
    HOST_BOUND_THRESHOLD,
    THRESHOLD,
    WALL,
    Threshold,
    Timing,
    Z,
    judge_figure,
    noise_bound,
)
from perf.tools.results import Results

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

    def limit(self, name: str, figure: str) -> Threshold:
        if figure == GPU and self.gpu is not None:
            return self.gpu(name)
        return Threshold(self.threshold, "--threshold")

    def judge(self, name: str, figure: str, baseline: Timing, current: Timing) -> str:
        limit = self.limit(name, figure).value
        return judge_figure(figure, baseline, current, limit, self.z, self.host_threshold)

    def judged_at(self, name: str, figure: str, baseline: Timing, verdict: str) -> Threshold:
        """The threshold `verdict` was reached at: a slowdown of a wall time host-bound in the baseline is
        judged at the host-bound threshold (regression_rule.judge); everything else at `limit`."""
        if figure == WALL and baseline.host_bound and verdict in ("slower", HOST_BOUND_SLOWER):
            return Threshold(self.host_threshold, "--host-bound-threshold")
        return self.limit(name, figure)


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


def gpu_missing_reason(baseline: Results, current: Results, name: str) -> str | None:
    """Why the GPU times of a benchmark in both runs cannot be compared, or None if they can."""
    if name not in baseline.gpu_timings:
        return f"the baseline has no GPU time: {baseline.gpu_absent.get(name, 'not recorded')}"
    if name not in current.gpu_timings:
        return f"this run has no GPU time: {current.gpu_absent.get(name, 'not recorded')}"
    return None


def compare(baseline: Results, current: Results, rule: Rule) -> Comparison:
    """Every benchmark of both runs judged on each figure both have; one Change per benchmark and
    figure that moved."""
    found: dict[str, list[Change]] = {"slower": [], "faster": [], HOST_BOUND_SLOWER: [], CLOCK_MOVED: []}
    wall_only: dict[str, list[str]] = {}
    common = [name for name in current.timings if name in baseline.timings]
    for name in common:
        before, after = baseline.figures(name), current.figures(name)
        for figure in FIGURES:
            if figure not in before or figure not in after:
                continue
            verdict = rule.judge(name, figure, before[figure], after[figure])
            if verdict in found:
                bound = noise_bound(before[figure], after[figure], rule.z)
                threshold = rule.judged_at(name, figure, before[figure], verdict)
                found[verdict].append(
                    Change(name, before[figure], after[figure], bound, (), figure, threshold)
                )
        reason = gpu_missing_reason(baseline, current, name)
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
    )


def confirm(
    suspects: Sequence[Change],
    remeasure: Callable[[list[str]], Results],
    times: int,
    rule: Rule,
) -> tuple[list[Change], list[Change]]:
    """(regressions, did not persist): a suspect is a regression only if every re-measurement of it
    is a suspect too, on the same figure. Each round re-runs only the benchmarks still suspect."""
    remaining = list(suspects)
    ratios: dict[tuple[str, str], list[float]] = {(c.name, c.figure): [] for c in suspects}
    not_persisted: list[Change] = []
    for _ in range(times):
        if not remaining:
            break
        again = remeasure(list(dict.fromkeys(c.name for c in remaining)))
        still = []
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
        remaining = still

    def with_ratios(changes: list[Change]) -> list[Change]:
        return [replace(c, remeasured=tuple(ratios[c.name, c.figure])) for c in changes]

    return with_ratios(remaining), with_ratios(not_persisted)
