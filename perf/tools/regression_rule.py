"""The gate's rule: when is a benchmark slower or faster than its baseline, on each figure it has.

Two figures per benchmark: `wall`, the median time of its timed rounds (pytest-benchmark's stats), and
`gpu`, the median GPU busy time of one call (extra_info gpu_ms, perf/harness/gpu_time.py). The wall figure of
a host-bound benchmark follows the host's CPU; its GPU figure does not, so both are judged: the GPU
time at its own threshold (from the runner's measured noise, perf/tools/noise.py, or the threshold), the
wall time at the threshold or, host-bound, at its own. A GPU-time slowdown that a lower SM clock explains
is marked as the clock's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The median of n normal samples has a standard error of sqrt(pi / 2) * sigma / sqrt(n).
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)  # 1.2533
# The interquartile range of a normal distribution is 1.349 sigma; unlike the standard deviation it
# is not inflated by the few slow rounds (a collection pass, a clock change) that most runs have.
IQR_PER_SIGMA = 1.349

# The defaults of the rule: the relative slowdown that matters, and the noise bound in standard errors.
THRESHOLD = 0.05
Z = 3.0
# The least GPU-time threshold a noise file (perf/tools/noise.py) may give a benchmark, however steady.
GPU_FLOOR = 0.015
# The least wall-time threshold a noise file may give: the timed rounds' own clock and synchronizations.
WALL_FLOOR = 0.02

# A benchmark is host-bound when one call keeps the host busy for at least this share of the call's
# median time (extra_info host_ms against median_ms): the GPU then waits on Python and kernel
# launches, and the time follows the host's CPU. Between back-to-back runs of unchanged code such
# benchmarks move many times as much as GPU-bound ones (NOTES.md: Measurements behind comments in
# the code), so they are judged at a threshold of their own; slowdowns between the two thresholds
# are listed.
HOST_BOUND_SHARE = 0.8
HOST_BOUND_THRESHOLD = 0.25
HOST_BOUND_SLOWER = "host-bound slower"  # the verdict of a host-bound slowdown within its threshold

# A GPU-time slowdown whose GPU ran at a lower mean SM clock, by at least this share of the slowdown, is
# marked as the clock's; it still fails unless the change at the baseline's clock is within the threshold.
CLOCK_SHARE = 0.5
CLOCK_MOVED = "clock moved"  # the verdict of such a slowdown within the threshold at the baseline's clock

# What each figure is, for messages and tables.
WALL, GPU = "wall", "gpu"
FIGURES = {WALL: "wall time (median of the timed rounds)", GPU: "GPU busy time (median per call)"}


@dataclass(frozen=True)
class Timing:
    """One benchmark of one run: its median and the standard error of that median, in seconds."""

    median_s: float
    se_s: float | None  # None: fewer than 2 rounds, too few to estimate a spread
    host_bound: bool = False  # see HOST_BOUND_SHARE
    sm_mhz: float | None = None  # the GPU's mean SM clock while it was measured (perf/harness/clocks.py)


@dataclass(frozen=True)
class Threshold:
    """The relative slowdown that matters for one figure of one benchmark, and where it came from."""

    value: float
    source: str  # e.g. "noise 2.0 x 0.61%", "floor", "--threshold"

    def __str__(self) -> str:
        return f"{self.value:.1%} ({self.source})"


def is_host_bound(extra_info: object) -> bool:
    """Whether the suite recorded a host time per call of at least HOST_BOUND_SHARE of the median."""
    if not isinstance(extra_info, dict):
        return False
    host_ms, median_ms = extra_info.get("host_ms"), extra_info.get("median_ms")
    numbers = all(isinstance(v, int | float) and v > 0 for v in (host_ms, median_ms))
    return numbers and host_ms >= HOST_BOUND_SHARE * median_ms


def median_standard_error(stats: Mapping[str, Any]) -> float | None:
    """A robust standard error of the median from a run's own rounds (pytest-benchmark's stats).

    sigma comes from the IQR (IQR / 1.349), or from the standard deviation where the IQR is 0 or
    missing (few rounds, or rounds identical to the timer's resolution).
    """
    rounds = stats.get("rounds") or 0
    if rounds < 2:
        return None  # one round tells nothing about the spread: only the threshold applies
    iqr = stats.get("iqr") or 0.0
    sigma = iqr / IQR_PER_SIGMA if iqr > 0 else stats.get("stddev") or 0.0
    return MEDIAN_SE_FACTOR * sigma / math.sqrt(rounds)


def noise_bound(baseline: Timing, current: Timing, z: float) -> float | None:
    """Seconds of median difference that the two runs' noise explains at z standard errors."""
    if baseline.se_s is None or current.se_s is None:
        return None
    return z * math.hypot(baseline.se_s, current.se_s)


def classify(baseline: Timing, current: Timing, threshold: float, z: float) -> str:
    """'slower', 'faster' or 'unchanged': the one rule of the gate.

    A change counts only when it is large enough to matter AND too large to be noise:
    - matter: the ratio of medians leaves [1 - threshold, 1 + threshold] (5% by default), so
      that a real but tiny difference of a very steady benchmark does not fail a change;
    - noise: the difference of medians exceeds z standard errors of that difference, each run's
      standard error taken from its own rounds (`median_standard_error`). A benchmark with a wide
      spread (a launch-bound step, a shared host) then needs a larger move to count, while a
      steady one is judged by the threshold alone. With z = 3 about 1 in 740 comparisons of
      unchanged code pass the bound on the slow side by chance, before re-measurement.
    Where either run has fewer than 2 rounds there is no spread to compare with, and the threshold
    alone decides.
    """
    if not 0 < threshold < math.inf:
        # Above 1 where a noise file gives a benchmark that much spread: only a slowdown beyond it counts.
        raise ValueError(f"threshold must be a positive number; got {threshold}")
    if not 0 < z < math.inf:
        raise ValueError(f"z must be a positive number; got {z}")
    difference = current.median_s - baseline.median_s
    bound = noise_bound(baseline, current, z)
    beyond_noise = bound is None or abs(difference) > bound
    ratio = current.median_s / baseline.median_s
    if ratio > 1 + threshold and beyond_noise:
        return "slower"
    if ratio < 1 - threshold and beyond_noise:
        return "faster"
    return "unchanged"


def judge(
    baseline: Timing,
    current: Timing,
    threshold: float,
    z: float,
    host_threshold: float = HOST_BOUND_THRESHOLD,
) -> str:
    """`classify` with the host-bound rule: a slowdown of a benchmark host-bound in the baseline is
    'slower' only beyond `host_threshold`; within it, it is HOST_BOUND_SLOWER (listed, never failing).

    The baseline decides, not the current run: a change that makes a GPU-bound benchmark wait on
    the host (a synchronization, Python work per step) is judged at the normal threshold.
    """
    verdict = classify(baseline, current, threshold, z)
    if verdict != "slower" or not baseline.host_bound:
        return verdict
    return "slower" if classify(baseline, current, host_threshold, z) == "slower" else HOST_BOUND_SLOWER


def gpu_timing(extra_info: object) -> Timing | None:
    """The GPU busy time a result recorded (gpu_ms and its spread over gpu_calls calls), or None."""
    if not isinstance(extra_info, dict):
        return None
    gpu_ms = extra_info.get("gpu_ms")
    if not isinstance(gpu_ms, int | float) or isinstance(gpu_ms, bool) or not gpu_ms > 0:
        return None
    spread = {
        "rounds": extra_info.get("gpu_calls") or 0,
        "iqr": (extra_info.get("gpu_ms_iqr") or 0.0) / 1e3,
        "stddev": (extra_info.get("gpu_ms_stddev") or 0.0) / 1e3,
    }
    clocks = extra_info.get("clocks")
    clocks = clocks if isinstance(clocks, dict) else {}
    # The clock while the figure was measured (the timed rounds or the profiled calls), where recorded
    # apart; else over the whole benchmark.
    part = clocks.get("rounds" if extra_info.get("gpu_method") == "rounds" else "profiled")
    sm_mhz = (part if isinstance(part, dict) else clocks).get("sm_mhz_mean")
    sm_mhz = float(sm_mhz) if isinstance(sm_mhz, int | float) and not isinstance(sm_mhz, bool) else None
    return Timing(
        gpu_ms / 1e3, median_standard_error(spread), sm_mhz=sm_mhz if sm_mhz and sm_mhz > 0 else None
    )


def clock_moved(baseline: Timing, current: Timing) -> bool:
    """Whether the current run's GPU ran at a lower mean SM clock, by at least CLOCK_SHARE of its slowdown."""
    if baseline.sm_mhz is None or current.sm_mhz is None or current.median_s <= baseline.median_s:
        return False
    fell = 1 - current.sm_mhz / baseline.sm_mhz
    return fell > 0 and fell >= CLOCK_SHARE * (current.median_s / baseline.median_s - 1)


def at_baseline_clock(baseline: Timing, current: Timing) -> Timing:
    """The current timing scaled to the baseline's SM clock, as if its work were bound by the clock."""
    if baseline.sm_mhz is None or current.sm_mhz is None:
        return current
    scale = current.sm_mhz / baseline.sm_mhz
    se = None if current.se_s is None else current.se_s * scale
    return Timing(current.median_s * scale, se, current.host_bound, baseline.sm_mhz)


def judge_figure(
    figure: str,
    baseline: Timing,
    current: Timing,
    threshold: float,
    z: float,
    host_threshold: float = HOST_BOUND_THRESHOLD,
) -> str:
    """One figure's verdict: the wall time by `judge` (the host-bound rule included), the GPU time by
    `classify` at the threshold, host-bound or not; a GPU-time slowdown that the clock explains and that
    is within the threshold at the baseline's clock is CLOCK_MOVED (listed, never failing)."""
    if figure == WALL:
        return judge(baseline, current, threshold, z, host_threshold)
    verdict = classify(baseline, current, threshold, z)
    if verdict == "slower" and clock_moved(baseline, current):
        adjusted = classify(baseline, at_baseline_clock(baseline, current), threshold, z)
        return "slower" if adjusted == "slower" else CLOCK_MOVED
    return verdict


def verdicts(
    baseline: Mapping[str, Timing],
    current: Mapping[str, Timing],
    threshold: float,
    z: float,
    host_threshold: float = HOST_BOUND_THRESHOLD,
    gpu_threshold: float | None = None,
) -> dict[str, str]:
    """Per figure that both runs have ({'wall': ..., 'gpu': ...}), its verdict by `judge_figure`; the GPU
    time at `gpu_threshold` where given (a noise file's), else at `threshold`."""
    limits = {WALL: threshold, GPU: threshold if gpu_threshold is None else gpu_threshold}
    return {
        figure: judge_figure(figure, baseline[figure], current[figure], limits[figure], z, host_threshold)
        for figure in FIGURES
        if figure in baseline and figure in current
    }


def overall(found: Mapping[str, str]) -> str:
    """One word for a benchmark's verdicts: slower if any figure is, then host-bound slower, then
    faster if any figure is, else unchanged; with the figures it rests on, e.g. 'slower (gpu)'."""
    for verdict in ("slower", HOST_BOUND_SLOWER, CLOCK_MOVED, "faster"):
        figures = [figure for figure, v in found.items() if v == verdict]
        if figures:
            return f"{verdict} ({', '.join(figures)})"
    return "unchanged"
