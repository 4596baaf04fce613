"""Stored baselines are compact (perf/storage.py `compact_json`, written by perf/plugin/result_files.py for
--benchmark-save) and read back figure for figure by pytest-benchmark's own storage (--benchmark-compare)
and by the tools (`load_results`); older, indented files are read as before.

The runs start a child pytest on the CPU (torch needed there); the others need neither torch nor a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pytest_benchmark.storage.file import FileStorage

from perf.storage import BASELINES, COMPACT, compact_json, expand_document, read_result
from perf.tools.reading.errors import GateError
from perf.tools.reading.results import load_results

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = "tests/harness_samples/interrupted_bench.py"
# Default-tier baselines of real runs, indented with their raw rounds: about 4 MB each.
DEFAULT_TIER = [
    BASELINES / "nvidia-h100-80gb-hbm3" / "0007_h100-default.json",
    BASELINES / "nvidia-h200" / "0005_h200-default.json",
]
MB = 1_000_000


class _Logger:
    """What pytest-benchmark's FileStorage asks of its logger; a failed load is a warning there."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, text: str, **kwargs: Any) -> None:
        self.warnings.append(text)

    def info(self, text: str, **kwargs: Any) -> None:
        pass


def without_rounds(document: dict[str, Any]) -> dict[str, Any]:
    """`document` less its raw rounds, as the compact form stores it."""
    benchmarks = [
        {**b, "stats": {k: v for k, v in b["stats"].items() if k != "data"}} for b in document["benchmarks"]
    ]
    return {**document, "benchmarks": benchmarks}


def figures(path: Path) -> tuple:
    """Everything `load_results` gives the tools, but the path."""
    r = load_results(path, "--baseline")
    return r.machine, r.timings, r.gpu_timings, r.gpu_absent, r.gpu_methods, r.gpu_alternates


def stored_stats(folder: Path, name: str) -> dict[str, dict[str, Any]]:
    """Each benchmark's stats as --benchmark-compare reads them: pytest-benchmark's FileStorage.load."""
    logger = _Logger()
    loaded = list(FileStorage(folder.parent, logger, default_machine_id=folder.name).load(name))
    assert len(loaded) == 1 and not logger.warnings, (loaded, logger.warnings)
    return {b["fullname"]: b["stats"] for b in loaded[0][1]["benchmarks"]}


