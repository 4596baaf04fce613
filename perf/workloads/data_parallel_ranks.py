"""Data-parallel training steps at a world size of the run (perf/cases/data_parallel.py): each wrapper of
parallel/ddp.py against one GPU alone, torch's DistributedDataParallel and torch's FSDP2
(perf/workloads/data_parallel_steps.py builds the steps), with each rank's peak memory and training
state; and the optimizer memory that ShardedOptimizer saves.

`measure_data_parallel` and `measure_optimizer_memory` run in every rank of a
`parallel.launch.run_ranks` group (nccl: one GPU per rank; gloo: the CPU) as
`measure(rank, world_size, backend, ...)`. The backend named decides the device, not the process
group's: a group may carry both ("cpu:gloo,cuda:nccl"). Starting the ranks and building an xl model
cost seconds, so one call measures every case in turn, freeing each case's model, gradients and
optimizer state before building the next; every rank returns the same result.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from model.config import ModelConfig
from model.loss import cross_entropy
from parallel.ddp import DDPIndividualParameters, check_bucket_size_mb
from perf.cases.data_parallel import BUCKETED, VARIANTS
from perf.harness import elapsed_ms, nvtx_range, release_cached_memory
from perf.harness.gpu_time import GpuTime
from perf.workloads.data_parallel_steps import (
    Step,
    build_adamw,
    build_training_step,
    held_state_bytes,
    optimizer_state_bytes,
    step_function,
)
from perf.workloads.lm import build_model, lm_config, random_batch
from perf.workloads.rank_timing import (
    agreed_iterations,
    rank0_busy_time,
    slowest_over_ranks,
    timed_from_barrier,
)

# torch DDP's default bucket_cap_mb, recorded beside its results.
TORCH_DDP_BUCKET_MB = 25.0
# Per rank: the xl fp32 figures are for batch 2 and context 512 (about 32 GB per rank with AdamW and
# torch DDP's gradient buckets, within an 80 GB GPU); the CPU runs tiny at context 128.
BATCH_PER_RANK = 2
CONTEXT = {"nccl": 512, "gloo": 128}
# Untimed steps before each case's timed ones: the first allocates gradients and AdamW's state, and
# NCCL sets up its channels at the first all-reduce of each size; the last decides how many are timed.
WARMUP_STEPS = 2
# At most this many timed steps per case: an xl step takes a fraction of a second (NOTES.md), so 20
# of them keep a case to seconds.
MAX_TIMED_STEPS = 20
# The run's time limit, beyond which the ranks count as hung. Starting it: spawning the ranks,
# importing torch in each, CUDA contexts and NCCL communicators (seconds; 120 s leaves a wide margin).
STARTUP_S = 120.0
# Per case beyond its steps: building an xl model on the GPU, the wrapper's broadcast of 8.0 GB of
# weights, freeing it all again (seconds: NOTES.md).
BUILD_S = 30.0
# The slowest step not taken for a hang: an xl step takes a fraction of a second (NOTES.md); the naive
# variant's 435 blocking all-reduces of 8.0 GB in all (2.0B fp32 parameters) take about 0.8 s more over
# 10 GB/s PCIe.
SLOWEST_STEP_S = 5.0
CPU_REASON = "the ranks run on the CPU (gloo): there is no GPU work to measure"


@dataclass(frozen=True)
class DPCase:
    """One measured case: a variant of VARIANTS, or "bucketed" with its bucket size in MiB."""

    variant: str
    bucket_size_mb: float | None = None

    def __post_init__(self) -> None:
        if self.variant == BUCKETED:
            check_bucket_size_mb(self.bucket_size_mb)
        elif self.variant not in VARIANTS:
            raise ValueError(
                f"variant: unknown value {self.variant!r}; accepted: {', '.join((*VARIANTS, BUCKETED))}"
            )
        elif self.bucket_size_mb is not None:
            raise ValueError(
                f"bucket_size_mb: only the {BUCKETED!r} variant takes one; got {self.bucket_size_mb!r} "
                f"for {self.variant!r}"
            )

    @property
    def label(self) -> str:
        """'naive', or 'bucketed 10MiB': the name of its NVTX range (after 'dp_') and its report row."""
        if self.variant == BUCKETED:
            return f"{BUCKETED} {self.bucket_size_mb:g}MiB"
        return self.variant


@dataclass(frozen=True)
class StepTimes:
    """Seconds per timed step, each the slowest rank's, and each step's longest wait in
    finish_gradient_synchronization (zeros for "single", which has none, and for "torch_ddp" and
    "fsdp2", whose all-reduces and reduce-scatters run inside backward).

    peak_bytes: the most allocated during the timed steps, the largest rank's (None on the CPU: no
    CUDA allocator). state_bytes_per_rank: each rank's parameters, gradients and optimizer state after
    a step, counted from the tensors (perf.workloads.data_parallel_steps.held_state_bytes), in rank order.
    """

    step_s: tuple[float, ...]
    sync_s: tuple[float, ...]
    gpu: GpuTime | str = "not measured"  # rank 0's GPU busy time per step, or why there is none
    peak_bytes: int | None = None
    state_bytes_per_rank: tuple[int, ...] = ()


@dataclass(frozen=True)
class OptimizerMemory:
    """One optimizer's figures, each the largest over the ranks, and per rank in rank order: the
    optimizer state, and parameters, gradients and optimizer state together after a step (as
    StepTimes.state_bytes_per_rank). CUDA allocator figures are None on the CPU; the others are
    counted from the tensors there too."""

    after_build_bytes: int | None
    before_step_bytes: int | None
    after_step_bytes: int | None
    peak_bytes: int | None
    optimizer_state_bytes: int
    optimizer_state_bytes_per_rank: tuple[int, ...]
    state_bytes_per_rank: tuple[int, ...]
    step_s: tuple[float, ...]
    gpu: GpuTime | str = "not measured"  # rank 0's GPU busy time per step, or why there is none


# --------------------------------------------------------------------------- pure parts
def cases_for(bucket_sizes_mb: Iterable[float]) -> tuple[DPCase, ...]:
    """Every variant, then one bucketed case per size: the order the ranks measure them in."""
    return (*(DPCase(v) for v in VARIANTS), *(DPCase(BUCKETED, size) for size in bucket_sizes_mb))


def too_few_ranks(world_size: int) -> str | None:
    """Why the data-parallel benchmarks cannot run in this world, or None: one rank has no peer to
    average with."""
    if world_size < 2:
        return f"data parallel needs at least 2 ranks; world size {world_size}"
    return None


def backend_for(visible_gpus: int, world_size: int, launched: bool = False) -> str | None:
    """nccl with a GPU per rank; gloo on the CPU where no GPU is visible; None where the world_size
    ranks spawned on this host would outnumber its GPUs: CPU figures would then be read as the GPU's.
    A launcher's ranks (launched) were checked against their own node's GPUs when they joined, so
    any GPU here means nccl however many nodes the world spans."""
    if not isinstance(visible_gpus, int) or isinstance(visible_gpus, bool) or visible_gpus < 0:
        raise ValueError(f"visible_gpus: an int >= 0 is accepted; got {visible_gpus!r}")
    if visible_gpus == 0:
        return "gloo"
    return "nccl" if launched or visible_gpus >= world_size else None


def dp_config(preset: str, backend: str) -> ModelConfig:
    """The preset at the backend's context length with BATCH_PER_RANK sequences: one rank's share."""
    if backend not in CONTEXT:
        raise ValueError(f"backend: unknown value {backend!r}; accepted: {', '.join(CONTEXT)}")
    return lm_config(preset, CONTEXT[backend]).replace(batch_size=BATCH_PER_RANK)


def run_timeout_s(case_count: int, budget_s: float, min_steps: int) -> float:
    """The time limit of one run over `case_count` cases: beyond it the ranks count as hung.

    Each case gets three times its timing budget (the barrier and synchronizations around every step
    add to it), its build, and its warm-up and minimum timed steps at the slowest step time.
    """
    if not isinstance(case_count, int) or isinstance(case_count, bool) or case_count < 1:
        raise ValueError(f"case_count: an int >= 1 is accepted; got {case_count!r}")
    if not 0 <= budget_s < math.inf:
        raise ValueError(f"budget_s: a finite number >= 0 is accepted; got {budget_s!r}")
    if not isinstance(min_steps, int) or isinstance(min_steps, bool) or min_steps < 1:
        raise ValueError(f"min_steps: an int >= 1 is accepted; got {min_steps!r}")
    per_case = 3 * budget_s + BUILD_S + (WARMUP_STEPS + min_steps) * SLOWEST_STEP_S
    return STARTUP_S + case_count * per_case


def comparison_figures(times: dict[DPCase, StepTimes], case: DPCase) -> dict[str, float | None]:
    """A case's medians set against "single" and "torch_ddp" where those were measured.

    comm_overhead_ms: what data parallelism adds to one GPU's step; comm_share: its part of the step;
    vs_torch_ddp: the step over torch DDP's (below 1: faster).
    """
    if case not in times:
        raise ValueError(f"case: {case.label!r} is not among the measured {[c.label for c in times]}")
    median_ms = _median_ms(times[case].step_s)
    single, torch_ddp = times.get(DPCase("single")), times.get(DPCase("torch_ddp"))
    overhead = median_ms - _median_ms(single.step_s) if single else None
    return {
        "sync_wait_ms": _median_ms(times[case].sync_s),
        "comm_overhead_ms": overhead,
        "comm_share": overhead / median_ms if overhead is not None else None,
        "vs_torch_ddp": median_ms / _median_ms(torch_ddp.step_s) if torch_ddp else None,
    }


def _median_ms(seconds: Sequence[float]) -> float:
    return statistics.median(seconds) * 1e3


# --------------------------------------------------------------------------- in every rank
def measure_data_parallel(
    rank: int,
    world_size: int,
    backend: str,
    preset: str,
    cases: Sequence[DPCase],
    budget_s: float,
    min_steps: int,
    max_steps: int,
) -> dict[DPCase, StepTimes]:
    """In every rank of a process group: time training steps of each case in turn; the same result on
    every rank. The timed steps of a case are an NVTX range "dp_<case label>"."""
    device = rank_device(backend, world_size)
    config = dp_config(preset, backend)
    results: dict[DPCase, StepTimes] = {}
    for case in cases:
        built = build_training_step(case.variant, case.bucket_size_mb, config, rank, world_size, device)
        step = built.run
        warmup = [_timed_step(step, device)[0] for _ in range(WARMUP_STEPS)]
        steps = agreed_iterations(warmup[-1], device, budget_s, min_steps, max_steps)
        _reset_peak(device)
        with nvtx_range(f"dp_{case.label}"):
            timed = [_timed_step(step, device) for _ in range(steps)]
        peak = _peak(device)
        step_s = slowest_over_ranks([t for t, _ in timed], world_size, device)
        # For the time in finish, the longest is the rank that finished backward first and waited.
        sync_s = slowest_over_ranks([s for _, s in timed], world_size, device)
        held = held_state_bytes(built.model, built.optimizer)
        per_rank = _gathered((peak, held), world_size)
        results[case] = StepTimes(
            step_s,
            sync_s,
            rank0_busy_time(step, rank, device, step_s, CPU_REASON),
            peak_bytes=_largest(p for p, _ in per_rank),
            state_bytes_per_rank=tuple(h for _, h in per_rank),
        )
        # The step held the model, its gradients, the wrapper and the optimizer: xl in fp32 with AdamW
        # is about 32 GB per rank, which must be back before the next case builds its own.
        del built, step
        release_cached_memory()
    return results


def measure_optimizer_memory(
    rank: int, world_size: int, backend: str, preset: str, kinds: Sequence[str], steps: int
) -> dict[str, OptimizerMemory]:
    """In every rank: per optimizer kind, memory after building, before and after the first optimizer
    step (AdamW allocates its state there) and the peak of that first training step; then `steps` timed
    steps, after which the training state is counted. Gradients are averaged by
    DDPIndividualParameters, which reduces them in place: no extra buffer the size of the gradients
    adds to the peak."""
    device = rank_device(backend, world_size)
    config = dp_config(preset, backend)
    results: dict[str, OptimizerMemory] = {}
    for kind in kinds:
        release_cached_memory()
        torch.manual_seed(rank)  # other weights per rank: the wrapper's broadcast makes them equal
        wrapped = DDPIndividualParameters(build_model("sdpa", config, device))
        optimizer = build_adamw(wrapped.module.parameters(), kind, device)
        inputs, targets = random_batch(config, device, seed=rank)  # (B, T) each, other rows per rank
        after_build = _allocated(device)
        _reset_peak(device)
        optimizer.zero_grad(set_to_none=True)
        cross_entropy(wrapped(inputs), targets).backward()  # logits (B, T, V)
        wrapped.finish_gradient_synchronization()
        before_step = _allocated(device)
        optimizer.step()
        after_step = _allocated(device)
        peak = _peak(device)
        optimizer_state = optimizer_state_bytes(optimizer)
        step = step_function(wrapped, wrapped.finish_gradient_synchronization, optimizer, inputs, targets)
        step_s = slowest_over_ranks([_timed_step(step, device)[0] for _ in range(steps)], world_size, device)
        gpu = rank0_busy_time(step, rank, device, step_s, CPU_REASON)
        held = held_state_bytes(wrapped, optimizer)
        per_rank = _gathered((after_build, before_step, after_step, peak, optimizer_state, held), world_size)
        figures = list(zip(*per_rank, strict=True))  # each figure's values in rank order
        results[kind] = OptimizerMemory(
            *(_largest(values) for values in figures[:5]),
            optimizer_state_bytes_per_rank=figures[4],
            state_bytes_per_rank=figures[5],
            step_s=step_s,
            gpu=gpu,
        )
        del wrapped, optimizer, step, inputs, targets
    release_cached_memory()
    return results


def rank_device(backend: str, world_size: int) -> torch.device:
    """The device of a rank measuring with `backend`: the current GPU for nccl (parallel.launch sets
    cuda:rank current; torchrun's ranks set their own); the CPU for gloo, its cores shared out."""
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    if backend == "gloo":
        _share_host_cores(world_size)
        return torch.device("cpu")
    raise ValueError(f"backend: unknown value {backend!r}; accepted: {', '.join(CONTEXT)}")


def _share_host_cores(world_size: int) -> None:
    """An equal share of the cores to this rank's intra-op threads: of OMP_NUM_THREADS where the ranks'
    parent set it (it shares a machine with other processes), else of all of them. torch's default of a
    thread per core in every rank oversubscribes them and slows every step several times over
    (NOTES.md: Measurements behind comments in the code)."""
    given = os.environ.get("OMP_NUM_THREADS", "")
    cores = int(given) if given.isdigit() and int(given) > 0 else os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // world_size))


def _timed_step(step: Step, device: torch.device) -> tuple[float, float]:
    """(seconds of one step on this rank, started when all ranks are ready; seconds in finish)."""
    seconds, (_, marks) = timed_from_barrier(step, device)
    if marks is None:
        return seconds, 0.0
    begin, end = marks  # CUDA events can be read only once they have completed: after the synchronize
    return seconds, elapsed_ms(begin, end, device.type == "cuda") / 1e3


def _gathered(figures: tuple, world_size: int) -> list[tuple]:
    """Every rank's figures, in rank order."""
    everyone: list[tuple | None] = [None] * world_size
    dist.all_gather_object(everyone, figures)
    return everyone


def _largest(values: Iterable[int | None]) -> int | None:
    values = list(values)
    return None if any(v is None for v in values) else max(values)


def _allocated(device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    return torch.cuda.memory_allocated(device)


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: torch.device) -> int | None:
    """The most allocated since the last _reset_peak; None on the CPU."""
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
