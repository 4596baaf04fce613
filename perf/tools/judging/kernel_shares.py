"""Kernel by kernel in an A/B (perf/tools/running/ab.py): a kernel that got slower inside a benchmark whose
own time the pairs cannot decide.

Back to back under the power cap, a benchmark's GPU time moves from run to run with the card's clock, and
every kernel of it moves alike: a kernel's share of the benchmark's GPU time (its microseconds per call over
the sum of all kernels', from the kernel table, extra_info gpu_kernels) cancels that common part. A kernel of
at least KERNEL_SHARE of the time is judged grown when its share is larger at head by the paired rule
(perf/tools/judging/paired_rule.py): beyond the change of share that a kernel slower by the threshold makes,
(1 - its share) x the threshold, and beyond the rule's standard errors; and its own time per call is larger
at all (a share also grows where the other kernels got faster). A benchmark whose primary figure is unknown
or the same is then slower, the kernel named; a faster one stays faster. The
share's standard error is bounded by the runner's noise profile (the noise file's share_sd and us_sd of the
kernel, from many runs); without one, by Student's t at the runs' own degrees of freedom, since the spread of
two runs a side says little of the next.
NOTES.md (A steady GPU figure) has the runs that decided it: a planted slowdown of the attention forward
flagged in 9 of 9 cells on an H200, none of 9 cells in a clean A/B on an H100.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from scipy.special import stdtrit

from perf.tools.judging.noise_thresholds import Noise
from perf.tools.judging.paired_rule import (
    FASTER,
    SLOWER,
    UNKNOWN,
    Bounds,
    Judgement,
    Paired,
    family_bounds,
    judge_all,
    judge_figure,
)
from perf.tools.reading.results import Results
from perf.tools.reading.timings import Timing

# The least share of a benchmark's GPU time a kernel must hold to be judged on its own: below it, the
# clock moves small kernels more than a change worth naming, and the comparisons grow in number.
KERNEL_SHARE = 0.10


@dataclass(frozen=True)
class GrownKernel:
    kernel: str
    time_ratio: float  # head / base of its microseconds per call (geometric means of the runs)
    share_ratio: float  # head / base of its share of the benchmark's GPU time
    share_se: float  # the standard error of the log share ratio


def kernel_times(results: Results, name: str) -> dict[str, float] | None:
    """Microseconds per call of each kernel of one benchmark in one run, or None without a table."""
    return results.kernel_tables.get(name)


def _tables(name: str, runs: Sequence[Results]) -> list[dict[str, float]]:
    """The kernel tables of `name` in the runs that measured it and recorded one, in run order."""
    return [t for t in (kernel_times(r, name) for r in runs if name in r.timings) if t]


def large_kernels(name: str, base_runs: Sequence[Results], head_runs: Sequence[Results]) -> list[str]:
    """The kernels of one benchmark judged on their own: in every run's table, with at least KERNEL_SHARE of
    the base's GPU time."""
    base, head = _tables(name, base_runs), _tables(name, head_runs)
    if not base or not head:
        return []
    total = statistics.fmean(sum(t.values()) for t in base)
    return [
        kernel
        for kernel in base[0]
        if all(kernel in t for t in (*base, *head))
        and statistics.fmean(t[kernel] for t in base) >= KERNEL_SHARE * total
    ]


def _z_without_profile(bounds: Bounds, runs: int) -> float:
    """The bound of a kernel's share without a noise profile: Student's t at the runs' degrees of freedom."""
    df = max(1, runs - 2)
    return max(bounds.z_slower, float(stdtrit(df, 1 - bounds.per_test)))


def grown_kernels(
    name: str, base_runs: Sequence[Results], head_runs: Sequence[Results], threshold: float, bounds: Bounds
) -> list[GrownKernel]:
    """The kernels of one benchmark judged grown at head, largest share growth first."""
    base, head = _tables(name, base_runs), _tables(name, head_runs)
    grown = []
    for kernel in large_kernels(name, base_runs, head_runs):
        total = statistics.fmean(sum(t.values()) for t in base)
        noise = bounds.noise
        share_sd = noise.share_sd(name, kernel) if noise is not None else None
        us_sd = noise.share_sd(name, kernel, "us_sd") if noise is not None else None
        z_slower = (
            bounds.z_slower if share_sd is not None else _z_without_profile(bounds, len(base) + len(head))
        )
        own = judge_figure(
            "kernel", _timings(base, kernel, False), _timings(head, kernel, False), threshold, bounds.z,
            z_slower=z_slower, sd=us_sd,
        )  # fmt: skip
        # A kernel of share p slower by d moves its share by about d x (1 - p): the share's threshold is a
        # kernel slower by `threshold`, whatever its share.
        rest = 1 - statistics.fmean(t[kernel] for t in base) / total
        share = judge_figure(
            "share", _timings(base, kernel, True), _timings(head, kernel, True),
            math.expm1(rest * math.log1p(threshold)), bounds.z, z_slower=z_slower, sd=share_sd,
        )  # fmt: skip
        if share.verdict == SLOWER and own.effect > 0:
            grown.append(GrownKernel(kernel, own.ratio, share.ratio, share.se))
    return sorted(grown, key=lambda g: -g.share_ratio)


