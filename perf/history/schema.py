"""The results database's tables, in SQLAlchemy Core: one schema for SQLite and PostgreSQL alike.

machines <- runs <- results, and perf_meta with the schema version that connect() checks before it
reads or writes anything. Each result row carries its run's GPU model, so that a benchmark's trend on
one GPU (History.series) is one range of one index however many results are stored.
"""

from __future__ import annotations

import json
import zlib
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.types import TypeDecorator

# The schema this code writes; a database of a higher version is refused (store.connect).
SCHEMA_VERSION = 1
VERSION_KEY = "schema_version"  # perf_meta's row holding it


class UtcDateTime(TypeDecorator):
    """A tz-aware UTC datetime on both backends: timestamptz on PostgreSQL, naive UTC text on SQLite
    (which keeps no zone); a naive value is taken as UTC, every value read back is aware UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        # SQLite's text form drops the zone; stored as UTC its order is the time order.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class CompressedJSON(TypeDecorator):
    """A JSON value stored zlib-compressed: a result's extra_info with its kernel table is about 2.4 kB of
    repetitive JSON, a fifth of that compressed, and is read only a benchmark at a time (History.result)."""

    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> bytes | None:
        if value is None:
            return None
        return zlib.compress(json.dumps(value, separators=(",", ":"), allow_nan=False).encode(), 6)

    def process_result_value(self, value: bytes | None, dialect: Dialect) -> Any:
        return None if value is None else json.loads(zlib.decompress(value))


# Constraint and index names fixed here, the same on both backends.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s",
        "pk": "pk_%(table_name)s",
    }
)

perf_meta = Table(
    "perf_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", String(256), nullable=False),
)

# One row per machine set-up; `fingerprint` (records.machine_row) names it, so runs share the row.
machines = Table(
    "machines",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("fingerprint", String(64), nullable=False, unique=True),
    Column("gpu", String(200), nullable=False),  # the GPU model, or 'the CPU (<model>)'
    Column("slug", String(200), nullable=False),  # its folder under baselines/
    Column("gpu_count", Integer),
    Column("runner", String(200)),  # machine_info.node
    Column("driver", String(100)),
    Column("cuda", String(100)),
    Column("torch", String(100)),
    Column("triton", String(100)),
    Column("power_limit_w", Float),
    Column("clocks_locked", Boolean),
)

runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("machine_id", Integer, ForeignKey("machines.id"), nullable=False),
    # sha256 of the run's canonical content (records.digest): the same run is stored once.
    Column("digest", String(64), nullable=False, unique=True),
    Column("commit", String(64)),
    Column("commit_time", UtcDateTime),
    Column("dirty", Boolean, nullable=False),
    Column("branch", String(200)),
    Column("project", String(200)),
    Column("started_at", UtcDateTime, nullable=False),  # the result file's `datetime`
    Column("recorded_at", UtcDateTime, nullable=False),
    Column("tier", String(50)),
    Column("gpu_method", String(50)),
    Column("source", Text, nullable=False),  # the file it was imported from, or "run"
    Column("benchmarks", Integer, nullable=False),
    Index(None, "machine_id", "started_at"),
    Index(None, "started_at"),
)

results = Table(
    "results",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),  # SQLite's rowid
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("gpu", String(200), nullable=False),  # machines.gpu of its run, for the trend query's index
    Column("benchmark", Text, nullable=False),  # the pytest node id (fullname)
    Column("group", Text),
    Column("wall_s", Float, nullable=False),  # stats.median
    Column("wall_iqr_s", Float),
    Column("wall_stddev_s", Float),
    Column("wall_min_s", Float),
    Column("rounds", Integer),
    Column("iterations", Integer),
    Column("gpu_s", Float),  # extra_info.gpu_ms / 1e3
    Column("gpu_method", String(50)),
    Column("sm_mhz", Float),  # the SM clock its GPU figure was measured at
    Column("power_capped", Float),  # share of clock samples held by the power cap
    Column("host_bound", Boolean, nullable=False),
    # pytest-benchmark's stats without the raw rounds (`data`)
    Column("stats", CompressedJSON, nullable=False),
    Column("extra_info", CompressedJSON, nullable=False),  # whole, kernel table included
    UniqueConstraint("run_id", "benchmark"),
    Index(None, "gpu", "benchmark", "run_id"),  # series(benchmark, gpu), benchmarks(gpu)
    Index(None, "benchmark", "run_id"),  # a benchmark on every GPU
)

TABLES = (perf_meta, machines, runs, results)
