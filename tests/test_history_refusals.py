"""The results database (perf/history/store.py) refusing, on SQLite and on a real PostgreSQL server started
here (tests/history_pg.py): newer or foreign schemas, damaged files and documents, unreachable servers and a
record that fails midway, each leaving the database as it was; then URLs and the command line."""

from __future__ import annotations

import json
import socket
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, update

from perf.history import db_errors
from perf.history.__main__ import main
from perf.history.schema import perf_meta
from perf.history.store import DEFAULT_URL, URL_VARIABLE, History, HistoryError, connect, resolve_url
from tests.history_documents import (
    H100,
    H200,
    ROOT,
    T0,
    counts,
    document,
    empty_database,
    one_line,
    snapshot,
)
from tests.history_pg import fresh_postgres_url, postgres_url  # noqa: F401 (fixtures)


@pytest.fixture(params=["sqlite", "postgresql"])
def history_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return empty_database(request, tmp_path)


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
