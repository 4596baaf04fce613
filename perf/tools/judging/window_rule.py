"""The baseline of the gate against history, from a window of recent runs of each benchmark: their median as
the baseline's figure and their spread as its noise (perf/history/baseline.py asks the database for the
windows; perf/tools/judging/replay.py makes them from a same-code corpus). No I/O here.

Per benchmark and figure, the window's median is the baseline and the standard deviation of its log figures
the noise. The threshold is a prediction bound for one more run: max(floor, t x sd x sqrt(1 + 1/n)), t the
Student quantile at the window's degrees of freedom (n - 1; twelve runs estimate a spread loosely, and a
normal quantile on such an estimate fails clean runs often) and at a 1% chance of any false regression over
all the figures of the run judged (Bonferroni). GPU time counts only runs whose method is the current run's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from scipy.special import stdtrit

from perf.tools.judging.noise_spread import log_sd
from perf.tools.judging.noise_thresholds import FigureNoise, Noise
from perf.tools.reading.results import ISOLATED, Results
from perf.tools.reading.timings import GPU, WALL, Timing

# Runs of history per benchmark: Perfherder compares windows of 12 runs.
WINDOW = 12
# Fewer runs than this do not make a noise profile (the median deviation of fewer moves too much with one
# run): such a benchmark is judged at --threshold.
MIN_RUNS = 6
# The chance of any false regression in one run judged against its history, over all its figures.
FALSE_RATE = 0.01
# The least threshold per figure, as for a noise file (perf/tools/noise.py).
GPU_FLOOR = 0.015
WALL_FLOOR = 0.02


class Point(Protocol):
    """One run's figures of one benchmark, as the history keeps them (perf/history/store.py's Point)."""

    wall_s: float
    gpu_s: float | None
    gpu_method: str | None
    host_bound: bool


@dataclass(frozen=True)
class RunPoint:
    """A Point made from a result file's run (the corpus's replay)."""

    wall_s: float
    gpu_s: float | None
    gpu_method: str | None
    host_bound: bool


def points_of(run: Results) -> dict[str, RunPoint]:
    """Each benchmark of a run as a history Point."""
    return {
        name: RunPoint(
            timing.median_s,
            run.gpu_timings[name].median_s if name in run.gpu_timings else None,
            run.gpu_methods.get(name, ISOLATED) if name in run.gpu_timings else None,
            timing.host_bound,
        )
        for name, timing in run.timings.items()
    }


def robust_sd(values: Sequence[float]) -> tuple[float, float]:
    """(median, 1.4826 x the median absolute deviation): a standard deviation one outlier does not move."""
    middle = statistics.median(values)
    return middle, 1.4826 * statistics.median(abs(v - middle) for v in values)


def robust_spread(values: Sequence[float]) -> float:
    """`robust_sd` relative to the median."""
    middle, sd = robust_sd(values)
    return sd / middle


def _timing(values: Sequence[float], host_bound: bool = False) -> Timing:
    """The window's median, with the standard error of a median of that noise (1.2533 sd / sqrt n)."""
    middle = statistics.median(values)
    return Timing(middle, 1.2533 * robust_spread(values) * middle / math.sqrt(len(values)), host_bound)


@dataclass
class Window:
    """What a window of runs gives the gate: the baseline's figures and the noise of each benchmark."""

    timings: dict[str, Timing] = field(default_factory=dict)
    gpu_timings: dict[str, Timing] = field(default_factory=dict)
    gpu_methods: dict[str, str] = field(default_factory=dict)
    host_bound: dict[str, bool] = field(default_factory=dict)
    spreads: dict[str, dict[str, float]] = field(default_factory=lambda: {GPU: {}, WALL: {}})  # log sd
    runs: dict[str, dict[str, int]] = field(default_factory=lambda: {GPU: {}, WALL: {}})  # behind each sd

    def results(self, path: Path, gpu: str, document: dict | None = None) -> Results:
        """The window as the baseline's Results: its medians, by the current run's GPU-time methods."""
        return Results(path, gpu, self.timings, self.gpu_timings, {}, document or {}, self.gpu_methods)

    def noise(self, path: Path, gpu: str, runs: int) -> Noise:
        """The window's noise as a noise file would give it: each benchmark's threshold max(floor, t x sd x
        sqrt(1 + 1/n)), where it has MIN_RUNS runs of that figure (else --threshold)."""
        tests = max(1, len(self.timings) + len(self.gpu_timings))
        quantile = 1 - FALSE_RATE / tests
        z = float(stdtrit(WINDOW - 1, quantile))
        figures = {}
        for figure, floor in ((GPU, GPU_FLOOR), (WALL, WALL_FLOOR)):
            # Fewer runs than WINDOW: the sd scaled by their own t over the window's, so one z serves all.
            sd = {
                name: value * float(stdtrit(self.runs[figure][name] - 1, quantile)) / z
                for name, value in self.spreads[figure].items()
            }
            figures[figure] = FigureNoise(0.0, floor, {}, sd, z, math.sqrt(1 + 1 / WINDOW))
        methods = {name: self.gpu_methods[name] for name in self.spreads[GPU]}
        return Noise(path, gpu, runs, figures, gpu_methods=methods, host_bound=self.host_bound)


def window_baseline(current: Results, series: Mapping[str, Sequence[Point]]) -> Window:
    """The baseline of `current`'s benchmarks from each one's window of points (oldest first, at most
    WINDOW of them, none of the current run)."""
    found = Window()
    for name in current.timings:
        points = list(series.get(name, ()))
        if not points:
            continue
        walls = [p.wall_s for p in points]
        found.host_bound[name] = any(p.host_bound for p in points)
        found.timings[name] = _timing(walls, found.host_bound[name])
        if len(points) >= MIN_RUNS:
            found.spreads[WALL][name], found.runs[WALL][name] = log_sd(walls), len(walls)
        method = current.gpu_methods.get(name, ISOLATED)
        alike = [p.gpu_s for p in points if p.gpu_s is not None and (p.gpu_method or ISOLATED) == method]
        if alike:
            found.gpu_timings[name], found.gpu_methods[name] = _timing(alike), method
            if len(alike) >= MIN_RUNS:
                found.spreads[GPU][name], found.runs[GPU][name] = log_sd(alike), len(alike)
    return found
