"""Synthetic benchmark histories with known steps, and an evaluation of perf/history/changepoints.py on them.

A history is a series of timings in time order, one commit a day on the days that have runs (gaps: the
days without), sometimes several runs of one commit; multiplicative noise (log-normal), a few single-run
outliers 10-30 % off (mostly slower, as a run disturbed by something else on the machine), and steps:
from a point on, every value times a ratio.
"""

from __future__ import annotations

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
