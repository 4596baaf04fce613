"""The data-parallel measurement: cases, backend, shapes, time limit, derived figures, optimizer state, and
one short gloo run of steps and optimizer memory on 2 ranks."""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from parallel.launch import run_ranks
from perf.dp_workloads import (
    BATCH_PER_RANK,
    BUILD_S,
    OPTIMIZER_KINDS,
    SLOWEST_STEP_S,
    VARIANTS,
    WARMUP_STEPS,
    WORLD_SIZE,
    DPCase,
    StepTimes,
    backend_for,
    build_adamw,
    cases_for,
    comparison_figures,
    dp_config,
    measure_data_parallel,
    measure_optimizer_memory,
    optimizer_state_bytes,
    run_timeout_s,
)
from perf.workloads import build_model


# --------------------------------------------------------------------------- cases
def test_cases_are_every_variant_then_each_bucket_size():
    cases = cases_for((1.0, 0.25))
    assert [c.label for c in cases] == [*VARIANTS, "bucketed 1MiB", "bucketed 0.25MiB"]
    assert DPCase("bucketed", 0.25) in cases  # frozen: usable as a key of the ranks' results


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("ring",), r"variant: unknown value 'ring'; accepted: single, naive, .*, torch_ddp, bucketed"),
        (("flat", 10.0), r"bucket_size_mb: only the 'bucketed' variant takes one; got 10.0 for 'flat'"),
        (("bucketed",), r"bucket_size_mb must be a finite number > 0 \(MiB\); got None"),
        (("bucketed", 0.0), r"bucket_size_mb must be a finite number > 0 \(MiB\); got 0.0"),
        (("bucketed", float("inf")), r"bucket_size_mb must be a finite number > 0"),
    ],
)
def test_bad_cases_say_what_is_accepted(args, message):
    with pytest.raises(ValueError, match=message):
        DPCase(*args)


# --------------------------------------------------------------------------- backend and shapes
@pytest.mark.parametrize(("gpus", "backend"), [(0, "gloo"), (1, None), (2, "nccl"), (8, "nccl")])
def test_backend_is_nccl_on_two_gpus_gloo_without_any_and_none_with_one(gpus, backend):
    assert backend_for(gpus) == backend


@pytest.mark.parametrize("gpus", [-1, 2.0, True])
def test_backend_rejects_bad_gpu_counts(gpus):
    with pytest.raises(ValueError, match="visible_gpus: an int >= 0 is accepted"):
        backend_for(gpus)


@pytest.mark.parametrize(("backend", "context"), [("nccl", 512), ("gloo", 128)])
def test_each_rank_takes_two_sequences_at_the_backends_context(backend, context):
    config = dp_config("tiny", backend)
    assert (config.name, config.batch_size, config.context_length) == ("tiny", BATCH_PER_RANK, context)


def test_dp_config_rejects_unknown_backends_and_presets():
    with pytest.raises(ValueError, match="backend: unknown value 'mpi'; accepted: nccl, gloo"):
        dp_config("tiny", "mpi")
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        dp_config("huge", "gloo")


# --------------------------------------------------------------------------- time limit
def test_run_timeout_allows_each_case_its_budget_build_and_steps():
    per_case = run_timeout_s(2, 1.0, 5) - run_timeout_s(1, 1.0, 5)
    assert run_timeout_s(8, 1.0, 5) - run_timeout_s(1, 1.0, 5) == pytest.approx(7 * per_case)
    assert run_timeout_s(1, 2.0, 5) - run_timeout_s(1, 1.0, 5) == pytest.approx(3.0)  # 3 x the budget
    assert run_timeout_s(1, 1.0, 6) - run_timeout_s(1, 1.0, 5) == pytest.approx(SLOWEST_STEP_S)
    # An xl case of 2 warm-up and 5 timed steps at the slowest step time, and its build, fit.
    assert per_case >= (WARMUP_STEPS + 5) * SLOWEST_STEP_S + BUILD_S


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 1.0, 5), "case_count: an int >= 1 is accepted; got 0"),
        ((1, -1.0, 5), "budget_s: a finite number >= 0 is accepted; got -1.0"),
        ((1, float("inf"), 5), "budget_s: a finite number >= 0 is accepted; got inf"),
        ((1, 1.0, 0), "min_steps: an int >= 1 is accepted; got 0"),
    ],
)
def test_run_timeout_rejects_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        run_timeout_s(*args)


# --------------------------------------------------------------------------- derived figures
def steps_of(*milliseconds, sync_ms=0.0):
    return StepTimes(tuple(ms / 1e3 for ms in milliseconds), tuple(sync_ms / 1e3 for _ in milliseconds))


def test_comparison_sets_a_case_against_single_and_torch_ddp():
    times = {
        DPCase("single"): steps_of(90.0, 100.0, 400.0),  # an outlier: medians, not means
        DPCase("flat"): steps_of(120.0, 119.0, 121.0, sync_ms=15.0),
        DPCase("torch_ddp"): steps_of(110.0),
    }
    figures = comparison_figures(times, DPCase("flat"))
    assert figures == pytest.approx(
        {
            "sync_wait_ms": 15.0,
            "comm_overhead_ms": 20.0,
            "comm_share": 20.0 / 120.0,
            "vs_torch_ddp": 120 / 110,
        }
    )
    assert comparison_figures(times, DPCase("single"))["comm_overhead_ms"] == 0.0


