"""What a noise file gives, as `python -m perf.tools.noise` says it once the file is written: per figure,
the distribution of the thresholds over its benchmarks, and how many its runs showed host-bound."""

from __future__ import annotations

import statistics

from perf.tools.judging.noise_thresholds import Noise
from perf.tools.reading.timings import GPU, WALL


def distribution(noise: Noise) -> list[str]:
    """The thresholds the file gives, per figure, as a distribution over its benchmarks."""
    lines = []
    for figure, what in ((GPU, "GPU-time"), (WALL, "wall-time")):
        known = noise.figures.get(figure)
        if known is None:
            continue
        values = sorted(t.value for t in map(known.threshold, known.spread) if t is not None)
        if not values:
            lines.append(f"no benchmark with {what} in every run: the gate judges it at --threshold")
            continue
        at_floor = sum(v <= known.floor for v in values)
        quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
        lines.append(
            f"k = {known.k:g}; {what} thresholds of {len(values)} benchmarks: {at_floor} at the floor "
            f"({known.floor:.1%}), {sum(v <= 0.02 for v in values)} at 2% or less; "
            f"median {statistics.median(values):.2%}, "
            f"quartiles {quartiles[0]:.2%} / {quartiles[2]:.2%}, largest {values[-1]:.2%}"
        )
    host_bound = sum(noise.host_bound.values())
    lines.append(f"{host_bound} benchmark(s) host-bound in these runs: their wall time follows the host")
    return lines
