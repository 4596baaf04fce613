"""The results database: every run's results, recorded once, read back as runs and per-GPU series.

One code path for SQLite (the default, a file under .benchmarks/, nothing to start) and PostgreSQL
(a URL), through SQLAlchemy Core and psycopg 3. connect() checks the schema version before anything
is read or written and refuses a database that is newer, damaged or not this suite's; every failure is
a HistoryError of one line, the URL shown without its password. Concurrent writers are safe: a run's
digest is UNIQUE, and SQLite writers queue on its lock (WAL, busy timeout) instead of failing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    and_,
    create_engine,
    event,
    func,
    insert,
    inspect,
    not_,
    or_,
    select,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError, SQLAlchemyError

from perf.history import records
from perf.history.db_errors import hide, reason
from perf.history.db_errors import shown as shown_url
from perf.history.schema import (
    SCHEMA_VERSION,
    TABLES,
    VERSION_KEY,
    machines,
    metadata,
    perf_meta,
    results,
    runs,
)
from perf.storage import ROOT
from perf.tools.reading.errors import GateError
from perf.tools.reading.results import read_document

DEFAULT_URL = f"sqlite:///{ROOT / '.benchmarks' / 'history.sqlite'}"
URL_VARIABLE = "PERF_HISTORY"  # the environment variable naming the database URL
BUSY_TIMEOUT_S = 30  # an SQLite writer waits this long for another's lock before failing
CONNECT_TIMEOUT_S = 10  # PostgreSQL: an unreachable server fails after this, unless the URL says otherwise
# Any 64-bit key: the lock PostgreSQL holds while one process creates the schema of an empty database.
SCHEMA_LOCK = 0x70657266_68697374
# Execution option: an SQLite transaction that writes takes the lock first.
IMMEDIATE = "perf_history_immediate"


class HistoryError(Exception):
    """A database or document that cannot be used: one line naming what is wrong and what to do."""


class EmptyHistory(HistoryError):
    """A database without tables, opened to be read: nothing was ever recorded into it."""


@dataclass(frozen=True)
class Recorded:
    run_id: int
    new: bool  # False: the same run (same digest) was recorded before, nothing was stored
    benchmarks: int


@dataclass(frozen=True)
class RunInfo:
    run_id: int
    digest: str
    commit: str | None
    commit_time: datetime | None
    dirty: bool
    branch: str | None
    started_at: datetime  # aware, UTC
    tier: str | None
    gpu: str  # the GPU model, or 'the CPU (<model>)'
    slug: str  # its folder under baselines/
    runner: str | None  # machine_info.node
    driver: str | None
    cuda: str | None
    torch: str | None
    triton: str | None
    power_limit_w: float | None
    clocks_locked: bool | None
    gpu_method: str | None  # records.run_method
    source: str  # the file it was imported from, or "run"
    benchmarks: int


@dataclass(frozen=True)
class Point:
    """One run's figures of one benchmark."""

    run_id: int
    commit: str | None
    commit_time: datetime | None
    started_at: datetime
    dirty: bool
    branch: str | None
    wall_s: float  # stats.median
    wall_iqr_s: float | None
    gpu_s: float | None
    gpu_method: str | None
    sm_mhz: float | None  # the SM clock its GPU figure was measured at
    power_capped: float | None  # share of clock samples held by the power cap
    clocks_locked: bool | None
    host_bound: bool


# A stored figure that is a measurement: a database written before records.check refused such files may hold a
# time of 0 or less; those points are left out of every series (History.unmeasured counts them).
MEASURED = and_(results.c.wall_s > 0, or_(results.c.gpu_s.is_(None), results.c.gpu_s > 0))


def _points_query(*more: Any) -> Any:
    """The columns of a Point (and `more`), results joined to their runs and machines: measured ones only."""
    return (
        select(
            *more,
            runs.c.id.label("run_id"),
            *(runs.c[name] for name in ("commit", "commit_time", "started_at", "dirty", "branch")),
            *(results.c[name] for name in ("wall_s", "wall_iqr_s", "gpu_s", "gpu_method", "sm_mhz")),
            results.c.power_capped,
            machines.c.clocks_locked,
            results.c.host_bound,
        )
        .select_from(results.join(runs, results.c.run_id == runs.c.id).join(machines))
        .where(MEASURED)
    )


