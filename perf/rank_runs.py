"""One spawned run of ranks per configuration, shared by the benchmarks that record its results.

Starting ranks costs seconds (xl: minutes), so the first benchmark of a configuration measures every
case in one run and the others read its results. A run that failed is remembered too: the first
benchmark raises its error, the later ones fail with it instead of starting the ranks again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from parallel.launch import RankFailed, RanksTimedOut, run_ranks

_RUNS: dict[tuple, Any] = {}


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
