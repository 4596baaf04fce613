"""Bandwidth of the collectives of sharded training beside all-reduce (perf/test_allreduce.py):
all-gather, reduce-scatter, broadcast and all-to-all, gloo on CPU tensors, NCCL with one GPU per rank.

Parametrized by the tier (perf/tiers.py): the case (collective, dtype, placement; only the placements
torch offers), backend, world size and size, e.g.
`test_collective[all_gather-bf16-out_of_place-nccl-world2-1GiB]`. Sizes, bandwidths and the
wrong-element check are defined in perf/cases/collectives.py; one run of ranks per backend and world
size measures every case (perf/workloads/collective_runs.py).
"""

from __future__ import annotations

import pytest

from perf.cases.collectives import CollectiveCase
from perf.tiers import Tier
from perf.workloads.collective_runs import bench_collective

# Measured in every rank of a process group: spawned here, or the launcher's
# (perf/workloads/launched_session.py).
pytestmark = pytest.mark.distributed


def test_collective(
    bench,
    tier: Tier,
    collective_case: CollectiveCase,
    collective_backend: str,
    world_size: int,
    collective_size: int,
):
    bench_collective(bench, tier, collective_case, collective_backend, world_size, collective_size)
