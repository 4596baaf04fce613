"""Collectives across ranks: each iteration's time on the slowest rank, rank 0's GPU busy time, and
the number of wrong elements after one collective of known values (perf/cases/collectives.py).

`measure_collectives` runs in every rank of a process group (gloo: CPU tensors, nccl: one GPU per
rank). Starting the ranks costs seconds, so one call measures every collective, dtype, placement and
size of a backend and world size. A case the backend rejects, or a size that does not fit, is
skipped with a reason on every rank and the others are still measured.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from perf.cases.collectives import CollectiveCase, buffers, count_wrong, fill, first_wrong, rank_elements
from perf.cases.transfer import byte_size_label
from perf.harness import nvtx_range, out_of_memory_in, synchronize
from perf.harness.gpu_time import GpuTime
from perf.workloads.rank_timing import (
    agreed_iterations,
    rank0_busy_time,
    slowest_over_ranks,
    timed_from_barrier,
)

# The cases of one run, each with the sizes it is measured at (those that fit its dtype and chunks).
Plan = Sequence[tuple[CollectiveCase, Sequence[int]]]

# The first collective of a size sets up the transport for it (NCCL picks algorithm and protocol,
# gloo touches its buffers); the last of these untimed ones decides how many are timed.
WARMUP_ITERATIONS = 3
# gloo reduces in chunks: a 100 MiB all-reduce raised a rank's peak resident memory by under 5 MiB
# here, so the ranks' tensors are what a size needs of the host. They may take this share of the
# memory available; the rest is for the ranks themselves (220 MiB each with torch imported).
HOST_SHARE = 0.8
# Algorithm bandwidth below which a collective counts as hung, for the run's time limit: gloo's
# slowest at 100 MiB was fp32 all-gather at 0.20 GB/s with 4 ranks on 2 cores (all-reduce 0.40);
# NCCL does over 10 GB/s even over PCIe.
SLOWEST_BYTES_PER_S = {"gloo": 5e7, "nccl": 1e9}
# Spawning the ranks, importing torch in each and joining the group: 5 s for 4 ranks on 2 cores;
# NCCL's communicators on 8 GPUs add seconds.
STARTUP_S = 60.0
# Per case: the probe of whether the backend runs it. Per size beyond its collectives: the fit check,
# the barriers, gathering the times, the check.
PER_CASE_S = 2.0
PER_SIZE_S = 5.0
CPU_REASON = "gloo runs collectives on CPU tensors: there is no GPU work to measure"


@dataclass(frozen=True)
class CollectiveTimes:
    """One case at one size: seconds per timed iteration, each the slowest rank's, or why not; rank
    0's GPU busy time per call, or why there is none; and the wrong elements of all ranks' results
    after one collective of known values, with the first of them (rank, index, value found and expected)."""

    durations_s: tuple[float, ...] = ()
    skipped: str | None = None
    gpu: GpuTime | str = "not measured"
    wrong_elements: int | None = None
    first_wrong: str | None = None


def run_timeout_s(plan: Plan, budget_s: float, backend: str, min_iterations: int) -> float:
    """The time limit of one run of `plan`: beyond it the ranks count as hung.

    Each size gets twice its timing budget (barriers between iterations add to it) and its
    untimed, minimum timed and checking collectives at the slowest rate not taken for a hang.
    """
    if backend not in SLOWEST_BYTES_PER_S:
        raise ValueError(f"backend: unknown value {backend!r}; accepted: {', '.join(SLOWEST_BYTES_PER_S)}")
    rate = SLOWEST_BYTES_PER_S[backend]
    calls = WARMUP_ITERATIONS + min_iterations + 1
    sizes = [size for _, case_sizes in plan for size in case_sizes]
    transfer_s = sum(calls * size / rate for size in sizes)
    return STARTUP_S + len(plan) * PER_CASE_S + len(sizes) * (2 * budget_s + PER_SIZE_S) + transfer_s


def device_for(backend: str) -> torch.device:
    """nccl: this rank's current GPU (the launcher sets it); gloo: the CPU. Chosen from the backend's
    name, not the group's: one group may hold both backends ("cpu:gloo,cuda:nccl")."""
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    if backend == "gloo":
        return torch.device("cpu")
    raise ValueError(f"backend: unknown value {backend!r}; accepted: gloo, nccl")


def measure_collectives(
    rank: int,
    world_size: int,
    backend: str,
    plan: Plan,
    budget_s: float,
    min_iterations: int,
    max_iterations: int,
) -> dict[tuple[CollectiveCase, int], CollectiveTimes]:
    """In every rank of a process group: time each case of `plan` at each of its sizes; the same
    result on every rank, keyed by (case, size).

    Per case: one small call tells whether `backend` runs it at all. Per size: allocate (or skip the
    size on every rank when it does not fit on one), warm up, agree on the number of timed
    iterations, time them, gather every rank's times, measure rank 0's GPU time, and count the wrong
    elements of one collective of known values. The timed loop of each is an NVTX range, e.g.
    "all_gather bf16 out_of_place 1GiB".
    """
    device = device_for(backend)
    results: dict[tuple[CollectiveCase, int], CollectiveTimes] = {}
    for case, sizes in plan:
        if not sizes:
            continue
        rejected = _rejected(case, backend, rank, world_size, device)
        for size in sizes:
            if rejected is not None:
                results[case, size] = CollectiveTimes(skipped=rejected)
                continue
            results[case, size] = _measure(
                case, size, rank, world_size, device, budget_s, min_iterations, max_iterations
            )
    return results


