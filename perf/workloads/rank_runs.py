"""One run of ranks per configuration, shared by the benchmarks that record its results.

Starting ranks costs seconds (xl: minutes), so the first benchmark of a configuration measures every
case in one run and the others read its results. A run that failed is remembered too: the first
benchmark raises its error, the later ones fail with it instead of starting the ranks again.

Without a launcher the run spawns its ranks here (parallel.launch.run_ranks). Under torchrun or srun
this process is one of the ranks: every rank measures in the launcher's group
(perf/workloads/launched_session.py), and rank 0 records; the others skip their copies of the
benchmarks once they have measured.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from parallel.launch import RankFailed, RanksTimedOut, run_ranks
from parallel.launched import GroupBroken
from perf.workloads import launched_session

_RUNS: dict[tuple, Any] = {}
_FAILURES = (RankFailed, RanksTimedOut, GroupBroken)


def launched_world_size() -> int | None:
    """The launcher's world size when this process is one of its ranks (torchrun, or srun with
    RANK and WORLD_SIZE set); None when the suite spawns its own ranks."""
    group = launched_session.group()
    return group.launch.world_size if group is not None else None


def nccl_unavailable(world_size: int) -> str | None:
    """Why NCCL cannot run `world_size` ranks here, or None: spawned ranks need a GPU each on this
    host; a launcher's ranks were checked against their nodes' GPUs when they joined."""
    gpus = torch.cuda.device_count()
    if launched_session.group() is not None:
        return None if gpus else "nccl needs GPUs; this node has none"
    if world_size > gpus:
        return f"nccl with {world_size} ranks needs {world_size} GPUs; {gpus} visible"
    return None


def measured_once(
    key: tuple,
    measure: Callable[..., Any],
    world_size: int,
    *,
    backend: str,
    args: tuple,
    timeout_s: float,
    what: str,
) -> Any:
    """Rank 0's result of `measure(rank, world_size, *args)` in every rank, run once per `key`.

    Every rank returns the same gathered figures, so rank 0's stand for the run.
    """
    group = launched_session.group()
    if key not in _RUNS:
        try:
            if group is not None:
                _RUNS[key] = group.run(measure, args, timeout_s, what)
            else:
                _RUNS[key] = run_ranks(measure, world_size, backend=backend, args=args, timeout_s=timeout_s)[
                    0
                ]
        except _FAILURES as err:
            _RUNS[key] = err
            raise
    outcome = _RUNS[key]
    if isinstance(outcome, _FAILURES):
        pytest.fail(f"the run measuring {what} failed:\n{outcome}")
    if not launched_session.records_here():
        pytest.skip(f"measured with every rank; rank 0 records it (this is rank {group.launch.rank})")
    return outcome
