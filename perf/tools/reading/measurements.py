"""What makes a benchmark's entry in a result file a measurement: every time it records is a finite number
above 0 and every spread a finite number of at least 0. The gate, A/B, noise, combine, report and calibration
read result files through load_results (results.py), the history through records.check: both refuse an entry
that fails, in one line naming the file and the benchmark, so that no verdict and no trend rests on a time of
Infinity, 0 or less."""

from __future__ import annotations

import math
from collections.abc import Mapping

# pytest-benchmark's stats, in seconds: the median must be there, the others where recorded.
STATS_TIMES = ("median", "mean", "max")
STATS_SPREADS = ("min", "stddev", "iqr")  # a round may take 0 s where its time was replayed (record_rounds)
# The suite's extra_info, in milliseconds, where recorded (perf/harness/gpu_time.py).
GPU_TIMES = (
    "gpu_ms",
    "gpu_ms_min",
    "gpu_ms_max",
    "gpu_burst_ms",
    "gpu_isolated_ms",
    "gpu_rounds_ms",
    "gpu_rounds_ms_min",
    "gpu_rounds_ms_max",
)
GPU_SPREADS = ("gpu_ms_iqr", "gpu_ms_stddev")


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _wrong(where: str, value: object, least_zero: bool) -> str | None:
    """Why `value` is not a time (or a spread, with `least_zero`), or None where it is one."""
    fine = _number(value) and math.isfinite(value) and (value >= 0 if least_zero else value > 0)
    return None if fine else f"{where} is {value!r}"


def not_measured(entry: object) -> str | None:
    """Why a benchmark entry of a result file is not a measurement, in a few words, or None where it is one.
    A time missing (None) is no time recorded, not a wrong one; only stats.median must be there."""
    stats = entry.get("stats") if isinstance(entry, Mapping) else None
    if not isinstance(stats, Mapping) or stats.get("median") is None:
        return "no stats.median"
    info = entry.get("extra_info")
    info = info if isinstance(info, Mapping) else {}
    checks = [
        *((f"stats.{key}", stats.get(key), False) for key in STATS_TIMES),
        *((f"stats.{key}", stats.get(key), True) for key in STATS_SPREADS),
        *((f"extra_info.{key}", info.get(key), False) for key in GPU_TIMES),
        *((f"extra_info.{key}", info.get(key), True) for key in GPU_SPREADS),
    ]
    for where, value, least_zero in checks:
        if value is None:
            continue
        wrong = _wrong(where, value, least_zero)
        if wrong is not None:
            accepted = "at least 0" if least_zero else "above 0"
            return f"{wrong}; a time must be a finite number {accepted}: not a measurement"
    return None
