"""All-reduce of fp32 messages across ranks: each iteration's time on the slowest rank, and the
bandwidths that nccl-tests reports for it.

`measure_allreduce` runs in every rank of a `parallel.launch.run_ranks` group (gloo: CPU tensors,
nccl: one tensor on cuda:rank per rank). Starting the ranks costs seconds, so one call measures
every message size of a backend and world size; sizes that do not fit are skipped with a reason
and the others are still measured.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from perf.gpu_time import GpuTime, calls_for, measure_gpu_time
from perf.harness import nvtx_range, out_of_memory_in
from perf.transfer_workloads import byte_size_label

# What every all-reduce benchmark passes to the harness as `suite`; the report recognizes it.
SUITE = "allreduce"
DTYPE = torch.float32
ELEMENT_BYTES = DTYPE.itemsize
# The first all-reduce of a size sets up the transport for it (NCCL picks algorithm and protocol,
# gloo touches its buffers); the last of these untimed ones decides how many are timed.
WARMUP_ITERATIONS = 3
# gloo reduces in chunks: a 100 MiB all-reduce raised a rank's peak resident memory by under 5 MiB
# here, so the ranks' tensors are what a size needs of the host. They may take this share of the
# memory available; the rest is for the ranks themselves (220 MiB each with torch imported).
HOST_SHARE = 0.8
# Bytes per second below which an all-reduce counts as hung, for the run's time limit: gloo did
# 0.46 GB/s (algorithm bandwidth) with 4 ranks on 2 cores, NCCL does over 10 GB/s even over PCIe.
SLOWEST_BYTES_PER_S = {"gloo": 1e8, "nccl": 1e9}
# Spawning the ranks, importing torch in each and joining the group: 5 s for 4 ranks on 2 cores;
# NCCL's communicators on 8 GPUs add seconds.
STARTUP_S = 60.0
# Per size beyond its all-reduces: the fit check, the barriers, gathering the times, the check.
PER_SIZE_S = 5.0


@dataclass(frozen=True)
class AllReduceTimes:
    """One message size's result: seconds per timed iteration, each the slowest rank's, or why not;
    and rank 0's GPU busy time per all-reduce, or why there is none."""

    size_bytes: int
    durations_s: tuple[float, ...] = ()
    skipped: str | None = None
    gpu: GpuTime | str = "not measured"


def element_count(size_bytes: int) -> int:
    """fp32 elements in a message of `size_bytes`; ValueError unless a positive multiple of 4 bytes."""
    if (
        not isinstance(size_bytes, int)
        or isinstance(size_bytes, bool)
        or size_bytes <= 0
        or size_bytes % ELEMENT_BYTES
    ):
        raise ValueError(
            f"size_bytes: a positive multiple of {ELEMENT_BYTES} bytes (whole fp32 elements) is accepted; "
            f"got {size_bytes!r}"
        )
    return size_bytes // ELEMENT_BYTES


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


def algorithm_bandwidth_gbps(size_bytes: int, seconds: float) -> float:
    """Message bytes over the time of one all-reduce, in GB/s (1e9 bytes)."""
    if not seconds > 0:
        raise ValueError(f"seconds: a positive number is accepted; got {seconds!r}")
    return size_bytes / seconds / 1e9


