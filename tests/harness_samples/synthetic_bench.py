"""Benchmarks run by tests/test_harness.py in a child pytest: not collected by the correctness tests."""

import time
import weakref

import torch

from perf.harness import Work, nvtx_range, oom_note
from perf.harness.gpu_time import GpuTime


def test_synthetic_matmul(bench):
    a = torch.randn(64, 64)

    def fn():
        with nvtx_range("forward"):
            a @ a

    bench.run(fn, work=Work(flops=2 * 64**3, tokens=64, precision="fp32"), warmup_steps=1, label="synthetic")


def test_raises_wrapped_oom(bench):
    # torch.compile reports an out-of-memory during compilation as its own error, raised from it.
    with oom_note("one score matrix is 128.00 GiB"):
        oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 128.00 GiB")
        raise RuntimeError("backend='inductor' raised: OutOfMemoryError") from oom


# Weak references to what the call that ran out of memory held when it failed.
HELD_WHEN_OUT_OF_MEMORY: list[weakref.ref] = []


def _allocating_call():
    scores = torch.empty(1024)  # the first of two large allocations; the second fails
    HELD_WHEN_OUT_OF_MEMORY.append(weakref.ref(scores))
    try:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
    except torch.OutOfMemoryError as err:
        # A frame that keeps its error in a local makes a reference cycle (frame, error, traceback),
        # which only the garbage collector frees.
        failure = err
        raise failure from None


def test_raises_oom(bench):
    _allocating_call()


def test_after_oom_runs(bench):
    # The failed call's tensors were freed with its traceback, before this benchmark measures its peak.
    assert HELD_WHEN_OUT_OF_MEMORY and all(ref() is None for ref in HELD_WHEN_OUT_OF_MEMORY)
    bench.run(lambda: torch.ones(8).sum(), work=Work(), warmup_steps=0)


def test_interleaved_ratio(bench):
    # Sleeps, not arithmetic: their durations hold on a loaded two-core machine.
    bench.run_interleaved(lambda: time.sleep(0.006), lambda: time.sleep(0.003), work=Work(), warmup_steps=1)


def test_recorded_rounds(bench):
    # Rounds timed in other processes (ranks), handed over as seconds per round of 2 iterations.
    # Their GPU busy time, as a rank measured it: 4 to 6 ms of each 10 ms call.
    gpu = GpuTime(per_call_ms=(4.0, 6.0, 5.0), activities_per_call=12.0, profile_s=0.05)
    bench.record_rounds([0.010, 0.030, 0.020], work=Work(bytes_moved=1e6), gpu=gpu, iterations=2, ranks=2)


def test_recorded_rounds_without_gpu_time(bench):
    bench.record_rounds([0.010, 0.012, 0.011], work=Work(), gpu="the ranks ran on the CPU (gloo)")


def test_gpu_time_of_a_call_that_fails_only_then(bench, monkeypatch):
    # A call that fails in the extra calls after the timed rounds: the rounds stand, the reason is kept.
    from perf.harness import bench as harness_bench

    def calls_fail(fn, seconds_per_call, device, isolated=False):
        raise RuntimeError("device lost")

    monkeypatch.setattr(harness_bench, "unavailable_reason", lambda device: None)
    monkeypatch.setattr(harness_bench, "steady_gpu_time", calls_fail)
    bench.run(lambda: torch.ones(8).sum(), work=Work(), warmup_steps=1)
