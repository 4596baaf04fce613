"""Damaged result files, a time of Infinity, NaN, 0 or below (or a spread below 0) in one benchmark, fed to
every reader of the suite: the tools' reader (load_results, behind the gate, A/B, noise, combine, report and
calibration), the history's import, and each command that reads a file. None accepts one silently: each
refuses it in one line naming the file and the benchmark."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perf.history.__main__ import main as history_main
from perf.history.store import HistoryError, connect
from perf.tools import calibrate, combine, gate, noise, report
from perf.tools.reading.errors import GateError
from perf.tools.reading.measurements import GPU_SPREADS, GPU_TIMES, STATS_SPREADS, STATS_TIMES, not_measured
from perf.tools.reading.results import load_results
from tests.corpus_samples import BENCHMARKS, document

TIMES = [("stats", k) for k in STATS_TIMES] + [("extra_info", k) for k in GPU_TIMES]
SPREADS = [("stats", k) for k in STATS_SPREADS] + [("extra_info", k) for k in GPU_SPREADS]
NOT_TIMES = [math.inf, -math.inf, math.nan, 0.0, -1e-9, -5.0]  # a time must be above 0
NOT_SPREADS = [math.inf, -math.inf, math.nan, -1e-9, -5.0]  # a spread may be 0


def good() -> dict:
    return document(1, clock_sd=0.0, own_sd=0.0, seed=1)


def damaged(where: tuple[str, str], value: float, index: int) -> tuple[dict, str]:
    """The good document with `value` at `where` in benchmark `index`, and that benchmark's name."""
    data = copy.deepcopy(good())
    entry = data["benchmarks"][index]
    entry[where[0]][where[1]] = value
    return data, entry["fullname"]


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))  # Infinity and NaN as JavaScript writes them; Python reads them back
    return path


bad_values = st.one_of(
    st.tuples(st.sampled_from(TIMES), st.sampled_from(NOT_TIMES)),
    st.tuples(st.sampled_from(TIMES), st.floats(max_value=0.0)),
    st.tuples(st.sampled_from(SPREADS), st.sampled_from(NOT_SPREADS)),
    st.tuples(st.sampled_from(SPREADS), st.floats(max_value=-1e-300)),
)


def test_the_good_file_is_a_measurement(tmp_path):
    # Without this the refusals below could be of anything.
    assert all(not_measured(entry) is None for entry in good()["benchmarks"])
    assert len(load_results(write(tmp_path / "r.json", good()), "run").timings) == len(BENCHMARKS)
    with connect(str(tmp_path / "h.sqlite")) as history:
        assert history.import_file(tmp_path / "r.json").new


def test_a_spread_of_zero_and_a_missing_gpu_time_are_measurements(tmp_path):
    data = good()
    data["benchmarks"][0]["stats"]["iqr"] = 0.0
    del data["benchmarks"][1]["extra_info"]["gpu_ms"]
    assert len(load_results(write(tmp_path / "r.json", data), "run").gpu_timings) == len(BENCHMARKS) - 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=bad_values, index=st.integers(0, len(BENCHMARKS) - 1))
def test_no_reader_takes_a_damaged_file(tmp_path_factory, bad, index):
    (where, value), folder = bad, tmp_path_factory.mktemp("damaged")
    data, name = damaged(where, value, index)
    path = write(folder / "r.json", data)
    with pytest.raises(GateError) as refused:
        load_results(path, "--current")
    line = str(refused.value)
    assert "\n" not in line and str(path) in line and name in line and where[1] in line, line
    with connect(str(folder / "h.sqlite")) as history:
        with pytest.raises(HistoryError) as refused_too:
            history.import_file(path)
        assert str(path) in str(refused_too.value) and name in str(refused_too.value)
        assert history.runs() == []


@pytest.mark.parametrize("side", ["baseline", "current"])
def test_the_gate_refuses_infinity_on_either_side(tmp_path, capsys, side):
    clean = write(tmp_path / "clean.json", good())
    bad = write(tmp_path / "bad.json", damaged(("stats", "median"), math.inf, 2)[0])
    files = {"baseline": clean, "current": clean} | {side: bad}
    code = gate.main(["--baseline", str(files["baseline"]), "--current", str(files["current"])])
    out, err = capsys.readouterr()
    assert code == 2 and "PASS" not in out, out
    assert f"{bad}: benchmark {good()['benchmarks'][2]['fullname']}: stats.median is inf" in err, err


def _commands(tmp_path: Path, bad: Path, clean: Path) -> dict:
    store = tmp_path / "store"
    return {
        "noise": lambda: noise.main(["--from", str(clean), str(bad), "--out", str(tmp_path / "n.json")]),
        "combine": lambda: combine.main(["--name", "run", str(bad)], baselines=store),
        "report": lambda: report.main([str(bad), "--out", str(tmp_path / "report")]),
        "calibrate store": lambda: calibrate.main(["store", "--name", "s", str(clean), str(bad)]),
        "history import": lambda: history_main(["import", "--db", str(tmp_path / "h.sqlite"), str(bad)]),
    }


@pytest.mark.parametrize("command", ["noise", "combine", "report", "calibrate store", "history import"])
def test_every_command_refuses_a_negative_gpu_time_in_one_line(tmp_path, capsys, command):
    clean = write(tmp_path / "clean.json", good())
    bad = write(tmp_path / "bad.json", damaged(("extra_info", "gpu_ms"), -2.5, 0)[0])
    code = _commands(tmp_path, bad, clean)[command]()
    out, err = capsys.readouterr()
    said = [line for line in err.splitlines() if "gpu_ms is -2.5" in line]
    assert code != 0 and len(said) == 1 and str(bad) in said[0], (code, out, err)
    assert "Traceback" not in err
    assert not (tmp_path / "n.json").exists() and not (tmp_path / "store").exists()


def test_a_database_holding_a_negative_time_is_still_read(tmp_path, capsys, monkeypatch):
    # A database written before imports were checked: one run holds a negative median. The trends page and
    # the steps are made of the others, and both say what was left out.
    from perf.history import records

    db = str(tmp_path / "h.sqlite")
    with connect(db) as history:
        for run in range(1, 5):
            history.record(document(run, clock_sd=0.01, own_sd=0.002, seed=3))
        bad = document(5, clock_sd=0.01, own_sd=0.002, seed=3)
        bad["benchmarks"][0]["stats"]["median"] = -0.004
        monkeypatch.setattr(records, "check", lambda document: None)  # as an older suite recorded it
        history.record(bad)
        monkeypatch.undo()
        assert history.unmeasured("NVIDIA H200") == 1
        name = bad["benchmarks"][0]["fullname"]
        assert [p.wall_s > 0 for p in history.series(name, "NVIDIA H200")] == [True] * 4
    assert history_main(["trends", "--db", db, "--out", str(tmp_path / "site")]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H200: 1 stored result(s) with a time of 0 or less left out (not measurements)" in out, out
    assert '"unmeasured": {"NVIDIA H200": 1}' in (tmp_path / "site" / "index.html").read_text()
    assert history_main(["steps", "--db", db]) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err
