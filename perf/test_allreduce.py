"""All-reduce bandwidth: gloo on CPU tensors, NCCL with one GPU per rank.

Parametrized by the tier (perf/tiers.py): dtype, backend, world size and message bytes. fp32 is left
out of the ids (its axis's `unnamed`, perf/cases/collectives.py): those results keep the names their baselines
have, e.g. `test_allreduce[nccl-world2-1MiB]`, beside `test_allreduce[bf16-nccl-world2-1MiB]`.
All-reduce exists in place only. One run of ranks per backend and world size measures every
collective of the tier, this file's and perf/test_collectives.py's (perf/workloads/collective_runs.py);
the end of the run tabulates them (perf/tables/collectives.py).
"""

from __future__ import annotations

import pytest

from perf.cases.collectives import CollectiveCase
from perf.tiers import Tier
from perf.workloads.collective_runs import bench_collective

# Measured in every rank of a process group: spawned here, or the launcher's
# (perf/workloads/launched_session.py).
pytestmark = pytest.mark.distributed


def test_allreduce(
    bench, tier: Tier, allreduce_dtype: str, collective_backend: str, world_size: int, collective_size: int
):
    case = CollectiveCase("all_reduce", allreduce_dtype, "in_place")
    bench_collective(bench, tier, case, collective_backend, world_size, collective_size)
