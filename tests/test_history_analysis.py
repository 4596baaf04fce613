"""The history's readers: the gate against the recent runs of a branch, the steps of the last days with
their kernel diff, and the trends page; on SQLite and on a real PostgreSQL (tests/history_pg.py)."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from perf.history import steps as steps_module
from perf.history.__main__ import main as history_main
from perf.history.store import connect
from tests.gate_files import H100, NAMES, run_gate, section, short, stats
from tests.history_pg import fresh_postgres_url, postgres_url  # noqa: F401

SLOWED = NAMES[0]  # the benchmark whose GPU time steps up by 8% at STEP_DAY
STEP_DAY = 20
DAYS = 30
START = datetime.now(UTC) - timedelta(days=DAYS)


def document(
    day: int, *, slower: float = 1.0, dirty: bool = False, branch: str = "main", seed: int = 0
) -> dict:
    """A nightly run: every benchmark of NAMES with 0.5% noise, SLOWED 8% slower from STEP_DAY, its
    kernel table one kernel whose time follows its GPU time."""
    rng = random.Random(seed * 1000 + day)
    benchmarks = []
    for i, name in enumerate(NAMES):
        factor = rng.lognormvariate(0, 0.005) * (1.08 if name == SLOWED and day >= STEP_DAY else 1.0) * slower
        gpu_ms = (5.0 + i) * factor
        benchmarks.append(
            {
                "name": name.split("::")[1],
                "fullname": name,
                "group": None,
                "stats": stats((0.010 + i * 1e-3) * factor, seed=day * 100 + i),
                "extra_info": {
                    "gpu_ms": gpu_ms,
                    "gpu_method": "rounds",
                    "gpu_kernels": [
                        {"kernel": "gemm" if day < STEP_DAY else "gemm_v2", "launches": 1, "us": gpu_ms * 1e3}
                    ],
                },
            }
        )
    when = START + timedelta(days=day)
    return {
        "machine_info": {"perf": {"device": "cuda", "gpu": {"name": H100, "count": 1}}},
        "commit_info": {"id": f"{day:040x}", "time": when.isoformat(), "dirty": dirty, "branch": branch},
        "datetime": when.isoformat(),
        "perf": {"tier": "pr"},
        "benchmarks": benchmarks,
    }


@pytest.fixture(params=["sqlite", "postgresql"])
def recorded(request, tmp_path) -> str:
    """A history of DAYS nightly runs of main, a dirty run and a branch run 20% slower on the last day."""
    url = (
        str(tmp_path / "history.sqlite")
        if request.param == "sqlite"
        else request.getfixturevalue("fresh_postgres_url")
    )
    with connect(url) as history:
        for day in range(DAYS):
            history.record(document(day))
        history.record(document(DAYS - 1, slower=1.2, dirty=True, seed=1))
        history.record(document(DAYS - 1, slower=1.2, branch="feature", seed=2))
    return url


def write(tmp_path, doc: dict) -> str:
    path = tmp_path / "current.json"
    path.write_text(json.dumps(doc))
    return str(path)


# --------------------------------------------------------------------------- the gate against history
def test_the_gate_against_history_passes_a_clean_run_and_fails_a_slower_one(recorded, tmp_path, capsys):
    clean = write(tmp_path, document(DAYS, seed=7))
    code, out, _ = run_gate(capsys, "--against", "history", "--history", recorded, "--current", clean)
    assert code == 0, out
    assert "baseline: the last 12 clean runs of branch main" in out
    # The dirty and the branch runs, 20% slower, are not part of the baseline; a 4% slowdown of one
    # benchmark is caught at its own noise, under --threshold's 5%.
    doc = document(DAYS, seed=7)
    slowed = doc["benchmarks"][3]
    slowed["extra_info"]["gpu_ms"] *= 1.04
    code, out, _ = run_gate(
        capsys, "--against", "history", "--history", recorded, "--current", write(tmp_path, doc)
    )
    assert code == 1 and section(out, "regressions") == [short(NAMES[3])], out
    assert "% sd)" in out  # its own threshold, from the history's spread


def test_the_history_baseline_starts_after_the_step(recorded, tmp_path, capsys):
    # SLOWED stepped up 8% ten runs ago: the last 12 runs hold 10 after the step, so its median is the new
    # level and a run at that level passes.
    code, out, _ = run_gate(
        capsys,
        "--against",
        "history",
        "--history",
        recorded,
        "--current",
        write(tmp_path, document(DAYS, seed=3)),
    )
    assert code == 0, out


def test_the_gate_against_history_refuses_what_it_cannot_judge(tmp_path, capsys, recorded):
    current = write(tmp_path, document(DAYS))
    code, _, err = run_gate(capsys, "--against", "history", "--baseline", current, "--current", current)
    assert code == 2 and "--baseline and --against history name two baselines; give one" in err
    code, _, err = run_gate(capsys, "--history", recorded, "--current", current)
    assert code == 2 and "give --against history too" in err
    code, _, err = run_gate(
        capsys, "--against", "history", "--history", str(tmp_path / "none.sqlite"), "--current", current
    )
    assert code == 2 and err.count("\n") == 1 and "none.sqlite" in err, err
    ran = []
    code, _, err = run_gate(
        capsys, "--against", "history", "--history", recorded, "--history-branch", "nope",
        runner=lambda *a, **k: ran.append(a),
    )  # fmt: skip
    assert code == 2 and "no clean run of" in err and "nothing was run" in err and not ran


# --------------------------------------------------------------------------- steps
def test_steps_of_the_last_days_name_the_commit_and_the_kernels(recorded, capsys):
    with connect(recorded, create=False) as history:
        found, seconds = steps_module.recent_steps(history, days=DAYS + 1)
        assert seconds >= 0
        assert [(s.benchmark, s.step.commit) for s in found] == [(SLOWED, f"{STEP_DAY:040x}")]
        assert found[0].step.ratio == pytest.approx(1.08, rel=0.01) and found[0].figure == "gpu"
        lines = steps_module.describe(history, found[0])
        assert "gemm_v2" in "\n".join(lines) and "slower" in lines[0]
        old, _ = steps_module.recent_steps(history, days=DAYS - STEP_DAY - 2)
        assert old == []  # the step began before the last 8 days
    assert history_main(["steps", "--db", recorded, "--days", str(DAYS + 1)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 step(s) began in the last") and SLOWED in out
    assert history_main(["steps", "--db", recorded, "--days", "0"]) == 2
    assert history_main(["steps", "--db", recorded, "--days", "5", "--min-change", "1.5"]) == 2
    # At a 10% least change the 8% step is no step.
    assert history_main(["steps", "--db", recorded, "--days", str(DAYS + 1), "--min-change", "0.1"]) == 0
    assert capsys.readouterr().out.startswith("0 step(s) began")


# --------------------------------------------------------------------------- the trends page
def loaded(path) -> Any:
    """The payload of a data file of the trends page: `PERF.call(arguments..., payload);`."""
    text = path.read_text()
    return json.loads(text[text.index("{") : text.rindex(");")])


def test_the_trends_page_has_every_series_its_steps_and_the_kernel_tables(recorded, tmp_path):
    out = tmp_path / "site"
    assert history_main(["trends", "--db", recorded, "--out", str(out), "--recent-days", str(DAYS + 1)]) == 0
    page = (out / "index.html").read_text()
    index = json.loads(re.search(r"const INDEX = (\{.*?\});\n", page).group(1))
    assert [g["name"] for g in index["gpus"]] == [H100] and index["gpus"][0]["benchmarks"] == len(NAMES)
    data = loaded(out / index["gpus"][0]["file"])
    assert len(data["runs"]["id"]) == DAYS  # the dirty run is left out, and the branch's
    [slowed] = [s for s in data["series"] if s["n"] == SLOWED]
    assert slowed["r"] == [[0, DAYS]] and len(slowed["g"]) == DAYS and slowed["f"] == "gpu"
    assert [s[0] for s in slowed["st"]] == [STEP_DAY]
    # On the landing: the step, its commits either side and the kernel that moved.
    [entry] = index["landing"]
    assert entry["name"] == SLOWED and entry["after"]["commit"] == f"{STEP_DAY:040x}"[:10]
    assert entry["ratio"] == pytest.approx(1.08, rel=0.01) and "gemm_v2" in json.dumps(entry["kernels"])
    # The kernel tables of a benchmark, in its own file: the newest run's is gemm_v2.
    position = sorted(s["n"] for s in data["series"]).index(SLOWED)
    tables = loaded(out / index["gpus"][0]["dir"] / f"{position}.js")
    newest = max(tables["r"], key=lambda run: run[0])
    assert newest[0] == data["runs"]["id"][-1] and "gemm_v2" in tables["n"]


def test_all_series_of_a_gpu_is_each_benchmarks_series(recorded):
    with connect(recorded, create=False) as history:
        every = history.all_series(H100, branch="main")
        assert sorted(every) == sorted(NAMES)
        for name in NAMES:
            assert every[name] == history.series(name, H100, branch="main")
        assert len(history.all_series(H100, include_dirty=True)[SLOWED]) == DAYS + 2  # dirty and branch too
