"""The collectives' measurement: iteration counts, the run's time limit, a backend that rejects a case,
and runs of every case in this process (one rank) and in a spawned gloo group of 3 ranks."""

import dataclasses

import pytest
import torch
import torch.distributed as dist

from parallel.launch import run_ranks
from perf.cases import collectives as collective_cases
from perf.cases.collectives import COLLECTIVES, CollectiveCase, cases
from perf.workloads.collective_ranks import (
    CollectiveTimes,
    _wrong_elements,
    device_for,
    measure_collectives,
    run_timeout_s,
)
from perf.workloads.rank_timing import timed_iterations

EVERY_CASE = cases(tuple(COLLECTIVES), ("fp32", "bf16"), ("in_place", "out_of_place"))
ALL_REDUCE = CollectiveCase("all_reduce", "fp32", "in_place")


# --------------------------------------------------------------------------- counts and limits
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


def test_run_timeout_grows_with_cases_and_sizes_and_is_slower_for_gloo():
    one = run_timeout_s([(ALL_REDUCE, (2**20,))], 1.0, "gloo", 5)
    larger = run_timeout_s([(ALL_REDUCE, (2**20, 2**30))], 1.0, "gloo", 5)
    # 9 collectives (3 warm-up, 5 timed, 1 check) of 1 GiB at gloo's slowest 0.05 GB/s take 193 s.
    assert larger - one >= 9 * 2**30 / 5e7
    every = run_timeout_s([(case, (2**20, 2**30)) for case in EVERY_CASE], 1.0, "gloo", 5)
    assert every - larger >= 13 * 9 * 2**30 / 5e7
    assert run_timeout_s([(ALL_REDUCE, (2**30,))], 1.0, "nccl", 5) < larger
    with pytest.raises(ValueError, match="backend: unknown value 'mpi'; accepted: gloo, nccl"):
        run_timeout_s([(ALL_REDUCE, (8,))], 1.0, "mpi", 5)


def test_the_device_follows_the_backend_named():
    assert device_for("gloo") == torch.device("cpu")
    with pytest.raises(ValueError, match="backend: unknown value 'mpi'; accepted: gloo, nccl"):
        device_for("mpi")


# --------------------------------------------------------------------------- one rank in this process
@pytest.fixture
def one_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_one_rank_runs_every_case_and_marks_each_timed_loop(one_rank):
    plan = [(case, (8, 4 * 2**10)) for case in EVERY_CASE]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        results = measure_collectives(0, 1, "gloo", plan, 0.0, 2, 2)
    assert list(results) == [(case, size) for case, sizes in plan for size in sizes]
    for times in results.values():
        assert times.skipped is None and len(times.durations_s) == 2 and times.wrong_elements == 0
    names = {event.name for event in profile.events()}
    assert {"all_reduce fp32 in_place 8B", "all_gather bf16 out_of_place 4KiB"} <= names


def test_a_rejected_case_is_skipped_naming_backend_and_collective(one_rank, monkeypatch):
    def unsupported(*args, **kwargs):
        raise RuntimeError("ProcessGroupGloo does not support alltoall_base\nException raised from ...")

    monkeypatch.setattr(dist, "all_to_all_single", unsupported)
    rejected = CollectiveCase("all_to_all", "bf16", "out_of_place")
    results = measure_collectives(0, 1, "gloo", [(rejected, (8, 16)), (ALL_REDUCE, (8,))], 0.0, 1, 1)
    reason = (
        "rank 0: gloo does not run all_to_all on bf16 out-of-place: RuntimeError: ProcessGroupGloo does not "
        "support alltoall_base"
    )
    assert results[rejected, 8] == results[rejected, 16] == CollectiveTimes(skipped=reason)
    assert results[ALL_REDUCE, 8].skipped is None


# --------------------------------------------------------------------------- a gloo group
def test_gloo_run_checks_every_case_and_skips_what_does_not_fit():
    # 3 ranks: chunks of an odd count (4098 / 3 = 1366 elements); 1 PiB fits no host and is skipped alone.
    plan = [(case, (12, 4098 * case.torch_dtype.itemsize)) for case in EVERY_CASE]
    plan.append((ALL_REDUCE, (2**50,)))
    per_rank = run_ranks(measure_collectives, 3, args=("gloo", plan, 0.0, 1, 3), timeout_s=120)
    assert per_rank[0] == per_rank[1] == per_rank[2]  # gathered: every rank holds the same
    results = per_rank[0]
    for (case, size), times in results.items():
        if size == 2**50:
            assert times.durations_s == () and times.wrong_elements is None
            assert times.skipped.startswith("rank 0: 3 ranks' tensors need 3145728.0 GiB of host memory")
            continue
        assert times.skipped is None, (case, size)
        assert times.wrong_elements == 0, (case, size)
        assert len(times.durations_s) == 1 and 0 < times.durations_s[0] < 10
        assert times.gpu == "gloo runs collectives on CPU tensors: there is no GPU work to measure"


def test_a_collective_that_gives_wrong_values_is_counted(one_rank, monkeypatch):
    monkeypatch.setattr(dist, "broadcast", lambda tensor, src: tensor.add_(1))  # every element off by one
    broadcast = CollectiveCase("broadcast", "fp32", "in_place")
    results = measure_collectives(0, 1, "gloo", [(broadcast, (8, 4100))], 0.0, 1, 1)
    assert [results[broadcast, size].wrong_elements for size in (8, 4100)] == [2, 1025]
    # Rank 0 broadcasts 1s (perf/cases/collectives.py): each element reads 2.
    assert results[broadcast, 4100].first_wrong == "rank 0, element 0: 2 where 1 was expected"


def test_the_first_wrong_element_of_a_group_is_the_lowest_ranks():
    # Rank 1 of 3 gets one wrong element, at index 5 of an all-reduce's result; ranks 0 and 2 none.
    results = run_ranks(_one_wrong_on_rank_1, 3, args=(), timeout_s=120)
    assert results[0] == results[1] == results[2] == (1, "rank 1, element 5: 0 where 6 was expected")


def _one_wrong_on_rank_1(rank: int, world_size: int):
    """In a rank of a gloo group: an all-reduce of 12 elements whose result rank 1 spoils."""
    spec = collective_cases.COLLECTIVES["all_reduce"]

    def off_on_rank_1(source, result):
        spec.call(source, result)
        if rank == 1:
            result[5] = 0

    collective_cases.COLLECTIVES["all_reduce"] = dataclasses.replace(spec, call=off_on_rank_1)
    source = result = torch.zeros(12)  # in place: one tensor
    return _wrong_elements(CollectiveCase("all_reduce", "fp32", "in_place"), source, result, rank, world_size)
