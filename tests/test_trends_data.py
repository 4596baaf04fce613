"""The trends page's data (perf/history/trends_data.py, trends.py) without a browser: which benchmarks share
a chart, the size of the data per run, a bounded number of queries however many runs, the kernel tables'
encoding, and what a database that holds nothing to chart gives."""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event

from perf.history import scale, trends
from perf.history.__main__ import main as history_main
from perf.history.store import Point, connect
from perf.history.synthetic import trend_documents
from perf.history.trends_data import KernelTables, chart_keys, encode_series, fresh_change, natural_key
from perf.storage import read_result


def test_the_providers_of_one_shape_share_a_chart():
    attention = "perf/test_attention.py::test_attention[bf16-backward-b1-h16-s16384-d128-causal-{}]"
    compile_ = "perf/test_compile.py::test_compile_gain[ctx512-small-bf16-{}forward-{}]"
    names = {
        **{attention.format(p): {"provider": p, "mode": "backward"} for p in ("flash_triton", "sdpa_cudnn")},
        # The model's implementation comes first in the id; the second id has another preset.
        "perf/test_end_to_end.py::test_forward[naive-small-fp32-ctx512-warm2]": {"impl": "naive"},
        "perf/test_end_to_end.py::test_forward[sdpa-small-fp32-ctx512-warm2]": {"impl": "sdpa"},
        "perf/test_end_to_end.py::test_forward[sdpa-large-fp32-ctx512-warm2]": {"impl": "sdpa"},
        # sdpa is left out of these ids (the axis' unnamed value): eager and compiled share the chart instead.
        compile_.format("", "eager"): {"impl": "sdpa", "variant": "eager"},
        compile_.format("", "compiled"): {"impl": "sdpa", "variant": "compiled"},
        compile_.format("flash_triton-", "eager"): {"impl": "flash_triton", "variant": "eager"},
        "perf/test_transfer.py::test_host_to_device[1MiB-pinned]": {"host_memory": "pinned"},
        "perf/test_matmul.py::test_matmul[8192-bf16]": {"mode": "bf16"},  # no variant: a chart of its own
        "perf/test_toy.py::test_plain": {},
    }
    keys = chart_keys(names, names)
    assert keys[attention.format("sdpa_cudnn")] == (attention.format("")[:-2] + "]", "sdpa_cudnn")
    assert keys[attention.format("flash_triton")][0] == keys[attention.format("sdpa_cudnn")][0]
    forward = "perf/test_end_to_end.py::test_forward[{}]"
    assert keys[forward.format("naive-small-fp32-ctx512-warm2")] == (
        forward.format("small-fp32-ctx512-warm2"),
        "naive",
    )
    assert keys[forward.format("sdpa-large-fp32-ctx512-warm2")][0] == forward.format(
        "large-fp32-ctx512-warm2"
    )
    assert {keys[compile_.format("", v)] for v in ("eager", "compiled")} == {
        (compile_.format("", "")[:-2] + "]", "eager"),
        (compile_.format("", "")[:-2] + "]", "compiled"),
    }
    assert keys[compile_.format("flash_triton-", "eager")][1] == "eager"
    assert keys["perf/test_transfer.py::test_host_to_device[1MiB-pinned]"][1] == "pinned"
    for alone in ("perf/test_matmul.py::test_matmul[8192-bf16]", "perf/test_toy.py::test_plain"):
        assert keys[alone] == (alone, "")


def test_a_kernel_table_repeats_names_and_launches_only_where_they_change():
    tables = KernelTables()
    row = {"kernel": "gemm", "launches": 2, "us": 1234.5678}
    tables.add(1, {"gpu_kernels": [row, {"kernel": "add", "launches": 1, "us": 3.0}]})
    tables.add(2, {"gpu_kernels": [row | {"us": 1300.0}, {"kernel": "add", "launches": 1, "us": 3.1}]})
    tables.add(3, {"gpu_kernels": [row | {"launches": 3}, {"kernel": "add", "launches": 1, "us": 3.1}]})
    tables.add(4, {"gpu_kernels": [{"kernel": "add", "us": float("nan")}, "damaged"]})  # nothing to keep
    tables.add(5, {})
    assert tables.payload() == {
        "n": ["gemm", "add"],
        "r": [[1, [1235, 3], [0, 1], [2, 1]], [2, [1300, 3.1], 0, 0], [3, [1235, 3.1], 0, [3, 1]]],
    }


def _scale_history(path, runs: int, benchmarks: int, monkeypatch) -> str:
    """A history of `runs` nightly runs of `benchmarks` benchmarks of a real result file, kernel tables in."""
    monkeypatch.setattr(scale, "BENCHMARKS", benchmarks)
    template = read_result(scale.TEMPLATE)
    with connect(str(path)) as history:
        for document in scale.documents(template, runs, 1, 0, 0):
            history.record(document)
    return str(path)


def test_the_data_of_a_run_is_at_most_100_kb_for_530_benchmarks(tmp_path, monkeypatch):
    runs, benchmarks = 20, 60
    db = _scale_history(tmp_path / "h.sqlite", runs, benchmarks, monkeypatch)
    with connect(db, create=False) as history:
        trends.publish(history, tmp_path / "site", branch="main")
    size = sum(p.stat().st_size for p in (tmp_path / "site" / "data").rglob("*.js"))
    per_benchmark_run = size / runs / benchmarks
    assert per_benchmark_run <= 100_000 / 530, f"{per_benchmark_run:.0f} bytes per benchmark and run"


