"""Data-parallel training at each world size of the run (the collectives': --world-sizes, or the tier's;
under a launcher, its world): step time, peak memory and training state per rank of each wrapper
against one GPU alone, torch DDP and torch's FSDP2, and the optimizer memory that sharding AdamW's
state saves.

Parametrized by the tier (perf/tiers.py): the preset, the world sizes and DDPBucketed's bucket sizes;
the variants and optimizer kinds here. Starting the ranks and building the model cost seconds (minutes
at xl for every variant), so the first test of a preset and world size measures every case of its
suite in one run of ranks (perf/workloads/data_parallel_ranks.py); each test then hands its own case's
steps to pytest-benchmark as rounds. The end of the run tabulates them (perf/tables/data_parallel.py).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from perf.cases.data_parallel import BUCKETED, OPTIMIZER_KINDS, SHARDED_SUITE, SUITE, VARIANTS
from perf.harness import TimingPolicy, Work
from perf.tiers import Tier
from perf.workloads.data_parallel_ranks import (
    MAX_TIMED_STEPS,
    TORCH_DDP_BUCKET_MB,
    DPCase,
    OptimizerMemory,
    StepTimes,
    backend_for,
    cases_for,
    comparison_figures,
    dp_config,
    measure_data_parallel,
    measure_optimizer_memory,
    run_timeout_s,
    too_few_ranks,
)
from perf.workloads.rank_runs import launched_world_size, measured_once

# Measured in every rank of a process group: spawned here, or the launcher's
# (perf/workloads/launched_session.py).
pytestmark = pytest.mark.distributed

# Timed steps per optimizer in the memory run: a timing for the harness, not the figure it is for.
MEMORY_TIMED_STEPS = 5


def _backend(world_size: int) -> str:
    """The backend of a run of `world_size` ranks, or a skip saying why there is none."""
    reason = too_few_ranks(world_size)
    if reason is not None:
        pytest.skip(reason)
    gpus = torch.cuda.device_count()
    backend = backend_for(gpus, world_size, launched=launched_world_size() is not None)
    if backend is None:
        pytest.skip(f"data parallel on GPUs needs {world_size}; {gpus} visible")
    return backend


def _measured(
    key: tuple,
    world_size: int,
    backend: str,
    measure: Callable[..., dict],
    args: tuple,
    timeout_s: float,
    what: str,
) -> dict:
    # Every measure function takes the backend first: it, not the process group's, decides the device.
    return measured_once(
        (*key, world_size),
        measure,
        world_size,
        backend=backend,
        args=(backend, *args),
        timeout_s=timeout_s,
        what=what,
    )


def _steps(
    world_size: int, backend: str, preset: str, tier: Tier, policy: TimingPolicy
) -> dict[DPCase, StepTimes]:
    cases = cases_for(tier.bucket_sizes_mb)
    max_steps = max(policy.min_rounds, MAX_TIMED_STEPS)
    key = (SUITE, backend, preset, cases, policy.budget_s, policy.min_rounds, max_steps)
    return _measured(
        key,
        world_size,
        backend,
        measure_data_parallel,
        (preset, cases, policy.budget_s, policy.min_rounds, max_steps),
        run_timeout_s(len(cases), policy.budget_s, policy.min_rounds),
        f"every data-parallel variant of {preset} with {backend}",
    )


def _setup(preset: str, world_size: int, backend: str) -> dict:
    """bench.record_rounds' work and the fields naming the setup: tokens/s is the global rate (every
    rank's batch counts)."""
    config = dp_config(preset, backend)
    tokens = world_size * config.batch_size * config.context_length
    fields = dict(preset=preset, world_size=world_size, backend=backend, batch_per_rank=config.batch_size)
    return dict(work=Work(tokens=tokens), **fields, context=config.context_length)