def resolve_url(url: str | None) -> str:
    """The database URL: `url`, else $PERF_HISTORY, else DEFAULT_URL. A bare path is an SQLite file,
    postgresql:// (or postgres://) goes through psycopg 3."""
    raw = (url if url is not None else os.environ.get(URL_VARIABLE) or DEFAULT_URL).strip()
    if "://" not in raw:
        if not raw:
            raise HistoryError(
                f"an empty database URL; give a path, sqlite:///PATH or postgresql://... ({URL_VARIABLE})"
            )
        try:
            return f"sqlite:///{Path(raw).expanduser().resolve()}"
        except (OSError, RuntimeError):  # pathlib says RuntimeError of a link loop before 3.13
            raise HistoryError(f"{raw}: a link loop; give a database file") from None
    try:
        parsed = make_url(raw)
    except (ArgumentError, ValueError):
        raise HistoryError(
            f"{hide(raw)}: not a database URL; give sqlite:///PATH or postgresql://..."
        ) from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend in ("postgresql", "postgres") and driver in ("", "psycopg"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif backend != "sqlite" or driver not in ("", "pysqlite"):
        raise HistoryError(
            f"{shown_url(parsed)}: unsupported database; give sqlite:///PATH or postgresql://USER@HOST/DB"
        )
    return parsed.render_as_string(hide_password=False)


def connect(url: str | None = None, *, create: bool = True) -> History:
    """The results database at `url` (resolve_url), its schema created where it is empty and `create`.
    Refused (HistoryError), with nothing written to it: a newer schema version, a database that is
    damaged or not this suite's, an unreachable server."""
    parsed = make_url(resolve_url(url))
    shown = shown_url(parsed)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database)
        if os.path.islink(path) and not os.path.exists(path):
            raise HistoryError(f"{shown}: a link loop or a broken link; give a database file")
        if path.is_dir():
            raise HistoryError(f"{shown}: a folder, not a database file; give a file path")
        if not path.exists() and not create:
            raise HistoryError(
                f"{shown}: no such database; record runs first (python -m perf.history import)"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise HistoryError(f"{shown}: cannot create its folder ({err.strerror or err})") from None
    engine = _engine(parsed, shown)
    try:
        _prepare(engine, shown, create)
    except BaseException:
        engine.dispose()
        raise
    return History(engine, shown)


class History:
    """An open results database (connect()); a context manager that closes it."""

    def __init__(self, engine: Engine, url: str):
        self._engine = engine
        self.url = url  # as shown: the password hidden
        self.dialect = engine.dialect.name  # "sqlite" or "postgresql"

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._engine.dispose()

    def record(self, document: Mapping[str, Any], source: str = "run") -> Recorded:
        """Store a run in one transaction; one recorded before (same digest) stores nothing, new=False."""
        try:
            records.check(document)
        except records.NotAResult as err:
            raise HistoryError(f"{source}: {err}") from None
        key = records.digest(document)
        with self._errors():
            found = self._stored(key)
            if found is not None:
                return found
            machine = records.machine_row(document)
            run = records.run_row(document, source, datetime.now(UTC), key)
            rows = records.result_rows(document, machine["gpu"])
            try:
                with self._writing() as conn:
                    machine_id = self._machine_id(conn, machine)
                    run_id = conn.execute(
                        insert(runs).values(machine_id=machine_id, **run)
                    ).inserted_primary_key[0]
                    self._insert_results(conn, run_id, rows)
            except IntegrityError:
                found = self._stored(key)  # another process recorded it meanwhile
                if found is None:
                    raise
                return found
        return Recorded(run_id, True, len(rows))

    def import_file(self, path: Path) -> Recorded:
        """Record a result file; refused (HistoryError naming it): unreadable, partial, not this suite's."""
        path = Path(path)
        try:
            document = read_document(path, str(path))  # compact baselines expanded as the tools read them
        except GateError as err:
            raise HistoryError(str(err)) from None
        try:
            records.check(document)
        except records.NotAResult as err:
            raise HistoryError(f"{path}: {err}") from None
        resolved = path.resolve()
        source = str(resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved)
        return self.record(document, source=source)

    def runs(
        self,
        *,
        gpu: str | None = None,
        branch: str | None = None,
        include_dirty: bool = False,
        since: datetime | None = None,
        tier: str | None = None,
        limit: int | None = None,
    ) -> list[RunInfo]:
        """Recorded runs, newest first."""
        machine_columns = [machines.c[name] for name in ("gpu", "slug", "runner", "driver", "cuda", "torch")]
        machine_columns += [machines.c.triton, machines.c.power_limit_w, machines.c.clocks_locked]
        query = select(runs, *machine_columns).join(machines, runs.c.machine_id == machines.c.id)
        query = _filtered(query, gpu=gpu, branch=branch, include_dirty=include_dirty)
        if since is not None:
            query = query.where(runs.c.started_at >= since)
        if tier is not None:
            query = query.where(runs.c.tier == tier)
        query = query.order_by(runs.c.started_at.desc(), runs.c.id.desc()).limit(limit)
        with self._errors(), self._engine.connect() as conn:
            found = conn.execute(query).mappings().all()
        names = [name for name in RunInfo.__dataclass_fields__ if name != "run_id"]
        return [RunInfo(run_id=row["id"], **{name: row[name] for name in names}) for row in found]

    def gpus(self) -> list[str]:
        """The GPU models with recorded runs."""
        query = select(machines.c.gpu).where(
            select(runs.c.id).where(runs.c.machine_id == machines.c.id).exists()
        )
        with self._errors(), self._engine.connect() as conn:
            return list(conn.execute(query.distinct().order_by(machines.c.gpu)).scalars())

    def benchmarks(self, gpu: str | None = None) -> list[str]:
        """The benchmarks recorded (on one GPU model), by name."""
        query = select(results.c.benchmark).distinct().order_by(results.c.benchmark)
        if gpu is not None:
            query = query.where(results.c.gpu == gpu)
        with self._errors(), self._engine.connect() as conn:
            return list(conn.execute(query).scalars())

    def series(
        self, benchmark: str, gpu: str, *, branch: str | None = None, include_dirty: bool = False
    ) -> list[Point]:
        """One benchmark's figures on one GPU model, a point per run, oldest first."""
        query = _points_query().where(results.c.benchmark == benchmark, results.c.gpu == gpu)
        query = _filtered(
            query.order_by(runs.c.started_at, runs.c.id), branch=branch, include_dirty=include_dirty
        )
        with self._errors(), self._engine.connect() as conn:
            return [Point(**row) for row in conn.execute(query).mappings()]

    def all_series(
        self, gpu: str, *, branch: str | None = None, include_dirty: bool = False
    ) -> dict[str, list[Point]]:
        """Every benchmark's series on one GPU model in one query (a scan of all of them, a page of all)."""
        query = _points_query(results.c.benchmark).where(results.c.gpu == gpu)
        query = query.order_by(results.c.benchmark, runs.c.started_at, runs.c.id)
        query = _filtered(query, branch=branch, include_dirty=include_dirty)
        found: dict[str, list[Point]] = {}
        with self._errors(), self._engine.connect() as conn:
            for row in conn.execute(query).mappings():
                fields = dict(row)
                found.setdefault(fields.pop("benchmark"), []).append(Point(**fields))
        return found

    def extra_infos(self, gpu: str, *, branch: str | None, since: datetime | None) -> Iterator[Any]:
        """(benchmark, run id, extra_info) of one GPU model's clean runs, a benchmark's runs together in run
        id order, fetched in batches: a whole page's kernel tables in one query."""
        query = select(results.c.benchmark, results.c.run_id, results.c.extra_info)
        query = query.select_from(results.join(runs, results.c.run_id == runs.c.id))
        query = _filtered(query.where(results.c.gpu == gpu, MEASURED), branch=branch, include_dirty=False)
        if since is not None:
            query = query.where(runs.c.started_at >= since)
        query = query.order_by(results.c.benchmark, results.c.run_id)
        with self._errors(), self._engine.connect() as conn:
            yield from conn.execution_options(yield_per=1000).execute(query)

    def unmeasured(self, gpu: str) -> int:
        """How many stored results of one GPU model hold a time of 0 or less: left out of every series."""
        query = select(func.count()).select_from(results).where(results.c.gpu == gpu, not_(MEASURED))
        with self._errors(), self._engine.connect() as conn:
            return int(conn.execute(query).scalar() or 0)

    def result(self, run_id: int, benchmark: str) -> dict:
        """A benchmark's stored entry of one run: {"stats": ... (without `data`), "extra_info": ...}."""
        query = select(results.c.stats, results.c.extra_info).where(
            results.c.run_id == run_id, results.c.benchmark == benchmark
        )
        with self._errors(), self._engine.connect() as conn:
            row = conn.execute(query).first()
        if row is None:
            raise HistoryError(f"{self.url}: run #{run_id} has no result of {benchmark}")
        return {"stats": row.stats, "extra_info": row.extra_info}

    # ------------------------------------------------------------------ writing
    def _stored(self, digest: str) -> Recorded | None:
        query = select(runs.c.id, runs.c.benchmarks).where(runs.c.digest == digest)
        with self._engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else Recorded(row.id, False, row.benchmarks)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[Connection]:
        """A connection in a write transaction, committed at the end unless it raised."""
        with self._engine.connect() as conn:
            conn.execution_options(**{IMMEDIATE: True})
            with conn.begin():
                yield conn

    @staticmethod
    def _machine_id(conn: Connection, row: Mapping[str, Any]) -> int:
        """The machines row of this fingerprint, inserted where there is none (in a savepoint: a concurrent
        writer's insert of the same machine is taken instead of failing the run)."""
        query = select(machines.c.id).where(machines.c.fingerprint == row["fingerprint"])
        found = conn.execute(query).scalar()
        if found is not None:
            return found
        try:
            with conn.begin_nested():
                return conn.execute(insert(machines).values(**row)).inserted_primary_key[0]
        except IntegrityError:
            return conn.execute(query).scalar_one()

    @staticmethod
    def _insert_results(conn: Connection, run_id: int, rows: list[dict[str, Any]]) -> None:
        conn.execute(insert(results), [row | {"run_id": run_id} for row in rows])

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Database errors as one-line HistoryErrors naming the database."""
        try:
            yield
        except SQLAlchemyError as err:
            raise HistoryError(f"{self.url}: {reason(err)}") from None


def _filtered(query: Any, *, gpu: str | None = None, branch: str | None = None, include_dirty: bool) -> Any:
    if gpu is not None:
        query = query.where(machines.c.gpu == gpu)
    if branch is not None:
        query = query.where(runs.c.branch == branch)
    if not include_dirty:
        query = query.where(runs.c.dirty.is_(False))
    return query


def _engine(url: URL, shown: str) -> Engine:
    """An engine for `url`: on SQLite with foreign keys, WAL (set once the database is known to be ours),
    writers that wait for each other, and BEGIN emitted here so that transactions and savepoints hold."""
    try:
        if url.get_backend_name() == "sqlite":
            engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})
            event.listen(engine, "connect", _sqlite_connected)
            event.listen(engine, "begin", _sqlite_begin)
            return engine
        timeout = {} if "connect_timeout" in url.query else {"connect_timeout": CONNECT_TIMEOUT_S}
        return create_engine(url, connect_args=timeout)
    except (ArgumentError, NoSuchModuleError, ImportError) as err:
        raise HistoryError(f"{shown}: {' '.join(str(err).split())}") from None


def _sqlite_connected(dbapi_connection: Any, record: Any) -> None:
    dbapi_connection.isolation_level = None  # the driver's own transaction control off: _sqlite_begin's
    dbapi_connection.execute("PRAGMA foreign_keys = ON")


def _sqlite_begin(conn: Connection) -> None:
    # A writer takes the write lock at BEGIN: one that read first could not upgrade while another writes.
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(IMMEDIATE) else "BEGIN")


def _prepare(engine: Engine, shown: str, create: bool) -> None:
    """Check the database's schema (read only); create it where the database is empty and `create`,
    under a lock so that two processes starting on one empty database create it once."""
    try:
        conn = engine.connect()
    except DBAPIError as err:
        raise HistoryError(f"cannot connect to {shown}: {reason(err)}") from None
    with conn:
        try:
            with conn.begin():
                empty = _schema_state(conn, shown)
        except DBAPIError as err:
            raise HistoryError(
                f"{shown}: {reason(err)}; cannot be read as a results database of this suite: give "
                f"another (--db, {URL_VARIABLE})"
            ) from None
        if empty and not create:
            raise EmptyHistory(
                f"{shown}: an empty database; record runs first (python -m perf.history import)"
            )
        try:
            if empty:
                conn.execution_options(**{IMMEDIATE: True})
                with conn.begin():
                    if engine.dialect.name == "postgresql":
                        conn.execute(select(func.pg_advisory_xact_lock(SCHEMA_LOCK)))
                    if _schema_state(conn, shown):  # nobody created it meanwhile
                        metadata.create_all(conn)
                        conn.execute(insert(perf_meta).values(key=VERSION_KEY, value=str(SCHEMA_VERSION)))
            if engine.dialect.name == "sqlite":
                # Ours now: readers beside a writer. WAL is kept in the file; set outside a transaction.
                conn.connection.driver_connection.execute("PRAGMA journal_mode = WAL")
        except DBAPIError as err:
            raise HistoryError(f"{shown}: cannot prepare it for recording ({reason(err)})") from None


def _schema_state(conn: Connection, shown: str) -> bool:
    """True where the database is empty, False where it is a results database this code reads; a
    HistoryError for one that is newer, damaged or another application's."""
    names = set(inspect(conn).get_table_names())
    if not names:
        return True
    if perf_meta.name not in names:
        raise HistoryError(
            f"{shown} is not a results database of this suite (no {perf_meta.name} table); give another "
            f"database (--db, {URL_VARIABLE})"
        )
    value = conn.execute(select(perf_meta.c.value).where(perf_meta.c.key == VERSION_KEY)).scalar()
    version = int(value) if isinstance(value, str) and value.strip().isdigit() else None
    if version is not None and version > SCHEMA_VERSION:
        raise HistoryError(
            f"{shown} has schema version {version}, this code reads up to {SCHEMA_VERSION}; upgrade the suite"
        )
    missing = sorted(table.name for table in TABLES if table.name not in names)
    if version != SCHEMA_VERSION or missing:
        what = f"tables {', '.join(missing)} missing" if missing else f"schema version {value!r}"
        raise HistoryError(f"{shown} is damaged ({what}); restore it from a copy or give another database")
    return False
