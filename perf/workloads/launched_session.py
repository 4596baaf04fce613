"""The benchmark session as one rank of a launcher's job (torchrun, or srun with RANK and WORLD_SIZE).

Every rank runs the same pytest session: the same options, so the same collection in the same order.
The distributed benchmarks (marked `distributed`) measure in this process, in the launcher's process
group, instead of spawning ranks of their own; the world size is the launcher's. Rank 0 alone records
results, stores them, compares them with baselines and prints the tables; the other ranks measure
with it and say little. Benchmarks of one process are skipped under a launcher: every rank would run
them at once on the same node and measure the others' load.
"""

from __future__ import annotations

import pytest
import torch

from parallel.launched import LaunchedGroup, LaunchError, launch_from_environment
from perf.tiers import Tier

DISTRIBUTED_MARK = "distributed"
_GROUP: LaunchedGroup | None = None


def group() -> LaunchedGroup | None:
    """This process's membership of the launcher's group; None when the suite spawns its own ranks."""
    return _GROUP


def join() -> int | None:
    """Join the launcher's process group when this process is one of its ranks: its rank, or None
    without a launcher. UsageError when the launcher's variables are wrong or a node has fewer GPUs than
    ranks for NCCL."""
    global _GROUP
    try:
        launch = launch_from_environment()
        if launch is None:
            return None
        _GROUP = LaunchedGroup.join(launch)
    except LaunchError as err:
        raise pytest.UsageError(f"launcher: {err}") from None
    except RuntimeError as err:  # torch's DistError: the store unreachable, a peer that never came
        raise pytest.UsageError(f"launcher: could not join the process group: {err}") from None
    return launch.rank


def device(requested: str) -> torch.device | None:
    """The device of this rank: cuda:LOCAL_RANK where the node has GPUs (for --device auto or cuda),
    the CPU for --device cpu; None without a launcher."""
    if _GROUP is None:
        return None
    if requested == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    if requested not in ("auto", "cuda"):
        raise pytest.UsageError(
            f"--device {requested}: under a launcher each rank uses cuda:LOCAL_RANK; "
            "accepted: auto, cuda, cpu"
        )
    return torch.device("cuda", _GROUP.launch.local_rank)


def world_sizes(tier: Tier, given: set[str]) -> Tier:
    """Under a launcher the world size is the launcher's: the distributed benchmarks run at it alone
    (`given`: the axes the options set)."""
    if _GROUP is None:
        return tier
    world = _GROUP.launch.world_size
    if "world_sizes" in given and world not in tier.world_sizes:
        raise pytest.UsageError(
            f"--world-sizes {','.join(map(str, tier.world_sizes))}: the launcher started {world} ranks, the "
            "only world size a launched run measures; leave --world-sizes out or include it"
        )
    return tier.with_overrides(world_sizes=(world,))


def skip_single_process(items: list[pytest.Item]) -> None:
    """Under a launcher: skip the benchmarks that run in one process, with the reason."""
    if _GROUP is None:
        return
    skip = pytest.mark.skip(
        reason="one-process benchmark: under a launcher only the distributed benchmarks run (every rank "
        "would run this one at once); run it without torchrun or srun"
    )
    for item in items:
        if "bench" in getattr(item, "fixturenames", ()) and item.get_closest_marker(DISTRIBUTED_MARK) is None:
            item.add_marker(skip)


def records_here() -> bool:
    """Whether this process records the distributed results: rank 0, or the process that spawned them."""
    return _GROUP is None or _GROUP.launch.rank == 0


def machine_info() -> dict | None:
    """The job's shape for the results' machine info: launcher, world size, nodes, ranks and GPUs per node."""
    if _GROUP is None:
        return None
    return {"launcher": _GROUP.launch.launcher, **_GROUP.topology}


def header() -> str | None:
    if _GROUP is None:
        return None
    shape = machine_info()
    return (
        f"launched by {shape['launcher']}: rank {_GROUP.launch.rank} of {shape['world_size']} on "
        f"{shape['nodes']} node(s), {'/'.join(map(str, shape['ranks_per_node']))} ranks and "
        f"{'/'.join(map(str, shape['gpus_per_node']))} GPUs per node; the distributed benchmarks run in "
        "the launcher's process group, rank 0 records"
    )


def finish() -> None:
    """At the end of the session: the other ranks leave only after rank 0 has stored the results."""
    global _GROUP
    if _GROUP is not None:
        _GROUP.finish()
        _GROUP = None