def _record_step(bench, tier: Tier, preset: str, world_size: int, case: DPCase) -> None:
    backend = _backend(world_size)
    dp_config(preset, backend)  # an unknown preset fails here, before any rank starts
    # Every variant of a preset side by side, the bucket sizes among them, "single" the reference.
    bench.benchmark.group = f"data parallel {preset} fp32 world{world_size}"
    times = _steps(world_size, backend, preset, tier, bench.policy)
    measured = times[case]
    assert len(measured.step_s) >= bench.policy.min_rounds and min(measured.step_s) > 0
    # Each step's time in finish_gradient_synchronization lies inside the step, on every rank.
    assert all(0 <= sync <= step for sync, step in zip(measured.sync_s, measured.step_s, strict=True))
    assert len(measured.state_bytes_per_rank) == world_size and min(measured.state_bytes_per_rank) > 0
    bench.record_rounds(
        measured.step_s,
        **_setup(preset, world_size, backend),
        gpu=measured.gpu,
        suite=SUITE,
        variant=case.variant,
        bucket_size_mb=TORCH_DDP_BUCKET_MB if case.variant == "torch_ddp" else case.bucket_size_mb,
        # The harness's key for the most allocated during the timed rounds, here the largest rank's.
        peak_memory_bytes=measured.peak_bytes,
        state_bytes_per_rank=list(measured.state_bytes_per_rank),
        **comparison_figures(times, case),
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_data_parallel_step(bench, tier: Tier, dp_preset: str, dp_world_size: int, variant: str):
    """A training step (zero_grad, forward, loss, backward, gradient averaging, AdamW) of `variant` on
    `dp_world_size` ranks; fsdp2's averaging is its reduce-scatters inside backward."""
    _record_step(bench, tier, dp_preset, dp_world_size, DPCase(variant))


def test_data_parallel_bucketed(bench, tier: Tier, dp_preset: str, dp_world_size: int, bucket_size_mb: float):
    """The training step of DDPBucketed with buckets of at most `bucket_size_mb` MiB."""
    _record_step(bench, tier, dp_preset, dp_world_size, DPCase(BUCKETED, bucket_size_mb))


def _memory(world_size: int, backend: str, preset: str) -> dict[str, OptimizerMemory]:
    key = (SHARDED_SUITE, backend, preset, OPTIMIZER_KINDS, MEMORY_TIMED_STEPS)
    return _measured(
        key,
        world_size,
        backend,
        measure_optimizer_memory,
        (preset, OPTIMIZER_KINDS, MEMORY_TIMED_STEPS),
        # No budget: a fixed number of steps, the first of them in the place of a warm-up.
        run_timeout_s(len(OPTIMIZER_KINDS), 0.0, MEMORY_TIMED_STEPS),
        f"the optimizer memory of {preset} with {backend}",
    )


@pytest.mark.parametrize("optimizer_kind", OPTIMIZER_KINDS)
def test_sharded_optimizer_memory(bench, tier: Tier, dp_preset: str, dp_world_size: int, optimizer_kind: str):
    """Memory per rank with AdamW over every parameter, and with its state sharded over the ranks.

    after_build: weights; before_step: and gradients; after_step: and AdamW's state, allocated by its
    first step; peak: the most that first training step (forward to optimizer step) had allocated;
    state_bytes_per_rank: parameters, gradients and AdamW's state after the timed steps, as the
    data-parallel step's results count them.
    """
    backend = _backend(dp_world_size)
    bench.benchmark.group = f"sharded optimizer {dp_preset} fp32 world{dp_world_size}"
    memory = _memory(dp_world_size, backend, dp_preset)
    measured, unsharded = memory[optimizer_kind], memory["adamw"]
    assert measured.optimizer_state_bytes > 0
    if optimizer_kind == "sharded_adamw":
        # Each rank keeps the state of its own parameters only.
        assert measured.optimizer_state_bytes < unsharded.optimizer_state_bytes
    bench.record_rounds(
        measured.step_s,
        **_setup(dp_preset, dp_world_size, backend),
        gpu=measured.gpu,
        suite=SHARDED_SUITE,
        optimizer_kind=optimizer_kind,
        after_build_bytes=measured.after_build_bytes,
        before_step_bytes=measured.before_step_bytes,
        after_step_bytes=measured.after_step_bytes,
        peak_bytes=measured.peak_bytes,
        optimizer_state_bytes=measured.optimizer_state_bytes,
        state_bytes_per_rank=list(measured.state_bytes_per_rank),
        state_vs_adamw=measured.optimizer_state_bytes / unsharded.optimizer_state_bytes,
    )
