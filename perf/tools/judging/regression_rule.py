"""The gate's rule: when is a benchmark slower or faster than its baseline, on each figure it has.

Two figures per benchmark (perf/tools/reading/timings.py): `wall`, the median time of its timed rounds
(pytest-benchmark's stats), and `gpu`, the median GPU busy time of one call (extra_info gpu_ms,
perf/harness/gpu_time.py). The wall figure of a host-bound benchmark follows the host's CPU; its GPU figure
does not, so both are judged: the GPU time at its own threshold (from the runner's measured noise,
perf/tools/noise.py, or the threshold), the wall time at the threshold or, host-bound, at its own. A GPU-time
slowdown that a lower SM clock explains is marked as the clock's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from perf.tools.reading.timings import FIGURES, GPU, WALL, Timing

# The defaults of the rule: the relative slowdown that matters, and the noise bound in standard errors.
THRESHOLD = 0.05
Z = 3.0
# The least GPU-time threshold a noise file (perf/tools/noise.py) may give a benchmark, however steady.
GPU_FLOOR = 0.015
# The least wall-time threshold a noise file may give: the timed rounds' own clock and synchronizations.
WALL_FLOOR = 0.02

# A benchmark host-bound in the baseline (reading.timings.HOST_BOUND_SHARE) moves between back-to-back
# runs of unchanged code many times as much as a GPU-bound one (NOTES.md: Measurements behind comments in
# the code), so its wall time is judged at a threshold of its own; slowdowns between the two thresholds
# are listed.
HOST_BOUND_THRESHOLD = 0.25
HOST_BOUND_SLOWER = "host-bound slower"  # the verdict of a host-bound slowdown within its threshold

# A host-bound benchmark's wall time slower beyond its threshold while its GPU time is not slower, where it
# cannot be measured again (two stored files): the host's noise, which moves such walls 15-45% between runs of
# unchanged code (NOTES.md: A gate that stays quiet); listed, never failing. A gate's own run measures it
# again instead.
HOST_NOISE = "host noise"

# A GPU-time slowdown whose GPU ran at a lower mean SM clock, by at least this share of the slowdown, is
# marked as the clock's; it still fails unless the change at the baseline's clock is within the threshold.
CLOCK_SHARE = 0.5
CLOCK_MOVED = "clock moved"  # the verdict of such a slowdown within the threshold at the baseline's clock


@dataclass(frozen=True)
class Threshold:
    """The relative slowdown that matters for one figure of one benchmark, and where it came from."""

    value: float
    source: str  # e.g. "noise 2.0 x 0.61%", "floor", "--threshold"

    def __str__(self) -> str:
        return f"{self.value:.1%} ({self.source})"


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
      standard error taken from its own rounds (`timings.median_standard_error`). A benchmark with a wide
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
