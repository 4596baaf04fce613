"""Numbered baselines never collide and a store that fails loses nothing (perf/plugin/result_files.py): two
writers held to the same instant both store, under two numbers; a folder that cannot take the file leaves the
results in the temporary folder, said in one line, and the session's exit code says it."""

from __future__ import annotations

import logging
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from pytest_benchmark.storage.file import FileStorage

from perf import harness
from perf.plugin import result_files
from perf.storage import read_result
from tests.corpus_samples import document

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = "tests/harness_samples/lost_folder_bench.py"
SLUG = harness.machine_slug(torch.device("cpu"))


def storage(folder: Path) -> FileStorage:
    return FileStorage(folder, logger=logging.getLogger("test"))


def config() -> SimpleNamespace:
    return SimpleNamespace(perf_partial=None)


def save(folder: Path, run: int, barrier=None) -> None:
    """One writer: pytest-benchmark's storage of `folder`, holding at `barrier` until the other is there."""
    if barrier is not None:
        barrier.wait(timeout=30)
    result_files._save(config(), storage(folder), document(run, clock_sd=0, own_sd=0, seed=run), "run")


class StaleStorage(FileStorage):
    """A listing that still gives the number another writer has just taken, the first `stale` times."""

    stale = 1

    @property
    def _next_num(self):
        if self.stale:
            self.stale -= 1
            return "0001"
        return super()._next_num


def test_a_number_taken_meanwhile_makes_the_save_take_the_next(tmp_path):
    save(tmp_path, 1)
    late = config()
    result_files._save(
        late, StaleStorage(tmp_path, logging.getLogger("t")), document(2, clock_sd=0, own_sd=0, seed=2), "run"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0001_run.json", "0002_run.json"]
    assert late.perf_saved == tmp_path / "0002_run.json"
    assert (
        read_result(tmp_path / "0002_run.json")["datetime"]
        == document(2, clock_sd=0, own_sd=0, seed=2)["datetime"]
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the writers are forked processes")
def test_two_writers_at_the_same_instant_both_store(tmp_path):
    context = multiprocessing.get_context("fork")
    for attempt in range(10):
        folder = tmp_path / f"try{attempt}"
        barrier = context.Barrier(2)
        writers = [context.Process(target=save, args=(folder, run, barrier)) for run in (1, 2)]
        for w in writers:
            w.start()
        for w in writers:
            w.join(timeout=60)
        assert [w.exitcode for w in writers] == [0, 0]
        stored = sorted(p.name for p in folder.iterdir())
        assert stored == ["0001_run.json", "0002_run.json"], stored
        runs = {read_result(folder / name)["datetime"] for name in stored}
        assert len(runs) == 2  # each writer's own results, whole


def test_a_folder_that_cannot_take_the_file_keeps_the_results_elsewhere(tmp_path, monkeypatch):
    loop = tmp_path / "loop"
    folder = storage(loop)
    if loop.is_dir():
        loop.rmdir()
    loop.symlink_to(loop)  # made a link loop after the run started: no file can be made in it
    monkeypatch.setattr(result_files.tempfile, "gettempdir", lambda: str(tmp_path))
    failed = config()
    result_files._save(failed, folder, document(1, clock_sd=0, own_sd=0, seed=1), "run")
    [line] = failed.perf_store_failures
    kept = next(tmp_path.glob("perf-unsaved-*-run.json"))
    assert line.startswith(f"--benchmark-save: cannot write {loop}/0001_run.json (") and line.endswith(
        f"the results are kept in {kept}"
    ), line
    assert "not a folder" in line
    assert read_result(kept)["datetime"] == document(1, clock_sd=0, own_sd=0, seed=1)["datetime"]


def test_a_run_whose_folders_are_lost_keeps_its_results_and_says_where(tmp_path):
    # A child pytest measures, then its --benchmark-save and --benchmark-json folders become link loops.
    store, out, kept = tmp_path / "store", tmp_path / "out", tmp_path / "kept"
    kept.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(kept)}
    env["LOSE"] = os.pathsep.join([str(store / SLUG), str(out)])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--benchmark-max-time=0.02",
         SAMPLE, f"--benchmark-storage=file://{store}",
         "--benchmark-save=lost", f"--benchmark-json={out / 'results.json'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    notes = proc.stdout.replace("\n  ", " ")  # a note wrapped at 120 columns, as one line again
    said = [line for line in notes.splitlines() if "cannot write" in line]
    assert proc.returncode == result_files.STORE_FAILED, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and len(said) == 2, proc.stdout
    for option, name in (("--benchmark-save", "lost.json"), ("--benchmark-json", "results.json")):
        [line] = [line for line in said if option in line]
        [file] = kept.glob(f"perf-unsaved-*-{name}")
        assert line.endswith(f"the results are kept in {file}"), line
        assert [b["name"] for b in read_result(file)["benchmarks"]] == ["test_measured_then_folders_lost"]


@pytest.mark.parametrize("where", ["storage", "json"])
def test_a_destination_that_is_a_link_loop_is_refused_before_anything_runs(tmp_path, where):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    option = f"--benchmark-storage=file://{loop}" if where == "storage" else f"--benchmark-json={loop}/r.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "LOSE": str(tmp_path / "x")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", SAMPLE,
         "--benchmark-save=no", option],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    flag = "--benchmark-save" if where == "storage" else "--benchmark-json"
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"{flag}: {loop} is a link loop or a broken link" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x").exists()  # the benchmark never ran
