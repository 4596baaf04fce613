"""What the results-database tests share: benchmark entries and whole run documents as the suite writes
them, an empty database of each backend (SQLite, or PostgreSQL through tests/history_pg.py),
row counts and snapshots of a database, and the one-line check of a refusal."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, inspect, select

from perf.history.schema import machines, results, runs
from perf.history.store import resolve_url

ROOT = Path(__file__).resolve().parents[1]
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
MATMUL = "perf/test_matmul.py::test_matmul[n8192-bf16]"
STEP = "perf/test_end_to_end.py::test_train_step[sdpa-small-bf16-ctx512-warm2]"
MEMORY = "perf/test_memory.py::test_peak_memory[bf16-small-ctx512-train_step-default]"
T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
# Two stored baselines: an early one (no tier, no clocks) and a recent one (4 MB, clocks, kernels).
BASELINES = [
    ROOT / "baselines/nvidia-h100-80gb-hbm3/0001_h100-default.json",
    ROOT / "baselines/nvidia-h200/0005_h200-default.json",
]


def entry(name: str, median_s: float, **extra: object) -> dict:
    """A benchmark as the suite writes it; `extra` goes into its extra_info."""
    rounds = [median_s * (1 + 0.001 * i) for i in range(-2, 3)]
    stats = {"min": min(rounds), "max": max(rounds), "median": median_s, "iqr": median_s * 0.002}
    stats |= {"stddev": median_s * 0.001, "rounds": 5, "iterations": 1, "outliers": "0;0", "data": rounds}
    return {"group": None, "name": name.split("::")[1], "fullname": name, "stats": stats, "extra_info": extra}


def document(started: datetime, *, scale: float = 1.0, gpu: str = H100, dirty: bool = False, branch="main"):
    """A run of three benchmarks: the matmul timed by rounds under the power cap, a host-bound step timed
    by burst, and a memory benchmark without GPU time whose clock was sampled over the whole of it."""
    kernels = [{"kernel": "nvjet_hsh_256x128_2x1", "launches": 1.0, "us": 1990.5 * scale}]
    matmul = entry(
        MATMUL,
        0.0021 * scale,
        gpu_ms=2.0 * scale,
        gpu_method="rounds",
        gpu_kernels=kernels,
        host_ms=0.05,
        median_ms=2.1 * scale,
        clocks={
            "sm_mhz_mean": 1700.0,
            "throttle": {"power_cap": 0.25, "thermal": 0.0},
            "rounds": {"sm_mhz_mean": 1755.0},
            "profiled": {"sm_mhz_mean": 1650.0},
        },
    )
    step = entry(
        STEP,
        0.031 * scale,
        gpu_ms=20.0 * scale,
        gpu_method="burst",
        host_ms=30.0,
        median_ms=31.0 * scale,
        clocks={"sm_mhz_mean": 1900.0, "throttle": {"power_cap": 0.0}, "profiled": {"sm_mhz_mean": 1880.0}},
    )
    memory = entry(MEMORY, 0.5 * scale, gpu_ms_absent="not measured", clocks={"sm_mhz_mean": 1500.0})
    gpu_info = {
        "name": gpu,
        "count": 1,
        "driver": "580.159.04",
        "power_limit_w": 700.0,
        "clocks_locked": False,
    }
    return {
        "machine_info": {
            "node": "runner-1",
            "perf": {"device": "cuda", "torch": "2.11.0", "triton": "3.6.0", "cuda": "13.0", "gpu": gpu_info},
        },
        "commit_info": {
            "id": hashlib.sha1(started.isoformat().encode()).hexdigest(),
            "time": (started - timedelta(hours=1)).isoformat(),
            "dirty": dirty,
            "project": "main",
            "branch": branch,
        },
        "datetime": started.isoformat(),
        "version": "5.2.3",
        "perf": {"tier": "pr", "selected": [MATMUL, STEP, MEMORY]},
        "benchmarks": [matmul, step, memory],
    }


def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each module's `history_url` fixture, parametrized sqlite and postgresql: an empty database of that
    backend, an SQLite file or a new database on the test server (the module imports history_pg's
    fixtures)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.sqlite'}"
    return request.getfixturevalue("fresh_postgres_url")


def counts(url: str) -> dict[str, int]:
    """Rows per table, read with SQLAlchemy alone."""
    engine = create_engine(resolve_url(url))
    try:
        with engine.connect() as conn:
            return {
                t.name: conn.execute(select(func.count()).select_from(t)).scalar()
                for t in (machines, runs, results)
            }
    finally:
        engine.dispose()


def snapshot(url: str) -> object:
    """What a refused database holds: its file's bytes for SQLite, its tables and their rows otherwise."""
    resolved = resolve_url(url)
    if resolved.startswith("sqlite:///"):
        return hashlib.sha256(Path(resolved.removeprefix("sqlite:///")).read_bytes()).hexdigest()
    engine = create_engine(resolved)
    try:
        with engine.connect() as conn:
            names = sorted(inspect(conn).get_table_names())
            return {
                name: sorted(map(tuple, conn.exec_driver_sql(f'SELECT * FROM "{name}"'))) for name in names
            }
    finally:
        engine.dispose()


def one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message and message
    return message
