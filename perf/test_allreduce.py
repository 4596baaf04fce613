"""All-reduce bandwidth of fp32 messages: gloo on CPU tensors, NCCL with one GPU per rank.

Parametrized by the tier (conftest.py): backend, world size and message bytes. Starting the ranks
costs seconds, so the first test of a backend and world size measures all the tier's sizes in one
run of ranks (perf/allreduce_workloads.py); each test then hands its own size's iterations to
pytest-benchmark as rounds. The end of the run tabulates them (perf/allreduce_report.py).
"""

from __future__ import annotations

import statistics

import pytest
import torch

from perf.allreduce_workloads import (
    DTYPE,
    ELEMENT_BYTES,
    SUITE,
    AllReduceTimes,
    algorithm_bandwidth_gbps,
    bus_bandwidth_gbps,
    element_count,
    measure_allreduce,
    run_timeout_s,
)
from perf.harness import TimingPolicy, Work
from perf.rank_runs import measured_once
from perf.tiers import Tier
from perf.transfer_workloads import byte_size_label


def _measured(
    backend: str, world_size: int, sizes: tuple[int, ...], policy: TimingPolicy
) -> dict[int, AllReduceTimes]:
    return measured_once(
        (SUITE, backend, world_size, sizes, policy.budget_s, policy.min_rounds, policy.max_rounds),
        measure_allreduce,
        world_size,
        backend=backend,
        args=(sizes, policy.budget_s, policy.min_rounds, policy.max_rounds),
        timeout_s=run_timeout_s(sizes, policy.budget_s, backend, policy.min_rounds),
        what=f"every size of {backend} with {world_size} ranks",
    )


def test_allreduce(bench, tier: Tier, allreduce_backend: str, world_size: int, allreduce_size: int):
    backend, size = allreduce_backend, allreduce_size
    element_count(size)  # a size that is not whole fp32 elements fails here, alone
    gpus = torch.cuda.device_count()
    if backend == "nccl" and world_size > gpus:
        pytest.skip(f"nccl with {world_size} ranks needs {world_size} GPUs; {gpus} visible")
    # The sizes of one backend and world size side by side: how bandwidth grows with the message,
    # from latency-bound (kilobytes) to bandwidth-bound (hundreds of megabytes), as nccl-tests lists it.
    bench.benchmark.group = f"allreduce {backend} world{world_size}"
    sizes = tuple(s for s in tier.allreduce_sizes if s % ELEMENT_BYTES == 0)
    times = _measured(backend, world_size, sizes, bench.policy)[size]
    if times.skipped is not None:
        pytest.skip(f"{byte_size_label(size)} all-reduce, {backend} with {world_size} ranks: {times.skipped}")
    assert len(times.durations_s) >= bench.policy.min_rounds and min(times.durations_s) > 0
    algbw = algorithm_bandwidth_gbps(size, statistics.median(times.durations_s))
    bench.record_rounds(
        times.durations_s,
        # gb_per_s from this is the algorithm bandwidth: message bytes per all-reduce time.
        work=Work(bytes_moved=size),
        gpu=times.gpu,
        suite=SUITE,
        backend=backend,
        world_size=world_size,
        size_bytes=size,
        dtype=str(DTYPE).removeprefix("torch."),
        algbw_gbps=algbw,
        busbw_gbps=bus_bandwidth_gbps(algbw, world_size),
    )
