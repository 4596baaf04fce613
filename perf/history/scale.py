"""A year of runs, simulated, to size the results database: nightly default-tier runs on several GPU
models and pull-request runs, made from a real stored result file (its benchmarks, extra_info and kernel
tables), each benchmark's figures moved by noise and by planted steps. Reports the database's size per
run, the recording time per run, a benchmark's trend query and a change-point scan of every series.

    python -m perf.history.scale --db sqlite:////tmp/year.sqlite --days 365
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import random
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from perf.history.store import connect
from perf.storage import BASELINES, read_result

TEMPLATE = BASELINES / "nvidia-h100-80gb-hbm3" / "0007_h100-default.json"
GPUS = ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA B200")
BENCHMARKS = 550  # a default-tier run of the suite, padded from the template's
PR_BENCHMARKS = 63  # a pr-tier run
NOISE = 0.01  # relative noise of every figure
STEP_EVERY = 60  # days between planted steps of a series, on average


def _scaled(entry: dict[str, Any], factor: float) -> dict[str, Any]:
    """A benchmark's entry with its times scaled by `factor` (wall statistics and GPU time)."""
    entry = copy.deepcopy(entry)
    stats = entry["stats"]
    for key in ("min", "max", "mean", "median", "q1", "q3", "iqr", "stddev", "ld15iqr", "hd15iqr", "total"):
        if isinstance(stats.get(key), int | float):
            stats[key] *= factor
    stats.pop("data", None)
    info = entry["extra_info"]
    for key in ("gpu_ms", "gpu_burst_ms", "gpu_rounds_ms", "median_ms"):
        if isinstance(info.get(key), int | float):
            info[key] *= factor
    return entry


def padded(benchmarks: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """`count` benchmarks: the template's, then copies under new node ids."""
    out = list(benchmarks[:count])
    copy_index = 0
    while len(out) < count:
        entry = copy.deepcopy(benchmarks[copy_index % len(benchmarks)])
        entry["fullname"] = entry["fullname"].replace("[", f"[copy{copy_index // len(benchmarks)}-", 1)
        out.append(entry)
        copy_index += 1
    return out


def documents(template: dict[str, Any], days: int, gpus: int, pr_per_day: int, seed: int) -> Iterator[dict]:
    """The runs of `days` days in time order: a nightly run per GPU model, `pr_per_day` pull-request runs
    on the first. Each series (benchmark, GPU model) has its own level and steps."""
    rng = random.Random(seed)
    base = padded(template["benchmarks"], BENCHMARKS)
    level = {(b["fullname"], g): 1.0 for b in base for g in GPUS[:gpus]}
    start = datetime(2026, 1, 1, 2, tzinfo=UTC)
    for day in range(days):
        commit = hashlib.sha1(f"commit {day}".encode()).hexdigest()
        for key in level:
            if rng.random() < 1 / STEP_EVERY:
                level[key] *= rng.choice((0.95, 0.97, 1.03, 1.05, 1.10))
        for g, gpu in enumerate(GPUS[:gpus]):
            when = start + timedelta(days=day, minutes=g)
            yield _run(template, base, gpu, when, commit, "main", "default", level, rng)
        for n in range(pr_per_day):
            when = start + timedelta(days=day, hours=12 + n)
            pr_commit = hashlib.sha1(f"pr {day} {n}".encode()).hexdigest()
            subset = base[:PR_BENCHMARKS]
            yield _run(template, subset, GPUS[0], when, pr_commit, f"pr-{day}-{n}", "pr", level, rng)


def _run(template, benchmarks, gpu, when, commit, branch, tier, level, rng) -> dict[str, Any]:
    machine = copy.deepcopy(template["machine_info"])
    machine["perf"]["gpu"]["name"] = gpu
    return {
        "machine_info": machine,
        "commit_info": {
            "id": commit,
            "time": when.isoformat(),
            "dirty": False,
            "branch": branch,
            "project": "main",
        },
        "datetime": when.isoformat(),
        "version": template.get("version", "5.2.3"),
        "perf": {"tier": tier},
        "benchmarks": [
            _scaled(b, level[(b["fullname"], gpu)] * rng.lognormvariate(0, NOISE)) for b in benchmarks
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m perf.history.scale", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--db", required=True, help="database URL to fill (a new, empty one)")
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--gpus", type=int, default=4, choices=range(1, len(GPUS) + 1))
    parser.add_argument("--pr-per-day", type=int, default=2)
    parser.add_argument("--template", type=Path, default=TEMPLATE)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args(argv)
    template = read_result(options.template)
    history = connect(options.db)
    record_s = []
    for document in documents(template, options.days, options.gpus, options.pr_per_day, options.seed):
        start = time.perf_counter()
        history.record(document, source="simulated")
        record_s.append(time.perf_counter() - start)
    runs = len(record_s)
    print(
        f"recorded {runs} runs: {statistics.median(record_s) * 1e3:.0f} ms median per run, "
        f"{sum(record_s):.0f} s in all"
    )
    if history.dialect == "sqlite":
        path = Path(history.url.removeprefix("sqlite:///"))
        size = path.stat().st_size
        print(f"database: {size / 2**20:.1f} MiB, {size / runs / 2**10:.0f} KiB per run")
    name = template["benchmarks"][0]["fullname"]
    timings = []
    for _ in range(20):
        start = time.perf_counter()
        points = history.series(name, GPUS[0], branch="main")
        timings.append(time.perf_counter() - start)
    print(
        f"trend query of {name} on {GPUS[0]}: {len(points)} points, "
        f"{statistics.median(timings) * 1e3:.1f} ms median of 20"
    )
    from perf.history.steps import scan

    start = time.perf_counter()
    found = sum(1 for _ in scan(history, branch="main"))
    print(f"change-point scan of every series: {found} steps in {time.perf_counter() - start:.1f} s")
    history.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