def _measure(
    case: CollectiveCase,
    size: int,
    rank: int,
    world_size: int,
    device: torch.device,
    budget_s: float,
    min_iterations: int,
    max_iterations: int,
) -> CollectiveTimes:
    # Every rank has freed the previous size's tensors before any rank looks at the memory left.
    dist.barrier()
    allocated, reason = _allocate(case, size, rank, world_size, device)
    reason = _first_reason(reason, world_size)
    if reason is not None:
        return CollectiveTimes(skipped=reason)
    source, result = allocated

    def call() -> None:
        case.spec.call(source, result)

    warmup = [timed_from_barrier(call, device)[0] for _ in range(WARMUP_ITERATIONS)]
    iterations = agreed_iterations(warmup[-1], device, budget_s, min_iterations, max_iterations)
    with nvtx_range(f"{case.collective} {case.dtype} {case.placement} {byte_size_label(size)}"):
        durations = [timed_from_barrier(call, device)[0] for _ in range(iterations)]
    slowest = slowest_over_ranks(durations, world_size, device)
    # Rank 0's time per collective: NCCL's kernel, from the moment every rank is ready.
    gpu = rank0_busy_time(call, rank, device, slowest, CPU_REASON)
    wrong, first = _wrong_elements(case, source, result, rank, world_size)
    return CollectiveTimes(slowest, gpu=gpu, wrong_elements=wrong, first_wrong=first)


def _rejected(
    case: CollectiveCase, backend: str, rank: int, world_size: int, device: torch.device
) -> str | None:
    """Why `backend` does not run `case`, from one call on a chunk of one element per rank; the
    same on every rank. A backend rejects a collective or dtype it lacks before sending anything, on
    every rank alike, so none is left waiting for a peer."""
    source, result = buffers(case, world_size, rank, world_size, device)
    reason = None
    try:
        case.spec.call(source, result)
        synchronize(device)
    except (RuntimeError, NotImplementedError) as err:
        first_line = (str(err).strip().splitlines() or [""])[0][:200]
        reason = (
            f"{backend} does not run {case.collective} on {case.dtype} {case.placement.replace('_', '-')}: "
            f"{type(err).__name__}: {first_line}"
        )
    return _first_reason(reason, world_size)


def _allocate(
    case: CollectiveCase, size: int, rank: int, world_size: int, device: torch.device
) -> tuple[tuple[torch.Tensor, torch.Tensor] | None, str | None]:
    """This rank's (input, output), or None and why they do not fit."""
    elements = size // case.torch_dtype.itemsize
    if device.type == "cpu":
        # The host's memory is shared by all ranks; running out of it kills a process rather than
        # raising, so the ranks' total is checked before allocating.
        in_place = case.placement == "in_place"
        needed = (
            world_size * rank_elements(case.spec, elements, world_size, in_place) * case.torch_dtype.itemsize
        )
        available = _available_host_bytes()
        if needed > HOST_SHARE * available:
            return None, (
                f"{world_size} ranks' tensors need {needed / 2**30:.1f} GiB of host memory; "
                f"{HOST_SHARE} of the {available / 2**30:.1f} GiB available is the limit"
            )
    try:
        return buffers(case, elements, rank, world_size, device), None
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
    """The lowest rank's reason to skip, on every rank: all skip or none does."""
    reasons: list[str | None] = [None] * world_size
    dist.all_gather_object(reasons, reason)
    return next((f"rank {r}: {text}" for r, text in enumerate(reasons) if text is not None), None)


def _wrong_elements(
    case: CollectiveCase, source: torch.Tensor, result: torch.Tensor, rank: int, world_size: int
) -> tuple[int, str | None]:
    """Elements of all ranks' results that differ from what one collective of known values must give,
    after the timed ones and outside them, and where the first of them is (the lowest rank's first
    one). The output is zeroed first (no expected value is 0), so an element the collective did not
    write counts as wrong; in place, the input is set after it."""
    result.zero_()
    fill(source, case.spec.sent(rank, world_size))
    case.spec.call(source, result)
    expected = case.spec.expected(rank, world_size)
    wrong = torch.tensor([count_wrong(result, expected)], dtype=torch.int64, device=result.device)
    dist.all_reduce(wrong)
    if not wrong.item():
        return 0, None
    found = first_wrong(result, expected)
    firsts: list = [None] * world_size
    dist.all_gather_object(firsts, found)
    first = next(
        f"rank {r}, element {index}: {got:g} where {want} was expected"
        for r, place in enumerate(firsts)
        if place is not None
        for index, got, want in (place,)
    )
    return int(wrong.item()), first