def test_comparison_without_single_or_torch_ddp_leaves_their_figures_out():
    times = {DPCase("naive"): steps_of(50.0, sync_ms=5.0)}
    assert comparison_figures(times, DPCase("naive")) == {
        "sync_wait_ms": pytest.approx(5.0),
        "comm_overhead_ms": None,
        "comm_share": None,
        "vs_torch_ddp": None,
    }
    with pytest.raises(ValueError, match=r"case: 'flat' is not among the measured \['naive'\]"):
        comparison_figures(times, DPCase("flat"))


# --------------------------------------------------------------------------- optimizers
def test_optimizer_state_is_counted_once_adamw_has_stepped():
    layer = nn.Linear(3, 5)  # 20 parameters in 2 tensors
    optimizer = build_adamw(layer.parameters(), "adamw", torch.device("cpu"))
    assert optimizer.defaults["foreach"] is True
    assert optimizer_state_bytes(optimizer) == 0  # AdamW allocates its state in the first step
    layer(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    moments = 2 * 20 * 4  # exp_avg and exp_avg_sq in fp32
    assert moments < optimizer_state_bytes(optimizer) <= moments + 2 * 8  # and a scalar step per tensor


def test_build_adamw_rejects_unknown_kinds_and_needs_a_group_to_shard():
    params = list(nn.Linear(3, 5).parameters())
    with pytest.raises(ValueError, match="kind: unknown value 'sgd'; accepted: adamw, sharded_adamw"):
        build_adamw(params, "sgd", torch.device("cpu"))
    with pytest.raises(RuntimeError, match=r"ShardedOptimizer needs torch\.distributed to be initialized"):
        build_adamw(params, "sharded_adamw", torch.device("cpu"))


# --------------------------------------------------------------------------- a gloo run
# No wrapper, a blocking all-reduce after backward, all-reduces started in backward, torch DDP.
CASES = (DPCase("single"), DPCase("flat"), DPCase("bucketed", 0.1), DPCase("torch_ddp"))
STEPS = 2


def _steps_and_memory(rank: int, world_size: int) -> tuple:
    steps = measure_data_parallel(rank, world_size, "tiny", CASES, 0.0, STEPS, STEPS)
    return steps, measure_optimizer_memory(rank, world_size, "tiny", OPTIMIZER_KINDS, STEPS)


@pytest.fixture(scope="module")
def gloo_run() -> list[tuple]:
    return run_ranks(_steps_and_memory, WORLD_SIZE, backend="gloo", timeout_s=120)


def test_every_rank_returns_the_slowest_ranks_steps(gloo_run):
    assert gloo_run[0] == gloo_run[1]  # gathered: every rank holds the same
    steps, _ = gloo_run[0]
    assert list(steps) == list(CASES)
    for case, times in steps.items():
        assert len(times.step_s) == len(times.sync_s) == STEPS, case
        assert all(0 < s < 60 for s in times.step_s), case
        assert all(0 <= sync <= step for sync, step in zip(times.sync_s, times.step_s, strict=True)), case


def test_time_in_gradient_synchronization_only_where_there_is_a_finish(gloo_run):
    steps, _ = gloo_run[0]
    for case in (DPCase("single"), DPCase("torch_ddp")):
        assert steps[case].sync_s == (0.0,) * STEPS
    for case in (DPCase("flat"), DPCase("bucketed", 0.1)):
        assert min(steps[case].sync_s) > 0  # gloo all-reduces (flat) or waits for them (bucketed)


def test_sharded_state_per_rank_is_about_one_over_world(gloo_run):
    _, memory = gloo_run[0]
    whole, sharded = memory["adamw"], memory["sharded_adamw"]
    for figures in (whole, sharded):
        assert figures.after_build_bytes is None and figures.peak_bytes is None  # CUDA allocator figures
        assert len(figures.step_s) == STEPS and min(figures.step_s) > 0
    # Every rank keeps the whole state without sharding; sharded, the ranks' shards add up to it.
    assert whole.state_bytes_per_rank == (whole.optimizer_state_bytes,) * WORLD_SIZE
    assert sum(sharded.state_bytes_per_rank) == whole.optimizer_state_bytes
    assert sharded.optimizer_state_bytes == max(sharded.state_bytes_per_rank)
    # Parameters go largest first to the rank owning the fewest bytes, so the fullest rank exceeds an
    # even share by at most the last parameter it got: one placed after each rank has one, at most the
    # (WORLD_SIZE + 1)-th largest. At tiny that is 64 KiB of 5.4 MiB (the two 2.4 MiB embedding
    # tables come first): 1.2%.
    model = build_model("sdpa", dp_config("tiny", "gloo"), torch.device("cpu"))
    sizes = sorted((p.nbytes for p in model.parameters()), reverse=True)
    tolerance = sizes[WORLD_SIZE] / sum(sizes)
    ratio = sharded.optimizer_state_bytes / whole.optimizer_state_bytes
    assert ratio == pytest.approx(1 / WORLD_SIZE, abs=tolerance)


# --------------------------------------------------------------------------- NVTX ranges
def test_one_rank_in_this_process_marks_each_cases_steps_and_phases():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            steps = measure_data_parallel(
                0, 1, "tiny", (DPCase("single"), DPCase("bucketed", 0.1)), 0.0, 1, 1
            )
    finally:
        dist.destroy_process_group()
    assert [len(times.step_s) for times in steps.values()] == [1, 1]
    names = {event.name for event in profile.events()}
    assert {
        "dp_single",
        "dp_bucketed 0.1MiB",
        "forward",
        "backward",
        "gradient_sync",
        "optimizer_step",
    } <= names
