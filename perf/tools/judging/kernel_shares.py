"""Kernel by kernel in an A/B (perf/tools/running/ab.py): a kernel that got slower inside a benchmark whose
own time the pairs cannot decide.

Back to back under the power cap, a benchmark's GPU time moves from run to run with the card's clock, and
every kernel of it moves alike: a kernel's share of the benchmark's GPU time (its microseconds per call over
the sum of all kernels', from the kernel table, extra_info gpu_kernels) cancels that common part. A kernel of
at least KERNEL_SHARE of the time is judged grown when its share is larger at head by the paired rule
(perf/tools/judging/paired_rule.py: more than the threshold and z standard errors) and its own time per call
is larger by more than the threshold too (a share also grows where the other kernels got faster). A benchmark
whose primary figure is unknown or the same is then slower, the kernel named; a faster one stays faster.
NOTES.md (A steady GPU figure) has the runs that decided it: a planted slowdown of the attention forward
flagged in 9 of 9 cells on an H200, none of 9 cells in a clean A/B on an H100.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from perf.tools.judging.paired_rule import FASTER, SLOWER, Judgement, Paired, judge_all, judge_figure
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


def grown_kernels(
    name: str, base_runs: Sequence[Results], head_runs: Sequence[Results], threshold: float, z: float
) -> list[GrownKernel]:
    """The kernels of one benchmark judged grown at head, largest share growth first."""
    base = [t for t in (kernel_times(r, name) for r in base_runs if name in r.timings) if t]
    head = [t for t in (kernel_times(r, name) for r in head_runs if name in r.timings) if t]
    if not base or not head:
        return []
    total = statistics.fmean(sum(t.values()) for t in base)
    grown = []
    for kernel in base[0]:
        if not all(kernel in t for t in (*base, *head)):
            continue  # launched on one side only: the kernel table's diff names it
        if statistics.fmean(t[kernel] for t in base) < KERNEL_SHARE * total:
            continue
        own = judge_figure(
            "kernel", _timings(base, kernel, False), _timings(head, kernel, False), threshold, z
        )
        share = judge_figure(
            "share", _timings(base, kernel, True), _timings(head, kernel, True), threshold, z
        )
        if share.verdict == SLOWER and own.effect > math.log1p(threshold):
            grown.append(GrownKernel(kernel, own.ratio, share.ratio, share.se))
    return sorted(grown, key=lambda g: -g.share_ratio)


def _timings(tables: Sequence[dict[str, float]], kernel: str, share: bool) -> list[Timing]:
    """The kernel's time (or share) in each run, as the paired rule's figures; no standard error of
    their own (the kernel table keeps none), so the runs' spread alone bounds the noise."""
    return [Timing(t[kernel] / sum(t.values()) if share else t[kernel] * 1e-6, None) for t in tables]


def with_kernels(
    paired: Paired, base_runs: Sequence[Results], head_runs: Sequence[Results], threshold: float, z: float
) -> Paired:
    """`paired` with the benchmarks that are not slower or faster, but hold a grown kernel, made slower."""
    judged = {}
    for name, judgement in paired.judged.items():
        if judgement.verdict in (SLOWER, FASTER):
            judged[name] = judgement
            continue
        grown = grown_kernels(name, base_runs, head_runs, threshold, z)
        judged[name] = replace(judgement, verdict=SLOWER, kernels=tuple(grown)) if grown else judgement
    return replace(paired, judged=judged)


def kernel_lines(judgement: Judgement) -> list[str]:
    """For the verdict: each grown kernel, its time and its share of the benchmark's GPU time."""
    return [
        f"kernel {g.kernel}: {g.time_ratio:.4f}x its time per call, {g.share_ratio:.4f}x its share of the "
        f"GPU time (±{g.share_se * 100:.2f}% se)"
        for g in judgement.kernels
    ]


def judged(base: Sequence[Results], head: Sequence[Results], threshold: float, z: float) -> Paired:
    """Every benchmark of an A/B by the paired rule, then kernel by kernel where the rule cannot say slower:
    the A/B's verdict (perf/tools/running/ab.py), and its replay on recorded runs (judging/replay.py)."""
    return with_kernels(judge_all(base, head, threshold, z), base, head, threshold, z)
