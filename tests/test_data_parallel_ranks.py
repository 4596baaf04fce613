"""The data-parallel measurement: cases, world sizes and their ids, backend, shapes, time limit, derived
figures, optimizer and training state, and one short gloo run on 2 ranks: steps, optimizer memory, and
FSDP2's step against one process's."""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from parallel.launch import run_ranks
from perf.cases.data_parallel import OPTIMIZER_KINDS, PAIR, VARIANTS
from perf.test_data_parallel import _backend
from perf.workloads.data_parallel_ranks import (
    BATCH_PER_RANK,
    BUILD_S,
    SLOWEST_STEP_S,
    WARMUP_STEPS,
    DPCase,
    StepTimes,
    backend_for,
    cases_for,
    comparison_figures,
    dp_config,
    measure_data_parallel,
    measure_optimizer_memory,
    rank_device,
    run_timeout_s,
    too_few_ranks,
)
from perf.workloads.data_parallel_steps import (
    LEARNING_RATE,
    build_adamw,
    build_training_step,
    held_state_bytes,
    optimizer_state_bytes,
    step_function,
)
from perf.workloads.lm import build_model, random_batch
from tests.test_collective_runs import _ids
from tests.test_harness import _child_pytest

CPU = torch.device("cpu")
# The ranks of the gloo runs here.
WORLD_SIZE = PAIR


# --------------------------------------------------------------------------- cases
def test_cases_are_every_variant_then_each_bucket_size():
    cases = cases_for((1.0, 0.25))
    assert [c.label for c in cases] == [*VARIANTS, "bucketed 1MiB", "bucketed 0.25MiB"]
    assert DPCase("bucketed", 0.25) in cases  # frozen: usable as a key of the ranks' results


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("ring",),
            r"variant: unknown value 'ring'; accepted: single, naive, .*, torch_ddp, fsdp2, bucketed",
        ),
        (("flat", 10.0), r"bucket_size_mb: only the 'bucketed' variant takes one; got 10.0 for 'flat'"),
        (("bucketed",), r"bucket_size_mb must be a finite number > 0 \(MiB\); got None"),
        (("bucketed", 0.0), r"bucket_size_mb must be a finite number > 0 \(MiB\); got 0.0"),
        (("bucketed", float("inf")), r"bucket_size_mb must be a finite number > 0"),
    ],
)
def test_bad_cases_say_what_is_accepted(args, message):
    with pytest.raises(ValueError, match=message):
        DPCase(*args)


# --------------------------------------------------------------------------- world, backend and shapes
def test_the_world_sizes_are_the_runs_and_two_keeps_the_stored_names(tmp_path):
    files = ("perf/test_data_parallel.py", "--collect-only", "--device=cpu")
    both = _ids(_child_pytest(tmp_path, *files, "--world-sizes=2,4"))
    pair = [i for i in both if "world" not in i]
    four = [i for i in both if "-world4-" in i]
    # Every case at each world size; 2 ranks under the names baselines stored before there were others.
    assert len(pair) == len(four) == len(both) / 2 == 9  # the cpu tier's one bucket size
    assert "test_data_parallel_step[tiny-torch_ddp]" in pair
    assert [i.replace("-world4", "") for i in four] == pair
    assert "test_data_parallel_bucketed[tiny-world4-bucket1.0]" in four
    only_four = _ids(_child_pytest(tmp_path, *files, "--world-sizes=4"))
    assert only_four == four
    # The pr tier's cells name the variant, whatever the world: torch DDP and FSDP2 at 4 ranks too.
    pr = _ids(_child_pytest(tmp_path, *files, "--tier=pr", "--world-sizes=4"))
    assert (
        "test_data_parallel_step[xl-world4-torch_ddp]" in pr
        and "test_data_parallel_step[xl-world4-fsdp2]" in pr
    )


def test_a_world_of_one_rank_skips_the_benchmarks():
    with pytest.raises(pytest.skip.Exception, match="data parallel needs at least 2 ranks; world size 1"):
        _backend(1)  # what every data-parallel benchmark asks first
    assert too_few_ranks(2) is None


@pytest.mark.parametrize(
    ("gpus", "world_size", "backend"),
    [
        (0, 2, "gloo"),
        (0, 8, "gloo"),
        (1, 2, None),
        (2, 2, "nccl"),
        (8, 2, "nccl"),
        (2, 4, None),
        (4, 4, "nccl"),
    ],
)
def test_backend_is_nccl_with_a_gpu_per_rank_gloo_without_any_and_none_between(gpus, world_size, backend):
    assert backend_for(gpus, world_size) == backend


@pytest.mark.parametrize(("gpus", "backend"), [(0, "gloo"), (8, "nccl")])
def test_a_launchers_ranks_span_nodes_and_need_no_gpu_each_here(gpus, backend):
    assert backend_for(gpus, 16, launched=True) == backend  # two nodes of 8 ranks


