"""The results database (perf/history/store.py), on SQLite and on a real PostgreSQL server started here
(tests/history_pg.py): runs recorded once and read back as they were, concurrent writers that lose and
duplicate nothing, databases and files it must refuse without writing to them, and a record that
fails midway leaving the database as it was.
"""

from __future__ import annotations

import copy
import hashlib
import json
import multiprocessing
import socket
import time
import traceback
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, inspect, select, update

from perf.history import db_errors, records
from perf.history.__main__ import main
from perf.history.schema import machines, perf_meta, results, runs
from perf.history.store import DEFAULT_URL, URL_VARIABLE, History, HistoryError, connect, resolve_url
from tests.history_pg import fresh_postgres_url, postgres_url  # noqa: F401 (fixtures)

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


@pytest.fixture(params=["sqlite", "postgresql"])
def history_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each backend: an SQLite file, or a new database on the test server."""
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


# ------------------------------------------------------------------ recording and reading back
def test_record_and_series_round_trip(history_url):
    later = timezone(timedelta(hours=2))
    docs = {
        "first": document(T0),
        "dirty": document(T0 + timedelta(days=1), scale=1.5, dirty=True),
        "feature": document(T0 + timedelta(days=2), scale=1.1, branch="feature"),
        "h200": document(T0 + timedelta(days=3), gpu=H200, scale=0.8),
        "last": document((T0 + timedelta(days=4)).astimezone(later), scale=1.2),  # written at +02:00
    }
    with connect(history_url) as history:
        ids = {
            name: history.record(docs[name]).run_id for name in ("last", "first", "h200", "dirty", "feature")
        }
        again = history.record(copy.deepcopy(docs["last"]))
        assert (again.run_id, again.new, again.benchmarks) == (ids["last"], False, 3)

        def run_ids(points):
            return [point.run_id for point in points]

        assert run_ids(history.series(MATMUL, H100)) == [ids["first"], ids["feature"], ids["last"]]
        dirty = history.series(MATMUL, H100, include_dirty=True)
        assert run_ids(dirty) == [ids[name] for name in ("first", "dirty", "feature", "last")]
        assert [point.dirty for point in dirty] == [False, True, False, False]
        assert run_ids(history.series(MATMUL, H100, branch="main")) == [ids["first"], ids["last"]]
        assert run_ids(history.series(MATMUL, H200)) == [ids["h200"]]

        last = history.series(MATMUL, H100)[-1]
        assert last.started_at == T0 + timedelta(days=4) and last.started_at.tzinfo == UTC
        assert last.commit_time == T0 + timedelta(days=4, hours=-1) and last.commit_time.tzinfo == UTC
        assert last.commit == docs["last"]["commit_info"]["id"] and last.branch == "main"
        assert last.wall_s == pytest.approx(0.0021 * 1.2) and last.wall_iqr_s == pytest.approx(
            0.0021 * 1.2 * 0.002
        )
        assert last.gpu_s == pytest.approx(2.4e-3) and last.gpu_method == "rounds"
        assert (last.sm_mhz, last.power_capped, last.clocks_locked, last.host_bound) == (
            1755.0,
            0.25,
            False,
            False,
        )
        step = history.series(STEP, H100)[-1]
        assert (step.gpu_method, step.sm_mhz, step.power_capped, step.host_bound) == (
            "burst",
            1880.0,
            0.0,
            True,
        )
        memory = history.series(MEMORY, H100)[-1]
        assert (memory.gpu_s, memory.gpu_method, memory.sm_mhz, memory.power_capped) == (
            None,
            None,
            1500.0,
            None,
        )

        stored = history.result(ids["last"], MATMUL)
        written = docs["last"]["benchmarks"][0]
        assert stored["stats"] == {k: v for k, v in written["stats"].items() if k != "data"}
        assert stored["extra_info"] == written["extra_info"]
        assert stored["extra_info"]["gpu_kernels"][0]["us"] == pytest.approx(1990.5 * 1.2)
        with pytest.raises(HistoryError) as missing:
            history.result(ids["h200"], "perf/test_none.py::test_none")
        assert "has no result of perf/test_none.py::test_none" in one_line(missing)

        listed = history.runs()
        assert [run.run_id for run in listed] == [ids[name] for name in ("last", "h200", "feature", "first")]
        assert len(history.runs(include_dirty=True)) == 5
        assert [run.run_id for run in history.runs(gpu=H200)] == [ids["h200"]]
        assert [run.run_id for run in history.runs(branch="feature")] == [ids["feature"]]
        since = history.runs(since=T0 + timedelta(days=2), limit=2)
        assert [run.run_id for run in since] == [ids["last"], ids["h200"]]
        assert history.runs(tier="default") == [] and len(history.runs(tier="pr")) == 4
        run = listed[0]
        assert (run.gpu, run.slug, run.runner, run.driver, run.cuda, run.torch, run.triton) == (
            H100, "nvidia-h100-80gb-hbm3", "runner-1", "580.159.04", "13.0", "2.11.0", "3.6.0"
        )  # fmt: skip
        assert (run.power_limit_w, run.clocks_locked, run.tier, run.benchmarks, run.source) == (
            700.0, False, "pr", 3, "run"
        )  # fmt: skip
        assert run.gpu_method == "steady" and run.digest == records.digest(docs["last"]) and not run.dirty
        assert run.started_at == T0 + timedelta(days=4) and run.started_at.tzinfo == UTC
        assert history.gpus() == [H100, H200]
        assert history.benchmarks(H200) == sorted([MATMUL, STEP, MEMORY]) == history.benchmarks()
    assert counts(history_url) == {"machines": 2, "runs": 5, "results": 15}


def test_stored_baselines_import_once(history_url):
    files = [json.loads(path.read_text()) for path in BASELINES]
    with connect(history_url) as history:
        first = [history.import_file(path) for path in BASELINES]
        assert [r.new for r in first] == [True, True]
        assert [r.benchmarks for r in first] == [len(doc["benchmarks"]) for doc in files]
        again = [history.import_file(path) for path in BASELINES]
        assert [(r.run_id, r.new) for r in again] == [(r.run_id, False) for r in first]
        # The run as recorded at its end and the file it wrote are one run.
        assert history.record(files[1]) == again[1]
        info = {run.run_id: run for run in history.runs(include_dirty=True)}
        assert info[first[0].run_id].source == "baselines/nvidia-h100-80gb-hbm3/0001_h100-default.json"
        assert (info[first[1].run_id].gpu, info[first[1].run_id].tier) == (H200, "default")
        assert history.gpus() == [H100, H200]
        name = files[1]["benchmarks"][0]["fullname"]
        (point,) = history.series(name, H200)
        assert point.wall_s == files[1]["benchmarks"][0]["stats"]["median"]
        stored = history.result(point.run_id, name)["extra_info"]
        assert stored["gpu_kernels"] == files[1]["benchmarks"][0]["extra_info"]["gpu_kernels"]
    total = sum(len(doc["benchmarks"]) for doc in files)
    assert counts(history_url) == {"machines": 2, "runs": 2, "results": total}


def test_every_stored_baseline_is_a_run():
    """Every result file under baselines/ converts to rows, each with its own digest."""
    digests = set()
    for path in sorted(ROOT.glob("baselines/*/[0-9]*.json")):
        doc = json.loads(path.read_text())
        records.check(doc)
        rows = records.result_rows(doc, records.machine_row(doc)["gpu"])
        assert len(rows) == len(doc["benchmarks"]) and all(row["wall_s"] > 0 for row in rows), path
        digests.add(records.digest(doc))
    assert len(digests) == len(list(ROOT.glob("baselines/*/[0-9]*.json"))) >= 2


# ------------------------------------------------------------------ concurrent writers
def _record_in_process(url: str, docs: list[dict], barrier, queue) -> None:
    """A writer process: connects when both are ready (racing the schema's creation too) and records."""
    try:
        barrier.wait(timeout=60)
        with connect(url) as history:
            queue.put([(records.digest(doc), history.record(doc)) for doc in docs])
    except BaseException:
        queue.put(traceback.format_exc())


def test_two_processes_lose_and_duplicate_nothing(history_url):
    shared = [document(T0 + timedelta(hours=i)) for i in range(4)]
    own = [[document(T0 + timedelta(days=1 + i, hours=n)) for i in range(4)] for n in range(2)]
    orders = [shared + own[0], own[1][:2] + shared[::-1] + own[1][2:]]
    context = multiprocessing.get_context("spawn")
    barrier, queue = context.Barrier(2), context.Queue()
    workers = [
        context.Process(target=_record_in_process, args=(history_url, order, barrier, queue))
        for order in orders
    ]
    try:
        for worker in workers:
            worker.start()
        outcomes = [queue.get(timeout=120) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():  # stuck: ended, and the test fails on its missing outcome
                worker.kill()
    assert all(isinstance(outcome, list) for outcome in outcomes), outcomes
    by_digest: dict[str, list] = {}
    for outcome in outcomes:
        for digest, recorded in outcome:
            by_digest.setdefault(digest, []).append(recorded)
    for doc in shared:
        both = by_digest[records.digest(doc)]
        assert len({r.run_id for r in both}) == 1 and sorted(r.new for r in both) == [False, True]
    assert all(r.new for doc in own[0] + own[1] for r in by_digest[records.digest(doc)])
    assert counts(history_url) == {"machines": 1, "runs": 12, "results": 36}
    with connect(history_url) as history:
        assert len({run.digest for run in history.runs()}) == 12


# ------------------------------------------------------------------ refused, never written
def test_newer_or_damaged_schema_is_refused_and_left_as_it_was(history_url):
    connect(history_url).close()
    engine = create_engine(resolve_url(history_url))
    with engine.begin() as conn:
        conn.execute(update(perf_meta).values(value="3"))
    engine.dispose()
    before = snapshot(history_url)
    for create in (True, False):
        with pytest.raises(HistoryError) as err:
            connect(history_url, create=create)
        assert "has schema version 3, this code reads up to 1; upgrade the suite" in one_line(err)
    assert snapshot(history_url) == before

    engine = create_engine(resolve_url(history_url))
    with engine.begin() as conn:
        conn.execute(update(perf_meta).values(value="1"))
        conn.exec_driver_sql("DROP TABLE results")
    engine.dispose()
    before = snapshot(history_url)
    with pytest.raises(HistoryError) as err:
        connect(history_url)
    assert "is damaged (tables results missing)" in one_line(err)
    assert snapshot(history_url) == before


def test_another_applications_database_is_refused_and_left_as_it_was(history_url):
    engine = create_engine(resolve_url(history_url))
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE notes (body TEXT)")
        conn.exec_driver_sql("INSERT INTO notes VALUES ('mine')")
    engine.dispose()
    before = snapshot(history_url)
    with pytest.raises(HistoryError) as err:
        connect(history_url)
    assert "is not a results database of this suite (no perf_meta table)" in one_line(err)
    assert snapshot(history_url) == before


def test_an_empty_database_is_not_created_for_reading(history_url):
    if history_url.startswith("sqlite"):
        with pytest.raises(HistoryError) as err:
            connect(history_url, create=False)
        assert "no such database" in one_line(err)
        assert not Path(history_url.removeprefix("sqlite:///")).exists()
    else:
        with pytest.raises(HistoryError) as err:
            connect(history_url, create=False)
        assert "an empty database; record runs first" in one_line(err)
        assert snapshot(history_url) == {}


def test_a_file_that_is_not_a_database_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_bytes(b"these are notes, not a database\n" * 200)
    for create in (True, False):
        with pytest.raises(HistoryError) as err:
            connect(str(path), create=create)
        message = one_line(err)
        assert "file is not a database" in message and "cannot be read as a results database" in message
    assert path.read_bytes() == b"these are notes, not a database\n" * 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.sqlite"]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("partial", "partial results (interrupted after 2 of 3 benchmarks), not a whole run"),
        ("another tool's", "no machine_info.perf: not a result file of this suite"),
        ("no benchmarks", "no benchmarks in it"),
        ("truncated", "not valid JSON, truncated or damaged"),
        ("missing", "no such file"),
    ],
)
def test_a_file_that_is_not_a_whole_run_is_refused_on_import(history_url, tmp_path, case, expected):
    doc = document(T0)
    if case == "partial":
        doc["perf"]["partial"] = "interrupted after 2 of 3 benchmarks"
    elif case == "another tool's":
        del doc["machine_info"]["perf"]
    elif case == "no benchmarks":
        doc["benchmarks"] = []
    path = tmp_path / "results.json"
    text = json.dumps(doc, indent=4)
    if case != "missing":
        path.write_text(text[: len(text) // 2] if case == "truncated" else text)
    with connect(history_url) as history:
        with pytest.raises(HistoryError) as err:
            history.import_file(path)
        message = one_line(err)
        assert message.startswith(f"{path}: ") and expected in message
        assert history.runs(include_dirty=True) == []


def test_an_unreachable_server_is_one_line_quickly():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(HistoryError) as err:
        connect(f"postgresql://someone:secret-word@127.0.0.1:{port}/results")
    message = one_line(err)
    assert time.monotonic() - start < 15
    assert (
        message == f"cannot connect to postgresql://someone:***@127.0.0.1:{port}/results: Connection refused"
    )
    assert "secret-word" not in message


@pytest.mark.parametrize(
    ("driver_says", "said"),
    [
        (
            'connection failed: connection to server at "10.0.0.7", port 5433 failed: Connection refused\n'
            "\tIs the server running on that host and accepting TCP/IP connections?",
            "Connection refused",
        ),
        (  # psycopg 3.1
            'connection failed: Connection refused\n\tIs the server running on host "10.0.0.7" and '
            "accepting\n\tTCP/IP connections on port 5433?",
            "Connection refused",
        ),
        (
            "failed to resolve host 'db.example': [Errno -2] Name or service not known",
            "unknown host (Name or service not known)",
        ),
        (
            'connection failed: connection to server on socket "/run/pg/.s.PGSQL.5432" failed: No such '
            "file or directory",
            'connection to server on socket "/run/pg/.s.PGSQL.5432" failed: No such '
            "file or directory",  # no URL shows the socket: kept
        ),
    ],
)
def test_a_connection_error_says_what_failed_not_again_where(driver_says, said):
    assert db_errors.reason(OSError(driver_says)) == said


def test_a_record_that_fails_midway_leaves_the_database_as_it_was(history_url, monkeypatch):
    with connect(history_url) as history:
        history.record(document(T0))
        before = counts(history_url)
        original = History._insert_results

        def fail_halfway(conn, run_id, rows):
            original(conn, run_id, rows[:2])  # some rows in, then a failure
            raise RuntimeError("failed midway")

        monkeypatch.setattr(History, "_insert_results", staticmethod(fail_halfway))
        new_machine = document(T0 + timedelta(days=1), gpu=H200)
        with pytest.raises(RuntimeError, match="failed midway"):
            history.record(new_machine)
        assert counts(history_url) == before == {"machines": 1, "runs": 1, "results": 3}
        monkeypatch.setattr(History, "_insert_results", staticmethod(original))
        assert history.record(new_machine).new
    assert counts(history_url) == {"machines": 2, "runs": 2, "results": 6}


# ------------------------------------------------------------------ URLs and the command line
def test_urls(monkeypatch, tmp_path):
    monkeypatch.delenv(URL_VARIABLE, raising=False)
    assert resolve_url(None) == DEFAULT_URL == f"sqlite:///{ROOT / '.benchmarks' / 'history.sqlite'}"
    monkeypatch.setenv(URL_VARIABLE, "postgres://me:pw@db.example:5433/perf")
    assert resolve_url(None) == "postgresql+psycopg://me:pw@db.example:5433/perf"
    assert resolve_url("postgresql://me@db/perf") == "postgresql+psycopg://me@db/perf"
    monkeypatch.chdir(tmp_path)
    assert resolve_url("runs.sqlite") == f"sqlite:///{tmp_path / 'runs.sqlite'}"
    with pytest.raises(HistoryError) as err:
        resolve_url("mysql://me:pw@db/perf")
    assert "me:***@db" in one_line(err) and "pw" not in str(err.value)


def test_command_line_import_and_runs(history_url, tmp_path, capsys):
    good, bad = tmp_path / "good.json", tmp_path / "partial.json"
    good.write_text(json.dumps(document(T0)))
    partial = document(T0 + timedelta(days=1))
    partial["perf"]["partial"] = "interrupted"
    bad.write_text(json.dumps(partial))
    assert main(["import", str(good), str(bad), str(good), "--db", history_url]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines()[:2] == [
        f"{good}: recorded 3 benchmarks as run #1",
        f"{good}: already recorded as run #1",
    ]
    assert "3 files: 1 recorded, 1 already recorded, 1 refused" in out
    refusal = f"python -m perf.history: error: {bad}: partial results (interrupted), not a whole run"
    assert err.splitlines() == [f"{refusal}; record a complete run"]
    assert main(["runs", "--db", history_url, "--gpu", "nvidia-h100-80gb-hbm3"]) == 0
    (line, source) = capsys.readouterr().out.splitlines()
    assert line.startswith("#1") and H100 in line and "3 benchmarks" in line and "gpu time steady" in line
    assert source == f"       from {good}" and len(line) <= 120
    assert main(["runs", "--db", history_url, "--gpu", "NVIDIA A100"]) == 2
    assert "--gpu NVIDIA A100: no runs of it" in capsys.readouterr().err


def test_a_compact_baseline_imports_as_the_document_it_was_written_from(tmp_path):
    """Stored baselines are written compact (perf/storage.py): the history records what they hold."""
    from perf.storage import compact_json, read_result

    original = ROOT / "baselines" / "nvidia-h200" / "0005_h200-default.json"
    compact = tmp_path / "0005_compact.json"
    compact.write_bytes(compact_json(read_result(original)))
    with connect(str(tmp_path / "history.sqlite")) as history:
        first = history.import_file(compact)
        name = read_result(original)["benchmarks"][0]["fullname"]
        stored = history.result(first.run_id, name)
        assert stored["extra_info"] == read_result(original)["benchmarks"][0]["extra_info"]
        assert first.benchmarks == len(read_result(original)["benchmarks"])
