"""Does the harness time what CUDA events time? Each case is measured by the harness and then by
`triton.testing.do_bench` (CUDA events, median) in the same process; extra_info carries the ratio.
"""

from __future__ import annotations

import itertools
import statistics

import pytest
import torch

from perf.harness import Work
from perf.workloads import lm_workload

# 7168^3 in bf16: 7.4e11 flop, about 1 ms on an H100 (dense bf16 peak 989 TFLOP/s, ~770 reached).
MATMUL_N = 7168
CASES = ("matmul_bf16_1ms", "train_step_2.7b_bf16")


@pytest.mark.parametrize("case", CASES)
def test_timing_agreement(bench, device, case):
    if device.type != "cuda":
        pytest.skip("do_bench times with CUDA events: needs a CUDA GPU")
    from triton.testing import do_bench

    if case.startswith("matmul"):
        # do_bench flushes the L2 cache before every call; back-to-back calls on one pair of
        # 100 MB inputs would find part of them cached (3.5% faster, H100). Rotating over four
        # pairs makes every call read its inputs from memory in both timers.
        pairs = [
            [torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16) for _ in range(2)]
            for _ in range(4)
        ]
        out = torch.empty(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
        calls = itertools.count()

        def fn() -> None:
            a, b = pairs[next(calls) % len(pairs)]
            torch.matmul(a, b, out=out)

        work = Work(flops=2 * MATMUL_N**3, precision="bf16")
    else:
        workload = lm_workload("train_step", "sdpa", "2.7b", "bf16", 512, device, optimizer="torch")
        fn, work = workload.step, workload.work

    info = bench.run(fn, work=work, warmup_steps=3, case=case)
    if "median_ms" not in info:
        pytest.skip("benchmarks are disabled: nothing to compare")
    # rep is in ms: at least ~10 calls of the training step, ~200 of the matmul.
    do_bench_ms = do_bench(fn, warmup=100, rep=2000, return_mode="median")
    # do_bench zeroes a 256 MB buffer before each call, so each call starts by writing those
    # dirty lines back out of L2; CUDA events around back-to-back calls, as the harness runs
    # them, show how much of a difference to do_bench is that flush rather than the harness.
    events_ms = _back_to_back_event_ms(fn, calls=info["iterations"], repeats=info["rounds"])
    info.update(
        do_bench_ms=do_bench_ms,
        harness_over_do_bench=info["median_ms"] / do_bench_ms,
        cuda_events_ms=events_ms,
        harness_over_cuda_events=info["median_ms"] / events_ms,
    )


def _back_to_back_event_ms(fn, calls: int, repeats: int) -> float:
    """Median over `repeats` of CUDA-event time around `calls` consecutive calls, per call."""
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)
