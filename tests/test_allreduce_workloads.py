"""The all-reduce measurement: iteration counts, bandwidth formulas, the sum check, and one gloo run."""

import pytest
import torch
import torch.distributed as dist

from parallel.launch import run_ranks
from perf.allreduce_workloads import (
    AllReduceTimes,
    algorithm_bandwidth_gbps,
    bus_bandwidth_gbps,
    check_allreduced,
    element_count,
    measure_allreduce,
    run_timeout_s,
    timed_iterations,
)


# --------------------------------------------------------------------------- sizes and counts
@pytest.mark.parametrize(("size", "elements"), [(8, 2), (4100, 1025), (2**20, 2**18), (2**33, 2**31)])
def test_element_count(size, elements):
    assert element_count(size) == elements


@pytest.mark.parametrize("size", [0, -4, 6, 4.0, True])
def test_sizes_must_be_whole_fp32_elements(size):
    with pytest.raises(ValueError, match=r"size_bytes: a positive multiple of 4 bytes .* is accepted"):
        element_count(size)


@pytest.mark.parametrize(
    ("seconds", "budget", "iterations"),
    [
        (0.01, 1.0, 100),  # the budget filled
        (0.5, 1.0, 5),  # long iterations: the minimum
        (1e-5, 1.0, 200),  # short iterations: the maximum
        (0.01, 0.0, 5),  # no budget (pytest-benchmark's --benchmark-max-time 0): the minimum
    ],
)
def test_timed_iterations_fill_the_budget_within_bounds(seconds, budget, iterations):
    assert timed_iterations(seconds, budget, minimum=5, maximum=200) == iterations


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0.0, 1.0, 5, 200), "seconds_per_iteration: a positive finite number is accepted; got 0.0"),
        ((float("nan"), 1.0, 5, 200), "seconds_per_iteration: a positive finite number is accepted"),
        ((0.1, -1.0, 5, 200), "budget_s: a finite number >= 0 is accepted; got -1.0"),
        ((0.1, 1.0, 0, 200), r"minimum, maximum: ints with 1 <= minimum <= maximum are accepted; got 0, 200"),
        ((0.1, 1.0, 10, 5), r"minimum, maximum: ints with 1 <= minimum <= maximum are accepted; got 10, 5"),
    ],
)
def test_timed_iterations_reject_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        timed_iterations(*args)


# --------------------------------------------------------------------------- bandwidths
def test_algorithm_bandwidth_is_bytes_per_second_in_gb():
    assert algorithm_bandwidth_gbps(2 * 10**9, 0.5) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="seconds: a positive number is accepted; got 0"):
        algorithm_bandwidth_gbps(8, 0)


@pytest.mark.parametrize(("world_size", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_bus_bandwidth_is_algbw_times_two_n_minus_one_over_n(world_size, factor):
    assert bus_bandwidth_gbps(100.0, world_size) == pytest.approx(100.0 * factor)


@pytest.mark.parametrize("world_size", [0, 2.0, True])
def test_bus_bandwidth_rejects_bad_world_sizes(world_size):
    with pytest.raises(ValueError, match="world_size: an int >= 1 is accepted"):
        bus_bandwidth_gbps(1.0, world_size)


def test_run_timeout_grows_with_sizes_and_is_slower_for_gloo():
    small = run_timeout_s([2**20], 1.0, "gloo", 5)
    large = run_timeout_s([2**20, 2**30], 1.0, "gloo", 5)
    assert large > small
    # 9 all-reduces (3 warm-up, 5 timed, 1 check) of 1 GiB at gloo's slowest 0.1 GB/s take 97 s.
    assert large - small >= 9 * 2**30 / 1e8
    assert run_timeout_s([2**30], 1.0, "nccl", 5) < run_timeout_s([2**30], 1.0, "gloo", 5)
    with pytest.raises(ValueError, match="backend: unknown value 'mpi'; accepted: gloo, nccl"):
        run_timeout_s([8], 1.0, "mpi", 5)
    with pytest.raises(ValueError, match="size_bytes"):
        run_timeout_s([6], 1.0, "gloo", 5)


# --------------------------------------------------------------------------- the sum check
def test_check_accepts_the_sum_of_rank_plus_one():
    check_allreduced(torch.full((1025,), 1.0 + 2 + 3 + 4), world_size=4)


def test_check_names_the_values_found():
    summed = torch.full((1025,), 3.0)
    summed[700] = 2.0  # one rank's contribution missing from one element
    with pytest.raises(RuntimeError, match=r"gave values from 2.0 to 3.0; every element should be 3.0"):
        check_allreduced(summed, world_size=2)


# --------------------------------------------------------------------------- a gloo run
# An odd element count beside a power of two; 1 PiB fits no host and must be skipped, alone.
SIZES = (8, 4100, 2**50)


def test_gloo_run_returns_the_slowest_ranks_times_and_skips_what_does_not_fit():
    per_rank = run_ranks(measure_allreduce, 2, args=(SIZES, 0.02, 5, 12), timeout_s=60)
    assert per_rank[0] == per_rank[1]  # the times were gathered: every rank holds the same
    results = per_rank[0]
    assert list(results) == list(SIZES)
    for size in SIZES[:2]:
        times = results[size]
        assert isinstance(times, AllReduceTimes) and times.skipped is None
        assert 5 <= len(times.durations_s) <= 12
        assert all(0 < d < 10 for d in times.durations_s)
    huge = results[2**50]
    assert huge.durations_s == ()
    assert huge.skipped.startswith("rank 0: 2 ranks' tensors need 2097152.0 GiB of host memory")


def test_one_rank_in_this_process_marks_each_sizes_timed_loop():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            results = measure_allreduce(0, 1, (8, 4 * 2**10), 0.0, 2, 2)
    finally:
        dist.destroy_process_group()
    assert [len(results[size].durations_s) for size in (8, 4 * 2**10)] == [2, 2]
    names = {event.name for event in profile.events()}
    assert {"allreduce 8B", "allreduce 4KiB"} <= names
