"""Slowdowns planted in recorded runs, to measure how often a rule catches them (judging/replay.py): a whole
benchmark slower by a factor, or one of its kernels.

A whole benchmark: its wall and GPU figures (the other methods' too) and every kernel of its table times the
factor, so every kernel's share stays as it was. One kernel: that kernel's time per call times the factor, and
the time it adds on the GPU added to the benchmark's GPU figures, and to its wall time unless it is host-bound
(where the GPU waits on the host, more GPU work hides in the waits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from perf.tools.judging.kernel_shares import KERNEL_SHARE
from perf.tools.reading.results import Results
from perf.tools.reading.timings import Timing

# The kernel table's row that sums the kernels beyond its top rows: never one kernel.
OTHER_ROW = "other ("
WHOLE, SMALLEST_KERNEL, LARGEST_KERNEL = "whole", "smallest kernel", "largest kernel"


@dataclass(frozen=True)
class Plant:
    """A slowdown: `factor` on the whole benchmark, or on one kernel of at least KERNEL_SHARE of its time."""

    factor: float
    where: str = WHOLE  # WHOLE, SMALLEST_KERNEL or LARGEST_KERNEL

    def __str__(self) -> str:
        what = "whole benchmark" if self.where == WHOLE else f"{self.where} of >= {KERNEL_SHARE:.0%} share"
        return f"{what} x{self.factor:g}"


def target_kernel(table: Mapping[str, float], where: str) -> str | None:
    """The kernel a plant slows in a benchmark with this kernel table: the smallest or the largest of those
    with at least KERNEL_SHARE of its time; None where none has."""
    total = sum(table.values())
    large = [k for k, us in table.items() if not k.startswith(OTHER_ROW) and us >= KERNEL_SHARE * total]
    if not large or total <= 0:
        return None
    pick = min if where == SMALLEST_KERNEL else max
    return pick(large, key=lambda k: table[k])


def _scaled(timing: Timing, factor: float) -> Timing:
    se = None if timing.se_s is None else timing.se_s * factor
    return replace(timing, median_s=timing.median_s * factor, se_s=se)


def _added(timing: Timing, seconds: float) -> Timing:
    return _scaled(timing, (timing.median_s + seconds) / timing.median_s)


def _with_kernels(document: Mapping, tables: Mapping[str, dict[str, float]]) -> dict:
    """`document` with the kernel tables of the benchmarks in `tables` replaced (their us per call)."""
    benchmarks = []
    for entry in document.get("benchmarks", ()):
        name = entry.get("fullname") if isinstance(entry, dict) else None
        if name in tables:
            info = dict(entry["extra_info"])
            info["gpu_kernels"] = [
                {**row, "us": tables[name].get(row.get("kernel"), row.get("us"))}
                for row in info["gpu_kernels"]
            ]
            entry = {**entry, "extra_info": info}
        benchmarks.append(entry)
    return {**document, "benchmarks": benchmarks}


def planted(run: Results, plant: Plant, kernels: Mapping[str, str]) -> Results:
    """`run` with `plant` in every benchmark it has: the whole of each, or for a kernel plant the kernel that
    `kernels` names for each benchmark (those not named are left as they are)."""
    wall, gpu, alternates = dict(run.timings), dict(run.gpu_timings), dict(run.gpu_alternates)
    tables = {}
    for name in run.timings:
        table = run.kernel_tables.get(name)
        if plant.where == WHOLE:
            wall[name] = _scaled(wall[name], plant.factor)
            if name in gpu:
                gpu[name] = _scaled(gpu[name], plant.factor)
                alternates[name] = {m: _scaled(t, plant.factor) for m, t in alternates.get(name, {}).items()}
            if table:
                tables[name] = {k: us * plant.factor for k, us in table.items()}
            continue
        kernel = kernels.get(name)
        if kernel is None or not table or kernel not in table or name not in gpu:
            continue
        added_s = table[kernel] * (plant.factor - 1) * 1e-6
        tables[name] = {**table, kernel: table[kernel] * plant.factor}
        gpu[name] = _added(gpu[name], added_s)
        alternates[name] = {m: _added(t, added_s) for m, t in alternates.get(name, {}).items()}
        if not wall[name].host_bound:
            wall[name] = _added(wall[name], added_s)
    return replace(
        run,
        timings=wall,
        gpu_timings=gpu,
        gpu_alternates=alternates,
        document=_with_kernels(run.document, tables) if tables else run.document,
    )


def kernels_to_plant(run: Results, where: str) -> dict[str, str]:
    """For a kernel plant: the kernel of each benchmark of `run` that it slows (target_kernel)."""
    found = {}
    for name, table in run.kernel_tables.items():
        kernel = target_kernel(table, where)
        if kernel is not None:
            found[name] = kernel
    return found