def _timings(tables: Sequence[dict[str, float]], kernel: str, share: bool) -> list[Timing]:
    """The kernel's time (or share) in each run, as the paired rule's figures; no standard error of
    their own (the kernel table keeps none), so the runs' spread alone bounds the noise."""
    return [Timing(t[kernel] / sum(t.values()) if share else t[kernel] * 1e-6, None) for t in tables]


def with_kernels(
    paired: Paired,
    base_runs: Sequence[Results],
    head_runs: Sequence[Results],
    threshold: float,
    bounds: Bounds,
) -> Paired:
    """`paired` with the benchmarks that are not slower or faster, but hold a grown kernel, made slower."""
    judged = {}
    for name, judgement in paired.judged.items():
        if judgement.verdict in (SLOWER, FASTER):
            judged[name] = judgement
            continue
        grown = grown_kernels(name, base_runs, head_runs, threshold, bounds)
        judged[name] = replace(judgement, verdict=SLOWER, kernels=tuple(grown)) if grown else judgement
    return replace(paired, judged=judged)


def _shares_one_way(name: str, base_runs: Sequence[Results], head_runs: Sequence[Results]) -> bool:
    """Whether some large kernel of `name` holds a larger share at head in every pair so far."""
    base, head = _tables(name, base_runs), _tables(name, head_runs)
    return any(
        all(
            h.median_s > b.median_s
            for b, h in zip(_timings(base, kernel, True), _timings(head, kernel, True), strict=False)
        )
        for kernel in large_kernels(name, base_runs, head_runs)
    )


def to_measure_again(paired: Paired, base_runs: Sequence[Results], head_runs: Sequence[Results]) -> list[str]:
    """The undecided benchmarks that further pairs may still call slower. SLOWER wants head slower in every
    pair on the figure that decides it, so one pair the other way on each such figure (its primary, its
    wall unless host-bound, each large kernel's share) rules it out for good: measuring it again could only
    make it SAME, which passes as UNKNOWN does."""
    return [
        name
        for name in paired.named(UNKNOWN)
        if paired.judged[name].may_slow or _shares_one_way(name, base_runs, head_runs)
    ]


def kernel_lines(judgement: Judgement) -> list[str]:
    """For the verdict: each grown kernel, its time and its share of the benchmark's GPU time."""
    return [
        f"kernel {g.kernel}: {g.time_ratio:.4f}x its time per call, {g.share_ratio:.4f}x its share of the "
        f"GPU time (±{g.share_se * 100:.2f}% se)"
        for g in judgement.kernels
    ]


def tests_of(base: Sequence[Results], head: Sequence[Results]) -> int:
    """The tests an A/B of these runs makes at one look: each benchmark's primary figure, its wall time
    beside a GPU figure, and each of its large kernels."""
    names = {n for r in base for n in r.timings} & {n for r in head for n in r.timings}
    return sum(1 + (n in base[0].gpu_timings) + len(large_kernels(n, base, head)) for n in names)


def judged(
    base: Sequence[Results],
    head: Sequence[Results],
    threshold: float,
    z: float,
    *,
    noise: Noise | None = None,
    looks: int = 1,
) -> Paired:
    """Every benchmark of an A/B by the paired rule, then kernel by kernel where the rule cannot say slower,
    every test bounded so that a gate of `looks` looks fails clean code at most FALSE_RATE of the time: the
    A/B's verdict (perf/tools/running/ab.py), and its replay on recorded runs (judging/replay.py)."""
    bounds = family_bounds(z, tests_of(base, head), looks, noise)
    return with_kernels(judge_all(base, head, threshold, bounds), base, head, threshold, bounds)
