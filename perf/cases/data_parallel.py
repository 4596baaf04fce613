"""The data-parallel suites' cases by name: the variants a training step is averaged by, the optimizer
kinds of the memory comparison, and the suites their results record (perf/workloads/dp_variants.py
builds each variant's step)."""

from __future__ import annotations

# What the benchmarks pass to the harness as `suite`; the tables and the report recognize them by it.
SUITE = "data_parallel"
SHARDED_SUITE = "sharded_optimizer"
# One GPU alone, the wrappers of parallel/ddp.py, torch's DistributedDataParallel and FSDP2; "bucketed"
# (DDPBucketed) runs once per bucket size.
VARIANTS = ("single", "naive", "flat", "individual", "torch_ddp", "fsdp2")
BUCKETED = "bucketed"
# AdamW whole in every rank, and ShardedOptimizer's AdamW with its state split across the ranks.
OPTIMIZER_KINDS = ("adamw", "sharded_adamw")
