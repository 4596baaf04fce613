"""What a CPU run prints (perf/plugin/summary.py), from a child pytest of the synthetic benchmarks: the CPU
note once, lines within 120 columns where the suite writes them, pytest-benchmark's tables only with
--benchmark-tables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = "tests/harness_samples/synthetic_bench.py"
# pytest-benchmark's table of a group starts with this.
BENCHMARK_TABLE = "Name (time in"
# Lines pytest and pytest-benchmark write whatever the width: the header's versions and defaults.
NOT_OURS = ("benchmark: ", "platform ", "plugins: ", "rootdir: ", "cachedir: ")


def _run(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "COLUMNS": "120"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", SAMPLES, "-k", "matmul", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def plain() -> str:
    return _run("--benchmark-max-time=0.02")


def test_the_cpu_note_is_said_once_before_the_run(plain):
    assert plain.count("no CUDA GPU in use") == 1
    assert plain.index("no CUDA GPU in use") < plain.index("derived figures")


def test_the_suites_lines_fit_120_columns(plain):
    long = [line for line in plain.splitlines() if len(line) > 120 and not line.startswith(NOT_OURS)]
    assert not long
    assert "derived figures (median)" in plain and "synthetic_matmul" in plain


def test_pytest_benchmarks_tables_are_a_flag_away_on_the_cpu(plain):
    assert BENCHMARK_TABLE not in plain
    assert BENCHMARK_TABLE in _run("--benchmark-max-time=0.02", "--benchmark-tables")


def test_more_benchmarks_in_tables_below_is_said_only_under_a_table_it_adds_to():
    # On the CPU every weighted-sum benchmark is in that suite's own table: no derived-figures table, and
    # so no "(N more benchmarks: in the tables below)" line hanging under nothing.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "COLUMNS": "120"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "perf/test_weighted_sum.py", "-q",
         "--benchmark-max-time=0.02"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "derived figures" not in proc.stdout and "in the tables below" not in proc.stdout, proc.stdout
    assert "weighted sum: GB/s of the Triton kernel" in proc.stdout  # the suite's own table is there
