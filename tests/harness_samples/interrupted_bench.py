"""Benchmarks run by tests/test_result_files.py in a child pytest: two that finish, then one that a
Ctrl-C (KeyboardInterrupt) or a failure cuts off in the middle of its timed rounds, as STOP says."""

import os

import torch

from perf.harness import Work


def test_first(bench):
    a = torch.randn(32, 32)
    bench.run(lambda: a @ a, work=Work(flops=2 * 32**3), warmup_steps=1)


def test_second(bench):
    a = torch.randn(48, 48)
    bench.run(lambda: a @ a, work=Work(flops=2 * 48**3), warmup_steps=1)


def test_cut_off(bench):
    calls = []

    def fn():
        calls.append(1)
        if len(calls) > 3:  # in its timed rounds, after the warm-up
            stop = os.environ.get("STOP", "interrupt")
            raise KeyboardInterrupt if stop == "interrupt" else RuntimeError("a failure mid-measurement")

    bench.run(fn, work=Work(), warmup_steps=1)