def test_the_page_takes_as_many_queries_for_many_runs_as_for_few(tmp_path, monkeypatch):
    counts = []
    for runs in (4, 12):
        db = _scale_history(tmp_path / f"h{runs}.sqlite", runs, 30, monkeypatch)
        with connect(db, create=False) as history:
            statements: list[str] = []
            event.listen(history._engine, "before_cursor_execute", lambda *a, s=statements: s.append(a[2]))
            trends.publish(history, tmp_path / f"site{runs}", branch="main")
        counts.append(len(statements))
    assert counts[0] == counts[1] and counts[0] < 30, counts


def _index(site) -> dict:
    return json.loads(re.search(r"const INDEX = (\{.*?\});\n", (site / "index.html").read_text()).group(1))


def test_a_database_with_nothing_to_chart_gives_a_page_that_says_so(tmp_path, capsys):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    assert history_main(["trends", "--db", str(empty), "--out", str(tmp_path / "a")]) == 0
    assert "an empty database" in _index(tmp_path / "a")["empty"]
    db = str(tmp_path / "h.sqlite")
    with connect(db) as history:
        history.record(trend_documents(4)[0] | {"commit_info": {"id": "ab", "dirty": True, "branch": "main"}})
    assert history_main(["trends", "--db", db, "--out", str(tmp_path / "b")]) == 0
    assert "all of dirty trees" in _index(tmp_path / "b")["empty"]
    with connect(db) as history:
        history.record(trend_documents(4)[1])
    assert history_main(["trends", "--db", db, "--out", str(tmp_path / "c"), "--branch", "nope"]) == 0
    assert "No clean run of branch nope" in _index(tmp_path / "c")["empty"]
    capsys.readouterr()


@pytest.mark.parametrize(
    "what", ["another application's database", "a text file", "a negative --recent-days"]
)
def test_what_is_no_results_database_is_refused_in_one_line(tmp_path, capsys, what):
    path = tmp_path / "other.sqlite"
    args = ["trends", "--db", str(path), "--out", str(tmp_path / "site")]
    if what == "another application's database":
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE songs (title TEXT)")
    elif what == "a text file":
        path.write_text("this is no database\n" * 100)
    else:
        path.touch()
        args += ["--recent-days", "-3"]
    assert history_main(args) == 2
    err = capsys.readouterr().err
    [line] = err.splitlines()
    assert (
        "--recent-days -3" if what.startswith("a negative") else str(path)
    ) in line and "Traceback" not in err
    assert not (tmp_path / "site" / "index.html").exists()


def test_charts_follow_the_order_of_their_numbers():
    sizes = ["8B", "128B", "16B", "1KiB", "512KiB", "2MiB", "1GiB", "64"]
    names = [f"perf/test_allreduce.py::test_allreduce[bf16-nccl-world2-{size}]" for size in sizes]
    ordered = sorted(names, key=natural_key)
    assert [n.rpartition("-")[2][:-1] for n in ordered] == [
        "8B",
        "16B",
        "64",
        "128B",
        "1KiB",
        "512KiB",
        "2MiB",
        "1GiB",
    ]
    assert sorted(["t[a-10b]", "t[a-2.7b]", "t[b-1]"], key=natural_key) == ["t[a-2.7b]", "t[a-10b]", "t[b-1]"]


def _points(values: list[float]) -> list[Point]:
    start = datetime(2026, 11, 1, tzinfo=UTC)
    return [
        Point(i, f"{i:040x}", None, start + timedelta(days=i), False, "main", v * 1.1, None, v, "rounds",
              1980.0, 0.0, False, False)
        for i, v in enumerate(values)
    ]  # fmt: skip


def test_the_newest_runs_off_their_band_are_a_fresh_change():
    noise = [1.0, 1.004, 0.997, 1.002, 0.999, 1.003, 0.996, 1.001, 1.0, 0.998, 1.002, 1.001]
    assert fresh_change("b", "g", _points([*noise, 1.003, 0.998]), [], 0.02) is None
    two = fresh_change("b", "g", _points([*noise, 1.1, 1.11]), [], 0.02)
    assert two is not None and two.index == len(noise) and two.ratio == pytest.approx(1.105, rel=1e-3)
    assert (
        two.certainty > 0.999 and two.before.run_id == len(noise) - 1 and two.after.run_id == len(noise) + 1
    )
    one = fresh_change("b", "g", _points([*noise, 1.0, 0.9]), [], 0.02)  # faster, the newest run only
    assert one is not None and one.index == len(noise) + 1 and one.ratio == pytest.approx(0.9, rel=1e-3)
    # Off the band (3.6 noise) by less than min_change: not listed.
    assert fresh_change("b", "g", _points([*noise, 1.019, 1.019]), [], 0.02) is None


def test_a_series_writes_its_gpu_methods_where_they_change():
    points = _points([1.0, 1.01, 0.99, 1.0, 1.02])
    points[2] = replace(points[2], gpu_s=None, gpu_method=None)  # a run without GPU time is passed over
    points[3:] = [replace(p, gpu_method="steady") for p in points[3:]]
    methods = {"isolated": 0}
    entry = encode_series("b", points, {p.run_id: p.run_id for p in points}, [], methods)
    assert entry["m"] == [[0, 1], [3, 2]] and methods == {"isolated": 0, "rounds": 1, "steady": 2}
    assert entry["g"][2] is None and entry["f"] == "wall"  # steps still scan wall time: two methods
