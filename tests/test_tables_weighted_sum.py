"""The weighted-sum suite (the example of docs/adding-a-suite.md): its declared table on synthetic results,
and its benchmark run on the CPU in a child pytest, where the Triton provider skips with its reason."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

from perf.cases.weighted_sum import SUITES
from perf.tables.declared import render

(TABLE,) = SUITES[0].tables_of()
table = functools.partial(render, TABLE)

ROOT = Path(__file__).resolve().parent.parent


def result(provider: str, gb_per_s: float | None, mode: str = "forward") -> dict:
    info = {"suite": "weighted_sum", "mode": mode, "rows": 4096, "precision": "fp32", "provider": provider}
    return info if gb_per_s is None else {**info, "gb_per_s": gb_per_s}


def test_table_sets_the_kernel_beside_its_reference():
    header, row = table([result("torch", 12.5), result("triton", 25.0), {"suite": "matmul", "n": 8}])
    assert header.split() == ["mode", "rows", "prec", "triton", "GB/s", "torch", "GB/s", "triton/torch"]
    assert row.split() == ["forward", "4096", "fp32", "25.0", "12.5", "2.00x"]
    assert table([result("torch", 12.5)])[1].split()[-3:] == ["-", "12.5", "-"]
    assert table([]) == []


def test_the_suite_runs_on_the_cpu_with_its_declared_options(tmp_path):
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "perf/test_weighted_sum.py", "-q", "-p", "no:cacheprovider",
            "--weighted-sum-sizes=1024", "--weighted-sum-providers=triton,torch", "--benchmark-max-time=0.02",
            f"--benchmark-json={out}",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = sorted(b["name"] for b in json.loads(out.read_text())["benchmarks"])
    assert names == [
        "test_weighted_sum[fp32-rows1024-torch-forward]",
        "test_weighted_sum[fp32-rows1024-torch-forward_backward]",
    ]
    assert "triton: the Triton kernel needs a CUDA GPU to be timed" in proc.stdout
    assert "weighted sum: GB/s of the Triton kernel" in proc.stdout  # its table at the end of the run
