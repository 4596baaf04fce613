"""Timing a call that every rank of a process group makes (a collective, a data-parallel step): how many
to time, each rank's time from a common start, the slowest rank's per call, and rank 0's GPU busy time."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from perf.harness import synchronize
from perf.harness.gpu_time import GpuTime, calls_for, measure_gpu_time


def timed_iterations(seconds_per_iteration: float, budget_s: float, minimum: int, maximum: int) -> int:
    """How many iterations of `seconds_per_iteration` fill `budget_s`, within [minimum, maximum]."""
    if not seconds_per_iteration > 0 or seconds_per_iteration == math.inf:
        raise ValueError(
            f"seconds_per_iteration: a positive finite number is accepted; got {seconds_per_iteration!r}"
        )
    if not 0 <= budget_s < math.inf:
        raise ValueError(f"budget_s: a finite number >= 0 is accepted; got {budget_s!r}")
    if not (isinstance(minimum, int) and isinstance(maximum, int) and 1 <= minimum <= maximum):
        raise ValueError(
            f"minimum, maximum: ints with 1 <= minimum <= maximum are accepted; got {minimum!r}, {maximum!r}"
        )
    return max(minimum, min(maximum, int(budget_s / seconds_per_iteration)))


def agreed_iterations(
    last_warmup_s: float, device: torch.device, budget_s: float, minimum: int, maximum: int
) -> int:
    """timed_iterations from the slowest rank's last warm-up: every rank derives the same count, as it
    must, since a rank that made one call more would wait forever for its peers."""
    slowest = torch.tensor([last_warmup_s], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return timed_iterations(slowest.item(), budget_s, minimum, maximum)


def timed_from_barrier(call: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    """(seconds of `call` on this rank, started when all ranks are ready; what it returned).

    The barrier first: a rank that left the previous call late would start this one late, and its
    peers, already waiting for it in their first collective, would count that skew as this call's
    time. NCCL returns once a collective is queued: synchronizing before the end clock waits for it
    and for the call's kernels.
    """
    dist.barrier()
    synchronize(device)
    start = time.perf_counter()
    result = call()
    synchronize(device)
    return time.perf_counter() - start, result


def slowest_over_ranks(seconds: Sequence[float], world_size: int, device: torch.device) -> tuple[float, ...]:
    """Each call's longest time over the ranks: a call that needs all of them is done when its last rank
    is, and a rank that arrived last waited for nobody and saw only part of it."""
    mine = torch.tensor(list(seconds), dtype=torch.float64, device=device)  # (calls,)
    everyone = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(everyone, mine)
    return tuple(torch.stack(everyone).amax(dim=0).tolist())  # (world_size, calls) -> (calls,)


def rank0_busy_time(
    call: Callable[[], Any], rank: int, device: torch.device, seconds: Sequence[float], cpu_reason: str
) -> GpuTime | str:
    """Rank 0's GPU busy time per call after the timed ones, a barrier before each outside what is
    measured; `cpu_reason` on the CPU. Every rank makes the calls, so that each collective has all its
    ranks; their count follows the gathered median."""
    if device.type != "cuda":
        return cpu_reason
    calls = calls_for(statistics.median(seconds))
    return measure_gpu_time(call, calls, device, before_call=dist.barrier, profiled=rank == 0)
