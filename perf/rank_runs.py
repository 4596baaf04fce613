"""One spawned run of ranks per configuration, shared by the benchmarks that record its results.

Starting ranks costs seconds (xl: minutes), so the first benchmark of a configuration measures every
case in one run and the others read its results. A run that failed is remembered too: the first
benchmark raises its error, the later ones fail with it instead of starting the ranks again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from parallel.launch import RankFailed, RanksTimedOut, run_ranks

_RUNS: dict[tuple, Any] = {}


def launched_world_size() -> int | None:
    """The launcher's world size when this process is one of its ranks; None when the suite spawns
    its own ranks (as it always does so far)."""
    return None


def nccl_unavailable(world_size: int) -> str | None:
    """Why NCCL cannot run `world_size` spawned ranks here (a GPU each), or None."""
    gpus = torch.cuda.device_count()
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
    """Rank 0's result of `run_ranks(measure, world_size, ...)`, run once per `key`.

    Every rank returns the same gathered figures, so rank 0's stand for the run.
    """
    if key not in _RUNS:
        try:
            per_rank = run_ranks(measure, world_size, backend=backend, args=args, timeout_s=timeout_s)
        except (RankFailed, RanksTimedOut) as err:
            _RUNS[key] = err
            raise
        _RUNS[key] = per_rank[0]
    outcome = _RUNS[key]
    if isinstance(outcome, (RankFailed, RanksTimedOut)):
        pytest.fail(f"the run measuring {what} failed:\n{outcome}")
    return outcome
