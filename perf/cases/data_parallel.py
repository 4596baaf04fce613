"""The data-parallel suites' cases by name: the variants a training step is averaged by, the optimizer
kinds of the memory comparison, and the suites their results record (perf/workloads/data_parallel_steps.py
builds each variant's step)."""

from __future__ import annotations

from perf.cases.declare import Axis, Derived, Suite, cell

# What the benchmarks pass to the harness as `suite`; the tables and the report recognize them by it.
SUITE = "data_parallel"
SHARDED_SUITE = "sharded_optimizer"
# One GPU alone, the wrappers of parallel/ddp.py, torch's DistributedDataParallel and FSDP2; "bucketed"
# (DDPBucketed) runs once per bucket size.
VARIANTS = ("single", "naive", "flat", "individual", "torch_ddp", "fsdp2")
BUCKETED = "bucketed"
# AdamW whole in every rank, and ShardedOptimizer's AdamW with its state split across the ranks.
OPTIMIZER_KINDS = ("adamw", "sharded_adamw")
# The world size every data-parallel id had before the suite ran at several: left out of ids, so the
# stored two-GPU results keep their names.
PAIR = 2


def dp_world_sizes(tier) -> tuple[int, ...]:
    """The data-parallel runs' rank counts: the collectives' world sizes (--world-sizes; under a launcher
    its world alone)."""
    return tuple(tier.world_sizes)


SUITES = (
    # Data-parallel training (perf/test_data_parallel.py): the preset, the world sizes (the collectives';
    # 2 named in no id) and the bucket sizes of DDPBucketed.
    Suite(
        "data_parallel",
        axes=(
            Axis("dp_presets", values={"cpu": ("tiny",)}, default=("xl",), set_by="presets"),
            Derived("dp_world_sizes", dp_world_sizes, id_prefix="world", unnamed=PAIR),
            Axis(
                "bucket_sizes_mb",
                id_prefix="bucket",
                values={"cpu": (1.0,), "pr": ()},
                default=(1.0, 10.0, 100.0, 1000.0),
                help="comma-separated DDPBucketed bucket sizes in MB, e.g. 1,10,100",
                read="floats",
            ),
        ),
        # Where two GPUs are visible: xl with torch's DDP and FSDP2, and the sharded optimizer's memory.
        cells={
            "pr": (
                cell("test_data_parallel.py::test_data_parallel_step", variant=("torch_ddp", "fsdp2")),
                cell("test_data_parallel.py::test_sharded_optimizer_memory"),
            )
        },
    ),
)