def bus_bandwidth_gbps(algbw_gbps: float, world_size: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: algbw * 2 (n - 1) / n.

    A ring all-reduce sends and receives 2 (n - 1) / n of the message per rank (a reduce-scatter
    and an all-gather of n - 1 chunks each), so busbw is what each rank's link carried and can be
    set against its peak whatever the number of ranks.
    """
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size: an int >= 1 is accepted; got {world_size!r}")
    return algbw_gbps * 2 * (world_size - 1) / world_size


def run_timeout_s(sizes: Sequence[int], budget_s: float, backend: str, min_iterations: int) -> float:
    """The time limit of one run over `sizes`: beyond it the ranks count as hung.

    Each size gets twice its timing budget (barriers between iterations add to it) and its
    untimed, minimum timed and checking all-reduces at the slowest rate not taken for a hang.
    """
    if backend not in SLOWEST_BYTES_PER_S:
        raise ValueError(f"backend: unknown value {backend!r}; accepted: {', '.join(SLOWEST_BYTES_PER_S)}")
    rate = SLOWEST_BYTES_PER_S[backend]
    calls = WARMUP_ITERATIONS + min_iterations + 1
    transfer_s = sum(calls * element_count(size) * ELEMENT_BYTES / rate for size in sizes)
    return STARTUP_S + len(sizes) * (2 * budget_s + PER_SIZE_S) + transfer_s


def check_allreduced(buffer: torch.Tensor, world_size: int) -> None:
    """RuntimeError unless every element is 1 + 2 + ... + world_size: the sum of each rank's
    tensor filled with rank + 1 (small integers, exact in fp32 in any order of summation)."""
    expected = world_size * (world_size + 1) / 2
    low, high = torch.aminmax(buffer)  # no temporary of the buffer's size, unlike (buffer == expected)
    if low.item() != expected or high.item() != expected:
        raise RuntimeError(
            f"all-reduce of {buffer.numel()} fp32 elements over {world_size} ranks gave values from "
            f"{low.item()} to {high.item()}; every element should be {expected}"
        )


def measure_allreduce(
    rank: int,
    world_size: int,
    sizes: Sequence[int],
    budget_s: float,
    min_iterations: int,
    max_iterations: int,
) -> dict[int, AllReduceTimes]:
    """In every rank of a process group: time all-reduces of each size; the same result on every rank.

    Per size: allocate (or skip the size on every rank when it does not fit on one), warm up,
    agree on the number of timed iterations, time them, gather every rank's times, and check one
    all-reduce of known values. The timed loop of each size is an NVTX range "allreduce <size>".
    """
    nccl = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    results: dict[int, AllReduceTimes] = {}
    for size in sizes:
        # Every rank has freed the previous size's tensor before any rank looks at the memory left.
        dist.barrier()
        buffer, reason = _allocate(size, world_size, device)
        reason = _first_reason(reason, world_size)
        if reason is not None:
            del buffer
            results[size] = AllReduceTimes(size, skipped=reason)
            continue
        warmup = [_timed_allreduce(buffer, device) for _ in range(WARMUP_ITERATIONS)]
        # The slowest rank's last warm-up: every rank derives the same count from it, as it must,
        # since a rank that ran one all-reduce more would wait forever for its peers.
        slowest_warmup = torch.tensor([warmup[-1]], dtype=torch.float64, device=device)
        dist.all_reduce(slowest_warmup, op=dist.ReduceOp.MAX)
        iterations = timed_iterations(slowest_warmup.item(), budget_s, min_iterations, max_iterations)
        with nvtx_range(f"allreduce {byte_size_label(size)}"):
            durations = [_timed_allreduce(buffer, device) for _ in range(iterations)]
        slowest = _slowest_per_iteration(durations, world_size, device)
        results[size] = AllReduceTimes(size, slowest, gpu=_gpu_time(buffer, device, rank, slowest))
        buffer.fill_(rank + 1)
        dist.all_reduce(buffer)
        check_allreduced(buffer, world_size)
        del buffer
    return results


def _allocate(size: int, world_size: int, device: torch.device) -> tuple[torch.Tensor | None, str | None]:
    """This rank's zeroed message, or None and why it does not fit.

    Zeros stay zeros however many all-reduces add them up: no overflow to inf and no subnormals,
    which the CPU adds more slowly, over hundreds of iterations.
    """
    if device.type == "cpu":
        # The host's memory is shared by all ranks; running out of it kills a process rather than
        # raising, so the ranks' total is checked before allocating.
        needed, available = world_size * size, _available_host_bytes()
        if needed > HOST_SHARE * available:
            return None, (
                f"{world_size} ranks' tensors need {needed / 2**30:.1f} GiB of host memory; "
                f"{HOST_SHARE} of the {available / 2**30:.1f} GiB available is the limit"
            )
    try:
        return torch.zeros(element_count(size), dtype=DTYPE, device=device), None  # (size / 4,)
    except Exception as err:
        oom = out_of_memory_in(err)
        if oom is None:
            raise
        return None, f"does not fit on {device}: {str(oom).strip().splitlines()[0][:200]}"


def _available_host_bytes() -> int:
    """MemAvailable from /proc/meminfo (memory the kernel can give without swapping), else free pages."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _first_reason(reason: str | None, world_size: int) -> str | None:
    """The lowest rank's reason to skip a size, on every rank: all skip it or none does."""
    reasons: list[str | None] = [None] * world_size
    dist.all_gather_object(reasons, reason)
    return next((f"rank {r}: {text}" for r, text in enumerate(reasons) if text is not None), None)


def _gpu_time(
    buffer: torch.Tensor, device: torch.device, rank: int, durations: Sequence[float]
) -> GpuTime | str:
    """Rank 0's GPU busy time per all-reduce, after the timed ones: NCCL's kernel, from the moment
    every rank is ready (a barrier before each, outside what is measured). Every rank makes the
    calls, as every all-reduce needs all of them; the count follows the gathered medians."""
    if device.type != "cuda":
        return "gloo all-reduces CPU tensors: there is no GPU work to measure"
    calls = calls_for(statistics.median(durations))
    return measure_gpu_time(
        lambda: dist.all_reduce(buffer), calls, device, before_call=dist.barrier, profiled=rank == 0
    )


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed_allreduce(buffer: torch.Tensor, device: torch.device) -> float:
    """Seconds of one all-reduce on this rank, started when all ranks are ready.

    The barrier first: a rank that left the previous all-reduce late would start this one late,
    and its peers, already waiting in it, would count that skew as this iteration's time. NCCL
    returns once the all-reduce is queued: synchronizing before the end clock waits for it.
    """
    dist.barrier()
    _synchronize(device)
    start = time.perf_counter()
    dist.all_reduce(buffer)
    _synchronize(device)
    return time.perf_counter() - start


def _slowest_per_iteration(
    durations: list[float], world_size: int, device: torch.device
) -> tuple[float, ...]:
    """Each iteration's longest time over the ranks: the all-reduce is done when its last rank has
    the sum, and a rank that arrived last waited for nobody and saw only part of it."""
    mine = torch.tensor(durations, dtype=torch.float64, device=device)  # (iterations,)
    everyone = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(everyone, mine)
    return tuple(torch.stack(everyone).amax(dim=0).tolist())  # (world_size, iterations) -> (iterations,)
