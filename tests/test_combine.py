"""Parts of one run stored as one baseline: one machine, one commit, each benchmark once, no overwrite."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perf.tools import combine
from perf.tools.reading.results import load_results

H100 = {"gpu": {"name": "NVIDIA H100 80GB HBM3", "driver": "580"}, "torch": "2.11", "triton": "3.6"}


def part(tmp_path: Path, file: str, names: list[str], perf=H100, commit="abc", when="2026-11-22T10") -> Path:
    path = tmp_path / file
    document = {
        "machine_info": {"perf": perf},
        "commit_info": {"id": commit, "dirty": False},
        "datetime": when,
        "version": "5.2.3",
        "benchmarks": [{"fullname": n, "stats": {"median": 0.01, "iqr": 0.001, "rounds": 5}} for n in names],
    }
    path.write_text(json.dumps(document))
    return path


def test_parts_become_the_next_numbered_baseline_of_their_gpu(tmp_path, capsys):
    a = part(tmp_path, "a.json", ["perf/test_a.py::x", "perf/test_a.py::y"], when="2026-11-22T10")
    b = part(tmp_path, "b.json", ["perf/test_b.py::z"], when="2026-11-22T11")
    store = tmp_path / "baselines"
    (store / "nvidia-h100-80gb-hbm3").mkdir(parents=True)
    (store / "nvidia-h100-80gb-hbm3" / "0003_old.json").write_text("{}")
    assert combine.main(["--name", "h100-default", str(a), str(b)], baselines=store) == 0
    stored = store / "nvidia-h100-80gb-hbm3" / "0004_h100-default.json"
    assert "stored 3 benchmarks" in capsys.readouterr().out
    results = load_results(stored, "baseline")
    assert sorted(results.timings) == ["perf/test_a.py::x", "perf/test_a.py::y", "perf/test_b.py::z"]
    document = json.loads(stored.read_text())
    assert document["datetime"] == "2026-11-22T11"
    assert [p["file"] for p in document["parts"]] == ["a.json", "b.json"]
    assert document["machine_info"]["perf"] == H100


def test_a_second_store_takes_the_next_number(tmp_path):
    a = part(tmp_path, "a.json", ["perf/test_a.py::x"])
    store = tmp_path / "baselines"
    for expected in ("0001_run.json", "0002_run.json"):
        assert combine.main(["--name", "run", str(a)], baselines=store) == 0
        assert (store / "nvidia-h100-80gb-hbm3" / expected).exists()


@pytest.mark.parametrize(
    ("second", "message"),
    [
        (
            dict(perf={**H100, "torch": "2.12"}),
            r"machine_info.perf differs .*\(torch '2.12' against '2.11'\)",
        ),
        (
            dict(perf={"cpu_model": "EPYC"}),
            r"\(gpu.name None against 'NVIDIA H100 80GB HBM3'; .* and \d+ more\)",
        ),
        (dict(commit="def"), r"commit differs .*\(id 'def' against 'abc'\)"),
        (dict(names=["perf/test_a.py::x"]), "perf/test_a.py::x is also in part"),
    ],
)
def test_parts_of_different_runs_are_refused(tmp_path, capsys, second, message):
    a = part(tmp_path, "a.json", ["perf/test_a.py::x"])
    b = part(tmp_path, "b.json", second.pop("names", ["perf/test_b.py::z"]), **second)
    store = tmp_path / "baselines"
    assert combine.main(["--name", "run", str(a), str(b)], baselines=store) == 2
    err = capsys.readouterr().err
    assert err.startswith("perf.tools.combine: error: part ") and len(err.strip().splitlines()) == 1
    assert re.search(message, err) and len(err) - len(f"{a}{b}") < 250, err  # no dicts printed whole
    assert not list(store.rglob("*.json")), "nothing may be stored from refused parts"


def test_missing_and_truncated_parts_are_refused(tmp_path, capsys):
    truncated = tmp_path / "t.json"
    truncated.write_text('{"benchmarks": [')
    store = tmp_path / "baselines"
    assert combine.main(["--name", "run", str(tmp_path / "nope.json")], baselines=store) == 2
    assert "no such file" in capsys.readouterr().err
    assert combine.main(["--name", "run", str(truncated)], baselines=store) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_a_name_that_is_not_a_file_name_is_refused(tmp_path, capsys):
    a = part(tmp_path, "a.json", ["perf/test_a.py::x"])
    assert combine.main(["--name", "../up", str(a)], baselines=tmp_path) == 2
    assert "--name '../up'" in capsys.readouterr().err


def test_an_interrupt_while_storing_leaves_nothing_and_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    a = part(tmp_path, "a.json", ["perf/test_a.py::x"])
    store = tmp_path / "baselines"

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr("perf.storage.os.link", interrupted)  # the last step of writing the file
    assert combine.main(["--name", "run", str(a)], baselines=store) == 130
    assert capsys.readouterr().err == "perf.tools.combine: interrupted; nothing was written\n"
    assert not [p for p in store.rglob("*") if p.is_file()], "no baseline and no temporary file"
