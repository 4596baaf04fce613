"""Run a function on several ranks, one process each, in one process group, and never hang.

`run_ranks(fn, world_size, backend=...)` returns the ranks' return values in rank order. A rank that
raises ends the run at once (`RankFailed`, with its traceback; the others are terminated), and so does
`timeout_s` (`RanksTimedOut` names the ranks that had not finished): no process outlives the call. `fn`
must be a module-level function (it is pickled); `env` sets variables in every rank before torch reads
them (PYTORCH_CUDA_ALLOC_CONF), leaving this process's environment alone.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import pickle
import queue
import socket
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BACKENDS = ("gloo", "nccl")
# Terminated ranks get this long to exit before they are killed.
_TERMINATE_GRACE_S = 5.0
# After a rank's failure, how long to wait for the others' reports to tell which one came first.
_PEER_FAILURE_WAIT_S = 2.0


class RankFailed(RuntimeError):
    """A rank raised; the message holds its traceback."""

    def __init__(self, rank: int, formatted_traceback: str, what: str = "raised"):
        super().__init__(f"rank {rank} {what}:\n{formatted_traceback}")
        self.rank = rank


class RanksTimedOut(RuntimeError):
    """Ranks were still running when the time ran out; all were terminated."""


def free_port() -> int:
    """A TCP port free on this host now. Another process may take it before the group binds it;
    run_ranks then fails with the rendezvous error rather than hanging."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_world(world_size: int, backend: str) -> None:
    """ValueError naming what is wrong: the backend, the size, or too few GPUs for NCCL."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not supported; accepted: {', '.join(BACKENDS)}")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1; got {world_size!r}")
    if backend == "nccl":
        gpus = torch.cuda.device_count()
        if world_size > gpus:
            raise ValueError(f"world_size {world_size} with nccl needs {world_size} GPUs; {gpus} visible")


def run_ranks(
    fn: Callable[..., Any],
    world_size: int,
    *,
    backend: str = "gloo",
    args: tuple = (),
    timeout_s: float = 60.0,
    env: Mapping[str, str | None] | None = None,
) -> list[Any]:
    """fn(rank, world_size, *args) on every rank; their return values in rank order.

    With nccl, rank r uses cuda:r (set as its current device before fn runs). `env`: variables set in
    every rank, those given None removed; the group's own (MASTER_ADDR, MASTER_PORT, RANK,
    WORLD_SIZE) are set after them.
    """
    check_world(world_size, backend)
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0; got {timeout_s!r}")
    env = dict(env or {})
    bad = {k: v for k, v in env.items() if not isinstance(k, str) or not isinstance(v, str | None)}
    if bad:
        raise ValueError(f"env: names and values must be str (None removes a variable); got {bad!r}")
    context = mp.get_context("spawn")  # fork would copy an initialized CUDA context
    results = context.Queue()
    port = free_port()
    processes = [
        context.Process(
            target=_rank_main,
            args=(fn, rank, world_size, backend, port, args, timeout_s, results, env),
            name=f"rank{rank}",
        )
        for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    try:
        return _collect(processes, results, timeout_s)
    finally:
        _stop(processes)
        results.close()


def _collect(processes: list, results, timeout_s: float) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    returned: dict[int, Any] = {}
    while len(returned) < len(processes):
        try:
            rank, ok, value = results.get(timeout=0.1)
        except queue.Empty:
            if time.monotonic() > deadline:
                pending = sorted(set(range(len(processes))) - set(returned))
                raise RanksTimedOut(
                    f"ranks {pending} of {len(processes)} still running after {timeout_s:.0f} s; "
                    "all terminated"
                ) from None
            dead = [p for p in processes if p.exitcode not in (None, 0)]
            if dead and results.empty():
                # Killed without reporting (out of memory, a signal): nothing more will come from it.
                rank = processes.index(dead[0])
                message = f"its process exited with code {dead[0].exitcode} without a result"
                raise RankFailed(rank, message, what="ended") from None
            continue
        if not ok:
            raise _first_failure(rank, value, results)
        returned[rank] = pickle.loads(value)  # sent by value: see _rank_main
    return [returned[rank] for rank in range(len(processes))]


def _first_failure(rank: int, failure: tuple[float, str], results) -> RankFailed:
    """The failure that came first: when one rank raises, its peers fail in their next collective
    (gloo: "Connection closed by peer"), and their reports can arrive before its own."""
    failures = {rank: failure}
    wait_until = time.monotonic() + _PEER_FAILURE_WAIT_S
    while time.monotonic() < wait_until:
        try:
            other, ok, value = results.get(timeout=0.1)
        except queue.Empty:
            continue
        if not ok:
            failures[other] = value
    first = min(failures, key=lambda r: failures[r][0])
    error = RankFailed(first, failures[first][1])
    later = sorted(set(failures) - {first})
    if later:
        error.add_note(f"ranks {later} failed after it")
    return error


def _stop(processes: list) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + _TERMINATE_GRACE_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


def _rank_main(
    fn,
    rank: int,
    world_size: int,
    backend: str,
    port: int,
    args: tuple,
    timeout_s: float,
    results,
    env: dict[str, str | None],
) -> None:
    # First: a setting read once per process (the CUDA allocator's) must be in place before any use.
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size)
    )
    failure = None
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(
            backend,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
            device_id=torch.device("cuda", rank) if backend == "nccl" else None,
        )
        try:
            value = fn(rank, world_size, *args)
        except BaseException:
            # Timed before the group is torn down: tearing it down fails the peers' collectives.
            failure = (time.time(), traceback.format_exc())
        dist.destroy_process_group()
    except BaseException:
        failure = failure or (time.time(), traceback.format_exc())
    if failure is not None:
        results.put((rank, False, failure))
    else:
        # By value: torch.multiprocessing's queue shares a CPU tensor through a file descriptor
        # that closes when this process exits, before the parent has read it.
        results.put((rank, True, pickle.dumps(value)))
