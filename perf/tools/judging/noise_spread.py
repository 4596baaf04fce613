"""A runner's noise, from runs of one selection on one GPU: each benchmark's run-to-run spread per figure
(GPU time, wall time), the factor k per figure, and whether the runs showed it host-bound; the content of
the noise file that `python -m perf.tools.noise` writes and perf/tools/judging/noise_thresholds.py reads.

A benchmark's spread is the largest ratio between two of its runs' medians, less one, per figure; its
standard deviation (`gpu_sd`, `wall_sd`: of the log medians, from 3 runs on) and, for each kernel of at least
KERNEL_SHARE of its GPU time, that of the kernel's share and of its time per call (`kernels`) are the noise
profile from which the A/B bounds the standard errors of its few runs (perf/tools/judging/paired_rule.py). Its
threshold of a figure is then max(floor, k x spread): k is the smallest factor with which every run, left
out in turn, lies within the threshold that the other runs' spread gives (at least 1, so that the noise runs
never fail against each other; at most K_MAX), one k per figure. A benchmark is recorded as host-bound where
a run measured its host time at HOST_BOUND_SHARE of its median or more, or where its wall time moved by more
than HOST_SPREAD_FACTOR times its GPU time did (and more than the wall floor): its wall time follows the
host.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from perf.tools.judging.kernel_shares import KERNEL_SHARE
from perf.tools.judging.noise_thresholds import FORMAT
from perf.tools.judging.regression_rule import GPU_FLOOR, WALL_FLOOR
from perf.tools.reading.errors import GateError
from perf.tools.reading.results import ISOLATED, Results, aligned, check_same_machine
from perf.tools.reading.timings import GPU, WALL

K_MIN, K_MAX = 1.0, 4.0
# Wall time that moved across the runs by more than this many times its GPU time did follows the host.
HOST_SPREAD_FACTOR = 3.0


def spread(medians: Sequence[float]) -> float:
    """The largest ratio between two of the medians, less one: how far two runs fell apart."""
    return max(medians) / min(medians) - 1


# Runs from which a standard deviation is recorded: two runs' sd is one difference.
SD_RUNS = 3


def log_sd(values: Sequence[float]) -> float:
    """The sample standard deviation of the logs of `values`: a relative spread of runs."""
    logs = [math.log(v) for v in values]
    mean = statistics.fmean(logs)
    return math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))


def kernel_profile(runs: Sequence[Results], name: str) -> dict[str, dict[str, float]]:
    """Per kernel of at least KERNEL_SHARE of the benchmark's GPU time in every run, the sd of its share
    and of its time per call over the runs; empty where a run has no kernel table."""
    tables = [run.kernel_tables.get(name) for run in runs]
    if len(tables) < SD_RUNS or not all(tables):
        return {}
    found = {}
    for kernel in tables[0]:
        if not all(kernel in t and t[kernel] > 0 for t in tables):
            continue
        shares = [t[kernel] / sum(t.values()) for t in tables]
        if min(shares) < KERNEL_SHARE:
            continue
        found[kernel] = {
            "share_sd": round(log_sd(shares), 6),
            "us_sd": round(log_sd([t[kernel] for t in tables]), 6),
        }
    return found


def figures_by_benchmark(runs: Sequence[Results]) -> dict[str, dict[str, list[float]]]:
    """Per benchmark in every run, its medians in seconds per figure that every run has."""
    common = [name for name in runs[0].timings if all(name in run.timings for run in runs[1:])]
    found: dict[str, dict[str, list[float]]] = {}
    for name in common:
        figures = [run.figures(name) for run in runs]
        found[name] = {
            figure: [f[figure].median_s for f in figures]
            for figure in (GPU, WALL)
            if all(figure in f for f in figures)
        }
    return found


def choose_k(gpu_medians: Mapping[str, Sequence[float]], floor: float = GPU_FLOOR) -> tuple[float, dict]:
    """The smallest k in [K_MIN, K_MAX] with which each run, left out in turn, is within max(floor, k x
    the others' spread) of every other run; with its basis (how many cases, the one that set it)."""
    needed, worst = K_MIN, None
    cases = 0
    for name, medians in gpu_medians.items():
        if len(medians) < 3:
            continue
        for i, left_out in enumerate(medians):
            others = [m for j, m in enumerate(medians) if j != i]
            apart = max(max(left_out / m, m / left_out) for m in others) - 1
            cases += 1
            if apart <= floor:
                continue  # the floor covers it whatever k is
            base = spread(others)
            k = apart / base if base > 0 else float("inf")
            if k > needed:
                needed, worst = k, name
    chosen = min(K_MAX, needed)
    basis = {
        "left_out_cases": cases,
        "needed": None if needed == float("inf") else round(needed, 3),
        "set_by": worst,
        "capped": needed > K_MAX,
    }
    return round(chosen, 3), basis


def host_bound_in(runs: Sequence[Results], name: str, medians: Mapping[str, Sequence[float]]) -> bool:
    """Whether the runs showed the benchmark host-bound: a host time at HOST_BOUND_SHARE of its median in
    any run, or a wall time that moved beyond the wall floor and HOST_SPREAD_FACTOR times its GPU time."""
    if any(run.timings[name].host_bound for run in runs):
        return True
    if GPU not in medians:
        return False
    wall = spread(medians[WALL])
    return wall > WALL_FLOOR and wall > HOST_SPREAD_FACTOR * spread(medians[GPU])


def noise_document(runs: Sequence[Results], command: str) -> dict[str, Any]:
    """The noise file's content from `runs` of one selection on one GPU (at least 2)."""
    if len(runs) < 2:
        raise GateError(f"noise needs at least 2 runs of the selection; got {len(runs)}")
    for run in runs[1:]:
        check_same_machine(runs[0], run, f"run {run.path}")
    runs = aligned(runs)  # GPU figures of one method (perf/tools/reading/results.py)
    figures = figures_by_benchmark(runs)
    if not figures:
        raise GateError("the runs have no benchmark in common; run the same selection each time")
    gpu = {name: f[GPU] for name, f in figures.items() if GPU in f}
    if not gpu:
        raise GateError(
            "no benchmark has GPU time in every run (CPU runs, or runs under nsys): a noise file "
            "sets GPU-time thresholds and would set none; nothing written"
        )
    methods = {name: {run.gpu_methods.get(name, ISOLATED) for run in runs} for name in gpu}
    mixed = sorted(name for name, found in methods.items() if len(found) > 1)
    if mixed:
        raise GateError(
            f"{mixed[0]}: its GPU time was measured by different methods in the runs "
            f"({', '.join(sorted(methods[mixed[0]]))}); run the same code and --gpu-time each time"
        )
    k, basis = choose_k(gpu)
    k_wall, wall_basis = choose_k({name: f[WALL] for name, f in figures.items()}, WALL_FLOOR)
    benchmarks = {}
    for name, found in figures.items():
        entry: dict[str, Any] = {}
        for figure, medians in found.items():
            entry[f"{figure}_ms"] = [round(m * 1e3, 6) for m in medians]
            entry[f"{figure}_spread"] = round(spread(medians), 6)
            if len(medians) >= SD_RUNS:
                entry[f"{figure}_sd"] = round(log_sd(medians), 6)
        kernels = kernel_profile(runs, name)
        if kernels:
            entry["kernels"] = kernels
        if name in methods:
            entry["gpu_method"] = next(iter(methods[name]))
        entry["host_bound"] = host_bound_in(runs, name, found)
        benchmarks[name] = entry
    first = runs[0].document
    return {
        "format": FORMAT,
        "gpu": runs[0].machine,
        "machine_info": first.get("machine_info", {}),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "runs": [
            {
                "file": str(run.path),
                "datetime": run.document.get("datetime"),
                "commit": run.document.get("commit_info"),
            }
            for run in runs
        ],
        "floor": GPU_FLOOR,
        "k": k,
        "k_basis": basis,
        "wall_floor": WALL_FLOOR,
        "k_wall": k_wall,
        "k_wall_basis": wall_basis,
        "benchmarks": benchmarks,
    }
