"""What perf/test_allreduce.py and perf/test_collectives.py share: the run of ranks that measures every
collective case of the tier, and how one benchmark records its own case and size.

Starting the ranks costs seconds, so the first benchmark of a backend and world size measures every
case and size of the tier in one run (perf/workloads/collective_ranks.py); each benchmark then hands its
own iterations to pytest-benchmark as rounds.
"""

from __future__ import annotations

import statistics

import pytest

from perf.cases.collectives import (
    CollectiveCase,
    algorithm_bandwidth_gbps,
    bus_bandwidth_gbps,
    size_problem,
    suite_of,
)
from perf.cases.transfer import byte_size_label
from perf.harness import Bench, Work
from perf.tiers import Tier
from perf.workloads.collective_ranks import CollectiveTimes, Plan, measure_collectives, run_timeout_s
from perf.workloads.rank_runs import measured_once, nccl_unavailable


def run_plan(tier: Tier, world_size: int) -> Plan:
    """Every collective case of the tier with the sizes it can be measured at on `world_size` ranks."""
    return tuple(
        (case, tuple(s for s in tier.collective_sizes if size_problem(case, s, world_size) is None))
        for case in tier.collective_run_cases
    )


def timing_args(bench: Bench) -> tuple[float, int, int]:
    """(budget in seconds, minimum and maximum iterations) per case and size. With
    --benchmark-disable pytest-benchmark runs each benchmark once, untimed: the ranks then run each
    case once too, a smoke run of every collective and its check."""
    if bench.benchmark.disabled:
        return 0.0, 1, 1
    policy = bench.policy
    return policy.budget_s, policy.min_rounds, policy.max_rounds


def measured(
    bench: Bench, tier: Tier, backend: str, world_size: int
) -> dict[tuple[CollectiveCase, int], CollectiveTimes]:
    plan = run_plan(tier, world_size)
    budget_s, minimum, maximum = timing_args(bench)
    return measured_once(
        ("collectives", backend, world_size, plan, budget_s, minimum, maximum),
        measure_collectives,
        world_size,
        backend=backend,
        args=(backend, plan, budget_s, minimum, maximum),
        timeout_s=run_timeout_s(plan, budget_s, backend, minimum),
        what=f"every collective of {backend} with {world_size} ranks",
    )


def bench_collective(
    bench: Bench, tier: Tier, case: CollectiveCase, backend: str, world_size: int, size: int
) -> dict:
    """Record `case` at `size` from its run of ranks; skip with the reason where it cannot run, and
    fail, after recording, where its check found wrong elements."""
    what = (
        f"{byte_size_label(size)} {case.collective} ({case.dtype}, {case.placement.replace('_', ' ')}), "
        f"{backend} with {world_size} ranks"
    )
    if world_size < 2:
        # A launcher's world of one rank (or --world-sizes 1): the collective copies within one rank.
        pytest.skip(f"{what}: a collective needs 2 ranks or more; with 1 no byte crosses a link")
    problem = size_problem(case, size, world_size)
    if problem is not None:
        pytest.skip(f"{what}: {problem}")
    unavailable = nccl_unavailable(world_size) if backend == "nccl" else None
    if unavailable is not None:
        pytest.skip(unavailable)
    # The sizes of one case, backend and world size side by side: how bandwidth grows with the
    # message, from latency-bound (kilobytes) to bandwidth-bound (hundreds of megabytes).
    bench.benchmark.group = f"{case} {backend} world{world_size}"
    times = measured(bench, tier, backend, world_size)[case, size]
    if times.skipped is not None:
        pytest.skip(f"{what}: {times.skipped}")
    assert times.durations_s and min(times.durations_s) > 0
    algbw = algorithm_bandwidth_gbps(size, statistics.median(times.durations_s))
    info = bench.record_rounds(
        times.durations_s,
        # gb_per_s from this is the algorithm bandwidth: size bytes per collective's time.
        work=Work(bytes_moved=size, precision=case.dtype),
        gpu=times.gpu,
        suite=suite_of(case),
        backend=backend,
        world_size=world_size,
        size_bytes=size,
        dtype=str(case.torch_dtype).removeprefix("torch."),
        algbw_gbps=algbw,
        busbw_gbps=bus_bandwidth_gbps(algbw, case.collective, world_size),
        collective=case.collective,
        placement=case.placement,
        wrong_elements=times.wrong_elements,
    )
    if times.wrong_elements:
        info["first_wrong"] = times.first_wrong
        pytest.fail(
            f"{what}: {times.wrong_elements} wrong elements over all ranks after one collective of known "
            f"values (perf/cases/collectives.py), the first at {times.first_wrong}; its times are recorded"
        )
    return info