@pytest.mark.parametrize("gpus", [-1, 2.0, True])
def test_backend_rejects_bad_gpu_counts(gpus):
    with pytest.raises(ValueError, match="visible_gpus: an int >= 0 is accepted"):
        backend_for(gpus, WORLD_SIZE)


def test_the_named_backend_picks_the_device():
    threads = torch.get_num_threads()
    try:
        assert rank_device("gloo", WORLD_SIZE) == CPU
    finally:
        torch.set_num_threads(threads)  # rank_device shares the cores out among the ranks
    with pytest.raises(ValueError, match="backend: unknown value 'mpi'; accepted: nccl, gloo"):
        rank_device("mpi", WORLD_SIZE)


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
    optimizer = build_adamw(layer.parameters(), "adamw", CPU)
    assert optimizer.defaults["foreach"] is True
    assert optimizer_state_bytes(optimizer) == 0  # AdamW allocates its state in the first step
    assert held_state_bytes(layer, optimizer) == 20 * 4  # the weights alone: no gradient yet
    layer(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    moments = 2 * 20 * 4  # exp_avg and exp_avg_sq in fp32
    assert moments < optimizer_state_bytes(optimizer) <= moments + 2 * 8  # and a scalar step per tensor
    # Weights and gradients beside it.
    assert held_state_bytes(layer, optimizer) == 2 * 20 * 4 + optimizer_state_bytes(optimizer)


def test_build_adamw_rejects_unknown_kinds_and_needs_a_group_to_shard():
    params = list(nn.Linear(3, 5).parameters())
    with pytest.raises(ValueError, match="kind: unknown value 'sgd'; accepted: adamw, sharded_adamw"):
        build_adamw(params, "sgd", CPU)
    with pytest.raises(RuntimeError, match=r"ShardedOptimizer needs torch\.distributed to be initialized"):
        build_adamw(params, "sharded_adamw", CPU)


# --------------------------------------------------------------------------- a gloo run
# No wrapper, a blocking all-reduce after backward, all-reduces started in backward, torch DDP, FSDP2.
CASES = (DPCase("single"), DPCase("flat"), DPCase("bucketed", 0.1), DPCase("torch_ddp"), DPCase("fsdp2"))
STEPS = 2


def _in_every_rank(rank: int, world_size: int) -> tuple:
    """The steps and optimizer memory as the benchmarks measure them; then one FSDP2 step from fresh
    weights: this rank's loss, and every parameter and its gradient after it, whole (gathered from
    the shards)."""
    steps = measure_data_parallel(rank, world_size, "gloo", "tiny", CASES, 0.0, STEPS, STEPS)
    memory = measure_optimizer_memory(rank, world_size, "gloo", "tiny", OPTIMIZER_KINDS, STEPS)
    fsdp2 = build_training_step("fsdp2", None, dp_config("tiny", "gloo"), rank, world_size, CPU)
    loss, _ = fsdp2.run()
    params = list(fsdp2.model.parameters())  # DTensors: this rank's shards
    whole = [(param.full_tensor(), param.grad.full_tensor()) for param in params]
    return steps, memory, (loss.item(), whole)


@pytest.fixture(scope="module")
def gloo_run() -> list[tuple]:
    return run_ranks(_in_every_rank, WORLD_SIZE, backend="gloo", timeout_s=120)


def test_every_rank_returns_the_slowest_ranks_steps(gloo_run):
    assert gloo_run[0][:2] == gloo_run[1][:2]  # gathered: every rank holds the same
    steps, _, _ = gloo_run[0]
    assert list(steps) == list(CASES)
    for case, times in steps.items():
        assert len(times.step_s) == len(times.sync_s) == STEPS, case
        assert all(0 < s < 60 for s in times.step_s), case
        assert all(0 <= sync <= step for sync, step in zip(times.sync_s, times.step_s, strict=True)), case
        assert times.peak_bytes is None, case  # a CUDA allocator figure


def test_time_in_gradient_synchronization_only_where_there_is_a_finish(gloo_run):
    steps, _, _ = gloo_run[0]
    for case in (DPCase("single"), DPCase("torch_ddp"), DPCase("fsdp2")):
        assert steps[case].sync_s == (0.0,) * STEPS
    for case in (DPCase("flat"), DPCase("bucketed", 0.1)):
        assert min(steps[case].sync_s) > 0  # gloo all-reduces (flat) or waits for them (bucketed)


def test_fsdp2_holds_one_replicas_state_split_over_the_ranks(gloo_run):
    steps, _, _ = gloo_run[0]
    replica = steps[DPCase("torch_ddp")].state_bytes_per_rank
    # Every replicating variant holds the whole model, its gradients and AdamW's state on every rank.
    for case in (DPCase("single"), DPCase("flat"), DPCase("bucketed", 0.1)):
        assert steps[case].state_bytes_per_rank == replica, case
    assert len(set(replica)) == 1 and len(replica) == WORLD_SIZE
    sharded = steps[DPCase("fsdp2")].state_bytes_per_rank
    assert max(sharded) < min(replica)
    # Every tiny parameter's first dimension divides by 2: the shards of parameters, gradients and
    # moments add up to one replica's exactly; only AdamW's step counts (one scalar per parameter,
    # 84 bytes at tiny) are on every rank.
    assert sum(sharded) == pytest.approx(replica[0], rel=1e-4)


def test_sharded_state_per_rank_is_about_one_over_world(gloo_run):
    _, memory, _ = gloo_run[0]
    whole, sharded = memory["adamw"], memory["sharded_adamw"]
    for figures in (whole, sharded):
        assert figures.after_build_bytes is None and figures.peak_bytes is None  # CUDA allocator figures
        assert len(figures.step_s) == STEPS and min(figures.step_s) > 0
    # Every rank keeps the whole state without sharding; sharded, the ranks' shards add up to it.
    assert whole.optimizer_state_bytes_per_rank == (whole.optimizer_state_bytes,) * WORLD_SIZE
    assert sum(sharded.optimizer_state_bytes_per_rank) == whole.optimizer_state_bytes
    assert sharded.optimizer_state_bytes == max(sharded.optimizer_state_bytes_per_rank)
    # Weights and gradients stay whole on every rank: the training state shrinks by the state saved.
    for rank in range(WORLD_SIZE):
        saved = whole.optimizer_state_bytes_per_rank[rank] - sharded.optimizer_state_bytes_per_rank[rank]
        assert whole.state_bytes_per_rank[rank] - sharded.state_bytes_per_rank[rank] == saved
    # Parameters go largest first to the rank owning the fewest bytes, so the fullest rank exceeds an
    # even share by at most the last parameter it got: one placed after each rank has one, at most the
    # (WORLD_SIZE + 1)-th largest. At tiny that is 64 KiB of 5.4 MiB (the two 2.4 MiB embedding
    # tables come first): 1.2%.
    model = build_model("sdpa", dp_config("tiny", "gloo"), CPU)
    sizes = sorted((p.nbytes for p in model.parameters()), reverse=True)
    tolerance = sizes[WORLD_SIZE] / sum(sizes)
    ratio = sharded.optimizer_state_bytes / whole.optimizer_state_bytes
    assert ratio == pytest.approx(1 / WORLD_SIZE, abs=tolerance)


def test_fsdp2_step_on_two_ranks_is_one_process_step_on_their_batches(gloo_run):
    """One process, rank 0's weights (every variant trains them) and the ranks' batches stacked: the
    loss is the mean of the ranks' losses, the gradients are FSDP2's averaged ones, and AdamW leaves
    every weight where FSDP2 left it.

    Tolerances: the loss to fp32's summation order (observed: equal). A gradient within 1e-4 of its
    tensor's largest: sums in another order differ by at most 5e-7 of it at tiny, a sum not divided
    by the world size by 50%. A weight within 1% of the learning rate: AdamW's first step moves a weight
    by lr * g / (|g| + eps), about lr where |g| >> eps (and the same for any scale of g, hence the
    gradients' own check), so 1% of lr still tells a wrong update from a right one; the most seen was
    0.19% (2e-7), where |g| is near eps and the move follows g's last bits.
    """
    config = dp_config("tiny", "gloo")
    torch.manual_seed(0)
    model = build_model("sdpa", config, CPU)
    batches = [random_batch(config, CPU, seed=rank) for rank in range(WORLD_SIZE)]  # (B, T) each
    inputs, targets = (torch.cat(rows) for rows in zip(*batches, strict=True))  # (WORLD_SIZE * B, T)
    step = step_function(model, None, build_adamw(model.parameters(), "adamw", CPU), inputs, targets)
    loss, _ = step()
    losses = [loss_of_rank for _, _, (loss_of_rank, _) in gloo_run]
    assert sum(losses) / WORLD_SIZE == pytest.approx(loss.item(), rel=1e-6)
    for rank_run in gloo_run:
        _, _, (_, whole) = rank_run
        for (name, expected), (param, grad) in zip(model.named_parameters(), whole, strict=True):
            scale = expected.grad.abs().max().item()
            torch.testing.assert_close(
                grad, expected.grad, rtol=0, atol=1e-4 * scale, msg=lambda m, name=name: f"{name}: {m}"
            )
            torch.testing.assert_close(
                param,
                expected.detach(),
                rtol=0,
                atol=LEARNING_RATE / 100,
                msg=lambda m, name=name: f"{name}: {m}",
            )


# --------------------------------------------------------------------------- NVTX ranges
def test_one_rank_in_this_process_marks_each_cases_steps_and_phases():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            steps = measure_data_parallel(
                0, 1, "gloo", "tiny", (DPCase("single"), DPCase("bucketed", 0.1)), 0.0, 1, 1
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
