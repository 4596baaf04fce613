"""The results database (perf/history/store.py), on SQLite and on a real PostgreSQL server started here
(tests/history_pg.py): runs recorded once and read back as they were, stored baselines imported, and
concurrent writers that lose and duplicate nothing. Refusals: tests/test_history_refusals.py."""

from __future__ import annotations

import copy
import json
import multiprocessing
import traceback
from datetime import UTC, timedelta, timezone
from pathlib import Path

import pytest

from perf.history import records
from perf.history.store import HistoryError, connect
from tests.history_documents import (
    BASELINES,
    H100,
    H200,
    MATMUL,
    MEMORY,
    ROOT,
    STEP,
    T0,
    counts,
    document,
    empty_database,
    one_line,
)
from tests.history_pg import fresh_postgres_url, postgres_url  # noqa: F401 (fixtures)


@pytest.fixture(params=["sqlite", "postgresql"])
def history_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return empty_database(request, tmp_path)


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
