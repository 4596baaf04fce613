"""The weighted-sum suite (the example of docs/adding-a-suite.md): its declared table on synthetic results,
and its benchmark run on the CPU in a child pytest, where the Triton provider skips with its reason."""

from __future__ import annotations

import functools

from perf.cases.weighted_sum import SUITES
from perf.tables.declared import render
from tests.suite_runs import run_suite

(TABLE,) = SUITES[0].tables_of()
table = functools.partial(render, TABLE)


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
    options = ("--weighted-sum-sizes=1024", "--weighted-sum-providers=triton,torch")
    proc, results = run_suite(tmp_path, "perf/test_weighted_sum.py", *options)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = sorted(results)
    assert names == [
        "test_weighted_sum[fp32-rows1024-torch-forward]",
        "test_weighted_sum[fp32-rows1024-torch-forward_backward]",
    ]
    assert "triton: the Triton kernel needs a CUDA GPU to be timed" in proc.stdout
    assert "weighted sum: GB/s of the Triton kernel" in proc.stdout  # its table at the end of the run