def child(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    pytest.importorskip("torch")  # the suite's plugin measures with it
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "STOP": "none"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--benchmark-max-time=0.02", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


# --------------------------------------------------------------------------- written by a real run
def test_a_saved_baseline_is_compact_and_compared_with_the_medians_of_the_full_results(tmp_path):
    store, full = tmp_path / "store", tmp_path / "results.json"
    saved = child(
        tmp_path,
        SAMPLES,
        "-k",
        "not cut_off",
        f"--benchmark-storage=file://{store}",
        "--benchmark-save=new",
        f"--benchmark-json={full}",
    )
    assert saved.returncode == 0, saved.stdout + saved.stderr
    (baseline,) = store.glob("*/0001_new.json")
    text, written = baseline.read_text(), json.loads(full.read_text())
    # Compact: the tables, a line a benchmark, no raw rounds; the --benchmark-json file stays full.
    assert COMPACT in json.loads(text) and COMPACT not in written
    assert len(text.splitlines()) < 20 and '"data"' not in text and "    " not in text
    assert all("data" in b["stats"] for b in written["benchmarks"])
    # Read back as written, less the raw rounds (two documents of one run: all but their time of writing),
    # and stored as compact_json writes that document.
    document = read_result(baseline)
    assert document == {**without_rounds(written), "datetime": document["datetime"]}
    assert baseline.read_bytes() == compact_json(document)
    medians = {name: t.median_s for name, t in load_results(full, "--current").timings.items()}
    assert len(medians) == 2
    assert {name: t.median_s for name, t in load_results(baseline, "--baseline").timings.items()} == medians
    assert figures(baseline) == figures(full)
    stats = stored_stats(baseline.parent, "0001")
    assert {name: s["median"] for name, s in stats.items()} == medians
    assert stats == {b["fullname"]: without_rounds(written)["benchmarks"][i]["stats"] for i, b in
                     enumerate(written["benchmarks"])}  # fmt: skip

    # --benchmark-compare against it and against the same results as an older, indented file; the check
    # (slower by more than 1 s: a form every release parses) reads each compared file's median.
    (baseline.parent / "0002_indented.json").write_text(full.read_text())
    compared = child(
        tmp_path,
        SAMPLES,
        "-k",
        "not cut_off",
        f"--benchmark-storage=file://{store}",
        "--benchmark-compare=000",
        "--benchmark-compare-fail=median:1",
        "--benchmark-tables",
    )
    out = compared.stdout + compared.stderr
    assert compared.returncode == 0, out
    assert "comparing against" in out and "0001_new.json" in out and "0002_indented.json" in out
    assert "Failed to load" not in out and "Can't compare" not in out
    # pytest-benchmark's table: a row per benchmark and file, the same figures from either form.
    rows = {}
    for line in out.splitlines():
        if line.startswith("test_") and " (000" in line:
            name, source, figures_shown = line.split(maxsplit=2)
            rows[name, source[:6]] = figures_shown.split()
    assert rows[("test_first", "(0001_")] == rows[("test_first", "(0002_")]
    assert rows[("test_second", "(0001_")] == rows[("test_second", "(0002_")]


# --------------------------------------------------------------------------- stored files
@pytest.mark.parametrize("stored", DEFAULT_TIER, ids=lambda path: path.parent.name)
def test_a_default_tier_baseline_compact_is_at_most_1_mb_and_gives_the_same_figures(tmp_path, stored):
    """A converted copy of a real default-tier baseline (4 MB indented): at most 1 MB, and every figure the
    tools and --benchmark-compare read from it the same as from the original."""
    copy = tmp_path / stored.parent.name / stored.name
    copy.parent.mkdir()
    original = json.loads(stored.read_text())
    copy.write_bytes(compact_json(original))
    assert copy.stat().st_size <= MB, f"{copy.stat().st_size / MB:.3f} MB"
    assert stored.stat().st_size > 3 * MB and COMPACT in json.loads(copy.read_text())
    document = read_result(copy)
    assert document == without_rounds(original)  # kernel tables, clocks, options, the selection, all
    kernels = [b["extra_info"]["gpu_kernels"] for b in document["benchmarks"]]
    assert (
        len(kernels) > 500 and all(kernels) and all(isinstance(r["kernel"], str) for k in kernels for r in k)
    )
    assert figures(copy) == figures(stored)
    stats = stored_stats(copy.parent, stored.name[:4])
    assert stats == {b["fullname"]: b["stats"] for b in without_rounds(original)["benchmarks"]}


# Default-tier baselines that a real GPU run stored compact (`make baseline`, `combine`).
WRITTEN_COMPACT = sorted(
    path for path in BASELINES.glob("*/[0-9]*default.json") if COMPACT in json.loads(path.read_text())
)


@pytest.mark.parametrize("stored", WRITTEN_COMPACT, ids=lambda path: f"{path.parent.name}/{path.name[:4]}")
def test_a_default_tier_baseline_written_by_a_gpu_run_is_at_most_1_mb_and_read_by_every_reader(stored):
    assert stored.stat().st_size <= MB, f"{stored.stat().st_size / MB:.3f} MB"
    document = read_result(stored)
    assert len(document["benchmarks"]) > 500 and all("data" not in b["stats"] for b in document["benchmarks"])
    assert stored.read_bytes() == compact_json(document)  # as the writer writes it, nothing by hand
    assert load_results(stored, "--baseline").gpu_timings
    stats = stored_stats(stored.parent, stored.name[:4])
    assert stats == {b["fullname"]: b["stats"] for b in document["benchmarks"]}


def test_a_compact_default_tier_baseline_is_stored():
    assert WRITTEN_COMPACT, "no default-tier baseline in baselines/ was written compact"


def test_an_indented_baseline_is_read_as_it_is():
    old = BASELINES / "nvidia-h100-80gb-hbm3" / "0001_h100-default.json"
    assert old.read_text().startswith('{\n    "machine_info"')  # written by pytest-benchmark, indented
    assert read_result(old) == json.loads(old.read_text())
    assert load_results(old, "--baseline").timings
    assert stored_stats(old.parent, "0001")


def _document() -> dict[str, Any]:
    """A small result document: two benchmarks with kernel tables, nested extra_info and a selection."""
    kernel = {"kernel": "gemm\u2026a1b2c3", "launches": 2.0, "us": 12.5}

    def bench(name: str, median: float) -> dict[str, Any]:
        info = {
            "gpu_ms": median * 1e3,
            "clocks": {"sm_mhz_mean": 1980.0, "throttle": {}},
            "gpu_kernels": [kernel],
        }
        return {
            "group": None,
            "name": name,
            "fullname": f"perf/test_x.py::{name}",
            "params": None,
            "param": None,
            "extra_info": info,
            "options": {"min_rounds": 5, "timer": "synchronized_timer"},
            "stats": {"min": median, "median": median, "mean": median, "rounds": 3, "data": [median] * 3},
        }

    benchmarks = [bench("test_a", 0.01), bench("test_b", 0.02)]
    return {
        "machine_info": {"perf": {"gpu": {"name": "NVIDIA H100 80GB HBM3"}}},
        "commit_info": {"id": "abc"},
        "benchmarks": benchmarks,
        "datetime": "2026-01-01T00:00:00",
        "version": "5.3.1",
        "perf": {
            "tier": "default",
            "selected": sorted(["perf/test_x.py::test_c", *(b["fullname"] for b in benchmarks)]),
        },
    }


def test_a_document_the_tables_cannot_give_back_is_stored_plain():
    document = _document()
    document["perf"]["selected"].reverse()  # not sorted: kept as it is
    document["benchmarks"][1]["extra_info"] = "not a dict"
    stored = json.loads(compact_json(document))
    assert stored["perf"]["selected"] == document["perf"]["selected"]
    assert expand_document(stored) == without_rounds(document)
    document["benchmarks"].append({"fullname": "perf/test_x.py::test_d", "extra_info": [0], "stats": {}})
    stored = json.loads(compact_json(document))  # a list as extra_info would be read as a row: all plain
    assert COMPACT not in stored and stored == without_rounds(document)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda d: d[COMPACT].update(format=2),
            "a compact result file of format 2; this checkout reads format 1",
        ),
        (lambda d: d[COMPACT]["kernels"].clear(), "tables do not fit its benchmarks"),
        (lambda d: d["benchmarks"][0]["extra_info"].pop(), "tables do not fit its benchmarks"),
        (lambda d: d["benchmarks"][0].update(options=7), "tables do not fit its benchmarks"),
    ],
)
def test_a_damaged_compact_file_is_refused_with_a_message(tmp_path, damage, message):
    path = tmp_path / "0001_x.json"
    stored = json.loads(compact_json(_document()))
    assert expand_document(stored) == without_rounds(_document())
    damage(stored)
    path.write_text(json.dumps(stored))
    with pytest.raises(GateError, match=message):
        load_results(path, "--baseline")


def test_the_plugin_refuses_a_damaged_compact_baseline_before_the_run(tmp_path):
    torch = pytest.importorskip("torch")
    from perf.plugin.baselines import _baseline_problem

    stored = json.loads(compact_json(_document()))
    stored[COMPACT]["fields"].clear()
    path = tmp_path / "0001_x.json"
    path.write_text(json.dumps(stored))
    assert "unreadable result file (ValueError: a compact result file whose tables" in (
        _baseline_problem(path, torch.device("cpu")) or ""
    )
