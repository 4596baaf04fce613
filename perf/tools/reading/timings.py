"""A benchmark's figures as a result file records them, read without judging them.

Two figures per benchmark: `wall`, the median time of its timed rounds (pytest-benchmark's stats), and
`gpu`, the median GPU busy time of one call (extra_info gpu_ms, perf/harness/gpu_time.py), each with the
standard error of its median from the run's own rounds or calls. A benchmark is host-bound where its result
says the host was busy for most of a call: its wall figure then follows the host's CPU. The gate's rule
(perf/tools/judging/regression_rule.py) judges these figures.
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

# A benchmark is host-bound when one call keeps the host busy for at least this share of the call's
# median time (extra_info host_ms against median_ms): the GPU then waits on Python and kernel
# launches, and the time follows the host's CPU. Between back-to-back runs of unchanged code such
# benchmarks move many times as much as GPU-bound ones (NOTES.md: Measurements behind comments in
# the code), so they are judged at a threshold of their own (regression_rule.HOST_BOUND_THRESHOLD).
HOST_BOUND_SHARE = 0.8

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
