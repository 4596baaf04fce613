"""The rank launcher: results in rank order, a failing rank's error within the timeout, no process left."""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

from parallel.launch import RankFailed, RanksTimedOut, check_world, run_ranks


def _sum_of_ranks(rank: int, world_size: int, offset: int) -> tuple[int, float, int]:
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    return rank + offset, total.item(), os.getpid()


def _rank_one_raises(rank: int, world_size: int) -> None:
    if rank == 1:
        raise ArithmeticError("rank one gives up")
    dist.barrier()  # rank 0 waits here for a rank that never comes


def _sleeps(rank: int, world_size: int) -> None:
    time.sleep(600)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_results_in_rank_order(world_size):
    results = run_ranks(_sum_of_ranks, world_size, args=(10,), timeout_s=60)
    assert [r[0] for r in results] == [10 + rank for rank in range(world_size)]
    assert {r[1] for r in results} == {float(sum(range(world_size)))}
    assert not any(_alive(r[2]) for r in results)


def test_a_failing_rank_fails_the_run_with_its_error_and_leaves_nothing():
    start = time.monotonic()
    with pytest.raises(RankFailed, match=r"rank 1 raised:(.|\n)*ArithmeticError: rank one gives up") as err:
        run_ranks(_rank_one_raises, 2, timeout_s=60)
    assert err.value.rank == 1
    assert time.monotonic() - start < 60
    assert not [p for p in torch.multiprocessing.active_children() if p.name.startswith("rank")]


def test_a_hanging_run_is_terminated_after_the_timeout():
    start = time.monotonic()
    with pytest.raises(RanksTimedOut, match=r"ranks \[0, 1\] of 2 still running after 3 s"):
        run_ranks(_sleeps, 2, timeout_s=3)
    assert time.monotonic() - start < 3 + 15
    assert not [p for p in torch.multiprocessing.active_children() if p.name.startswith("rank")]


@pytest.mark.parametrize(
    ("world_size", "backend", "message"),
    [
        (2, "mpi", "backend 'mpi' is not supported; accepted: gloo, nccl"),
        (0, "gloo", "world_size must be an int >= 1; got 0"),
        (2.0, "gloo", "world_size must be an int >= 1; got 2.0"),
    ],
)
def test_bad_world(world_size, backend, message):
    with pytest.raises(ValueError, match=message):
        check_world(world_size, backend)


@pytest.mark.skipif(torch.cuda.device_count() >= 64, reason="a machine with 64 GPUs can run this")
def test_nccl_needs_a_gpu_per_rank():
    with pytest.raises(ValueError, match="with nccl needs 64 GPUs"):
        run_ranks(_sum_of_ranks, 64, backend="nccl", args=(0,))


def _tensors(rank: int, world_size: int) -> dict:
    return {"rank": torch.full((3,), float(rank)), "many": [torch.arange(4) * rank for _ in range(50)]}


def test_cpu_tensors_come_back_by_value():
    results = run_ranks(_tensors, 2, timeout_s=60)
    assert [r["rank"].tolist() for r in results] == [[0.0] * 3, [1.0] * 3]
    assert results[1]["many"][49].tolist() == [0, 1, 2, 3]


def _environment(rank: int, world_size: int, names: tuple[str, ...]) -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in names}


def test_ranks_see_the_env_given_set_and_removed_and_this_process_keeps_its_own(monkeypatch):
    monkeypatch.setenv("PERF_TEST_REMOVED", "parent")
    monkeypatch.setenv("PERF_TEST_KEPT", "parent")
    monkeypatch.setenv("PERF_TEST_REPLACED", "parent")
    monkeypatch.delenv("PERF_TEST_SET", raising=False)
    names = ("PERF_TEST_SET", "PERF_TEST_REMOVED", "PERF_TEST_KEPT", "PERF_TEST_REPLACED", "WORLD_SIZE")
    env = {
        "PERF_TEST_SET": "rank",
        "PERF_TEST_REMOVED": None,
        "PERF_TEST_REPLACED": "rank",
        "WORLD_SIZE": "9",
    }
    results = run_ranks(_environment, 2, args=(names,), env=env, timeout_s=60)
    expected = {
        "PERF_TEST_SET": "rank",
        "PERF_TEST_REMOVED": None,
        "PERF_TEST_KEPT": "parent",  # inherited as before
        "PERF_TEST_REPLACED": "rank",
        "WORLD_SIZE": "2",  # the group's own variables are set after `env`
    }
    assert results == [expected, expected]
    assert "PERF_TEST_SET" not in os.environ
    assert os.environ["PERF_TEST_REMOVED"] == os.environ["PERF_TEST_REPLACED"] == "parent"


def test_an_env_value_that_is_not_a_string_fails_before_any_rank_starts():
    with pytest.raises(ValueError, match=r"env: names and values must be str .*\{'PERF_TEST_SET': 1\}"):
        run_ranks(_environment, 1, args=((),), env={"PERF_TEST_SET": 1}, timeout_s=60)
    assert not [p for p in torch.multiprocessing.active_children() if p.name.startswith("rank")]
