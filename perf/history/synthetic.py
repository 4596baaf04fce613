"""Synthetic benchmark histories with known steps, and an evaluation of perf/history/changepoints.py on them.

A history is a series of timings in time order, one commit a day on the days that have runs (gaps: the
days without), sometimes several runs of one commit; multiplicative noise (log-normal), a few single-run
outliers 10-30 % off (mostly slower, as a run disturbed by something else on the machine), and steps:
from a point on, every value times a ratio.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np

from perf.history.changepoints import find_steps

NOISES = (0.005, 0.01, 0.02, 0.03)
SIZES = (0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.10)


def series(
    n: int,
    noise: float,
    steps: Sequence[tuple[int, float]] = (),
    outliers: float = 0.02,
    gaps: float = 0.2,
    seed: int = 0,
    *,
    multi: float = 0.1,
    level: float = 1e-3,
) -> tuple[list[float], list[str], list[int]]:
    """`n` points: (values in seconds, their commits, the index of each step's first point).

    noise: the relative standard deviation of a run; steps: (index, ratio) pairs, the ratio applying from
    the first run of the commit that holds point `index` on; outliers: the share of the runs that are
    10-30 % off (three in four slower); gaps: the share of the days without a run; multi: the share of the
    commits with 2 or 3 runs.
    """
    rng = np.random.default_rng(seed)
    commits: list[str] = []
    day = 0
    while len(commits) < n:
        day += 1
        if rng.random() < gaps:
            continue
        runs = int(rng.integers(2, 4)) if rng.random() < multi else 1
        commits += [f"c{day:05d}"] * runs
    commits = commits[:n]
    factor = np.ones(n)
    true: set[int] = set()
    for index, ratio in steps:
        first = index
        while first > 0 and commits[first - 1] == commits[index]:
            first -= 1
        factor[first:] *= ratio
        true.add(first)
    values = level * factor * np.exp(noise * rng.standard_normal(n))
    count = int(rng.binomial(n, outliers)) if outliers > 0 else 0
    where = rng.choice(n, size=count, replace=False)
    signs = np.where(rng.random(count) < 0.75, 1.0, -1.0)
    values[where] *= 1 + signs * rng.uniform(0.1, 0.3, count)
    return values.tolist(), commits, sorted(true)


def _positions(
    rng: np.random.Generator, n: int, count: int, margin: int = 30, spacing: int = 30
) -> list[int]:
    """`count` step positions at least `spacing` apart and `margin` from either end."""
    while True:
        chosen = np.sort(rng.choice(np.arange(margin, n - margin), size=count, replace=False))
        if count < 2 or np.diff(chosen).min() >= spacing:
            return chosen.tolist()


def _match(found: list[int], true: list[int], commits: list[str]) -> tuple[int, int, int]:
    """(exact, within one commit, false) for the steps found at point indices `found`."""
    starts = [i for i in range(len(commits)) if i == 0 or commits[i] != commits[i - 1]]
    rank = {start: k for k, start in enumerate(starts)}
    left = set(true)
    exact = near = 0
    for index in found:
        if index in left:
            left.discard(index)
            exact += 1
            near += 1
            continue
        close = [t for t in left if abs(rank[t] - rank[index]) <= 1]
        if close:
            left.discard(close[0])
            near += 1
    return exact, near, len(found) - near


def evaluate(
    trials: int = 50,
    seed: int = 0,
    *,
    n: int = 365,
    noises: Sequence[float] = NOISES,
    sizes: Sequence[float] = SIZES,
    steps_per_series: int = 3,
    clean: int = 200,
    outliers: float = 0.02,
    gaps: float = 0.2,
    **options: float,
) -> dict:
    """find_steps (with `options`) on synthetic series of `n` points, noise by step size.

    Per (noise, size): `trials` series of `steps_per_series` steps of that size, up or down (ratio 1 + size
    or 1 / (1 + size)); the steps found at their exact commit, within one commit, missed, and the false ones
    (not within one commit of a true step). Per noise: `clean` series without steps and their false steps
    per 1,000 points. `recall_2x` / `recall_3x`: steps of exactly 2x / at least 3x the noise that are also at
    least min_change; `ms_per_series`: find_steps' mean time.
    """
    rng = np.random.default_rng(seed)
    cells, clean_rows = [], []
    calls, spent = 0, 0.0

    def run(values: list[float], commits: list[str]) -> list[int]:
        nonlocal calls, spent
        start = time.perf_counter()
        found = find_steps(values, commits, **options)
        spent += time.perf_counter() - start
        calls += 1
        return [s.index for s in found]

    for noise in noises:
        for size in sizes:
            total = exact = near = false = 0
            for _ in range(trials):
                where = _positions(rng, n, steps_per_series)
                ratios = [(1 + size) if rng.random() < 0.5 else 1 / (1 + size) for _ in where]
                values, commits, true = series(
                    n, noise, list(zip(where, ratios, strict=True)), outliers, gaps, int(rng.integers(2**31))
                )
                e, m, f = _match(run(values, commits), true, commits)
                total, exact, near, false = total + len(true), exact + e, near + m, false + f
            cells.append(
                {"noise": noise, "size": size, "steps": total, "exact": exact, "near": near,
                 "missed": total - near, "false": false}
            )  # fmt: skip
        found = points = 0
        for _ in range(clean):
            values, commits, _ = series(n, noise, [], outliers, gaps, int(rng.integers(2**31)))
            found += len(run(values, commits))
            points += n
        clean_rows.append(
            {"noise": noise, "points": points, "false": found, "per_1000": 1000 * found / points}
        )

    min_change = options.get("min_change", 0.02)

    def recall(pick) -> dict:
        chosen = [c for c in cells if pick(c) and c["size"] >= min_change - 1e-12]
        steps = sum(c["steps"] for c in chosen)
        return {
            "steps": steps,
            "exact": sum(c["exact"] for c in chosen) / max(steps, 1),
            "near": sum(c["near"] for c in chosen) / max(steps, 1),
        }

    points = sum(r["points"] for r in clean_rows)
    false = sum(r["false"] for r in clean_rows)
    return {
        "cells": cells,
        "clean": clean_rows,
        "false_per_1000_clean": 1000 * false / max(points, 1),
        "recall_2x": recall(lambda c: abs(c["size"] - 2 * c["noise"]) < 1e-9),
        "recall_3x": recall(lambda c: c["size"] >= 3 * c["noise"] - 1e-9),
        "ms_per_series": 1000 * spent / max(calls, 1),
    }


def table(result: dict) -> str:
    """evaluate()'s result as text: exact / within-one recall by noise (rows) and size (columns)."""
    sizes = sorted({c["size"] for c in result["cells"]})
    lines = ["noise \\ size " + " ".join(f"{s:>11.0%}" for s in sizes) + "   false/1000 clean"]
    for row in result["clean"]:
        cells = {c["size"]: c for c in result["cells"] if c["noise"] == row["noise"]}
        text = " ".join(
            f"{cells[s]['exact'] / cells[s]['steps']:>5.0%}/{cells[s]['near'] / cells[s]['steps']:<5.0%}"
            for s in sizes
        )
        lines.append(f"{row['noise']:>12.1%} {text}   {row['per_1000']:.2f}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- a history of result files
# The GPU models and benchmarks of trend_documents: attention cells of three providers at two shapes, model
# steps of two implementations, a matmul; the planted step is in STEPPED on the first GPU model.
TREND_GPUS = ("NVIDIA H100 80GB HBM3", "NVIDIA H200")
PROVIDERS = ("flash_triton", "sdpa_flash", "sdpa_cudnn")
ATTENTION = (
    "perf/test_attention.py::test_attention[bf16-forward_backward-b4-h16-s4096-{dim}-causal-{provider}]"
)
STEPPED = ATTENTION.format(dim="d128", provider="flash_triton")
ONCE = "perf/test_transfer.py::test_host_to_device[1MiB-pinned]"  # recorded by the newest run only


def _trend_benchmarks() -> list[tuple[str, dict, float]]:
    """(node id, the extra_info entries naming it, GPU ms) of each benchmark of trend_documents."""
    found = [
        (ATTENTION.format(dim=dim, provider=p), {"provider": p, "mode": "forward_backward"}, ms * scale)
        for dim, ms in (("d128", 2.0), ("d64", 1.2))
        for p, scale in zip(PROVIDERS, (1.0, 1.15, 1.3), strict=True)
    ]
    found += [
        (f"perf/test_end_to_end.py::test_train_step[{impl}-small-bf16-ctx512-warm2]", {"impl": impl}, ms)
        for impl, ms in (("sdpa", 41.0), ("flash_triton", 38.0))
    ]
    return [*found, ("perf/test_matmul.py::test_matmul[8192-bf16]", {"suite": "matmul"}, 0.45)]


def trend_documents(
    runs: int = 40, *, step_at: int = 30, ratio: float = 1.08, noise: float = 0.004, end=None, gpu_time=True
) -> list[dict]:
    """Result files of `runs` nightly runs of main on each of TREND_GPUS, the newest at `end` (a datetime;
    now by default), for the trends page's tests and screenshot. STEPPED's GPU time on the first model
    is `ratio` times slower from run `step_at` on, where its kernel attn_fwd becomes attn_fwd_v2. Without
    `gpu_time` the runs have wall time only, as a CPU run's."""
    from datetime import UTC, datetime, timedelta

    end = end or datetime.now(UTC).replace(microsecond=0)
    rng = np.random.default_rng(0)
    documents = []
    for g, gpu in enumerate(TREND_GPUS):
        for run in range(runs):
            when = end - timedelta(days=runs - 1 - run, minutes=5 * g)
            commit = f"{run:04x}" + "c0ffee" * 6
            entries = []
            for name, labels, ms in _trend_benchmarks():
                stepped = g == 0 and name == STEPPED and run >= step_at
                gpu_ms = (
                    ms
                    * (0.8 if g else 1.0)
                    * (ratio if stepped else 1.0)
                    * math.exp(noise * rng.standard_normal())
                )
                kernel = "attn_fwd_v2" if stepped else "attn_fwd" if "attention" in name else "gemm"
                info = {**labels, "gpu_ms": gpu_ms, "gpu_method": "rounds"} if gpu_time else dict(labels)
                if gpu_time:
                    info["clocks"] = {
                        "rounds": {"sm_mhz_mean": 1980.0 - 60 * g},
                        "throttle": {"power_cap": 0.0},
                    }
                    info["gpu_kernels"] = [
                        {"kernel": kernel, "launches": 1, "us": gpu_ms * 800},
                        {"kernel": "elementwise_add", "launches": 2, "us": gpu_ms * 200},
                    ]
                entries.append({"fullname": name, "name": name.partition("::")[2], "group": None,
                                "stats": _stats(gpu_ms * 1.1e-3), "extra_info": info})  # fmt: skip
            if run == runs - 1:
                once = {"fullname": ONCE, "name": ONCE.partition("::")[2], "group": None}
                entries.append(once | {"stats": _stats(0.2e-3), "extra_info": {"host_memory": "pinned"}})
            documents.append(
                {
                    "machine_info": {"perf": {"device": "cuda", "gpu": {"name": gpu, "count": 1}}},
                    "commit_info": {"id": commit, "time": when.isoformat(), "dirty": False, "branch": "main"},
                    "datetime": when.isoformat(),
                    "perf": {"tier": "default"},
                    "benchmarks": entries,
                }
            )
    return documents


def _stats(median: float) -> dict:
    """pytest-benchmark's statistics of a benchmark whose rounds spread 1% around `median` seconds."""
    return {"min": median * 0.99, "max": median * 1.01, "mean": median, "stddev": median * 0.005,
            "median": median, "iqr": median * 0.01, "q1": median * 0.995, "q3": median * 1.005,
            "rounds": 20, "iterations": 1}  # fmt: skip
