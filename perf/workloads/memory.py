"""Peak memory of a training forward or step, measured in a fresh process under one CUDA allocator setting.

The caching allocator reads PYTORCH_CUDA_ALLOC_CONF once per process, when it is first used, so each
setting needs a process of its own; a fresh one for every case also starts with nothing cached by
earlier benchmarks, so that the settings' figures compare. `measure_in_fresh_process` releases this
process's cached memory, spawns one rank (parallel.launch.run_ranks, gloo) whose environment carries
exactly the setting (ALLOCATOR_CONF), and returns what `measure_peak_memory` measured there: round
durations, the allocator's figures, the GPU busy time. The benchmark records them
(perf/test_memory.py).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from parallel.launch import run_ranks
from perf.cases.memory import ALLOCATOR_CONF, ALLOCATORS
from perf.harness import (
    TIMED_RANGE,
    Bench,
    TimingPolicy,
    Work,
    nvtx_range,
    out_of_memory_in,
    release_cached_memory,
    synchronize,
    synchronized_timer,
)
from perf.harness.bench import busy_time, warm_up
from perf.harness.gpu_time import GpuTime
from perf.harness.memory_snapshot import write_memory_snapshot
from perf.workloads.lm import lm_workload

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
# torch 2.9 and later also read this device-generic name, in some versions before the CUDA one:
# removed in every case, so that a value inherited from the shell cannot replace the one set here.
GENERIC_ALLOC_CONF = "PYTORCH_ALLOC_CONF"
# Untimed steps after the one that sets up the resident state; the last plans the timed rounds.
WARMUP_STEPS = 1
# The measuring process's time limit, beyond which it counts as hung (three timing budgets are added):
# starting it (importing torch, CUDA's context), building a 2.7b model, its untimed steps, the GPU
# time's extra calls and the profiler's set-up take far less.
MEASURE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class AllocatorFigures:
    """The CUDA caching allocator's figures of one measured case, in bytes or counts.

    resident_bytes: allocated between steps; peak_allocated_bytes and peak_reserved_bytes: the most
    allocated to tensors and the most reserved from the GPU during the timed rounds; alloc_retries:
    allocations that failed, freed the cache and were retried; ooms: allocations that failed for good;
    both counted over the whole measuring process. None where the allocator's statistics lack a count.
    """

    resident_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    alloc_retries: int | None
    ooms: int | None

    @property
    def fragmentation_bytes(self) -> int:
        """Reserved beyond what tensors took, at the peaks: cached blocks too small or split to serve."""
        return self.peak_reserved_bytes - self.peak_allocated_bytes


def allocator_figures(
    resident: int, peak_allocated: int, peak_reserved: int, stats: Mapping[str, Any]
) -> AllocatorFigures:
    """The figures from torch.cuda.memory_allocated, max_memory_allocated, max_memory_reserved and
    memory_stats (the last gives the counts)."""
    if not 0 <= peak_allocated <= peak_reserved:
        raise ValueError(
            f"peak allocated {peak_allocated} must lie within [0, peak reserved {peak_reserved}]"
        )
    return AllocatorFigures(
        resident_bytes=resident,
        peak_allocated_bytes=peak_allocated,
        peak_reserved_bytes=peak_reserved,
        alloc_retries=stats.get("num_alloc_retries"),
        ooms=stats.get("num_ooms"),
    )


@dataclass(frozen=True)
class MemoryRun:
    """What the measuring process returns: plain data, pickled across.

    durations_s: each timed round of `iterations` steps; host_s: how long one step took to return
    (None when benchmarks are disabled); allocator_conf: PYTORCH_CUDA_ALLOC_CONF as that process had
    it; expandable_segments: whether its allocator used expandable segments, from its snapshot's
    settings (None where torch does not say); memory_snapshot: the snapshot written for
    --memory-snapshot, if any.
    """

    durations_s: tuple[float, ...]
    iterations: int
    work: Work
    figures: AllocatorFigures
    gpu: GpuTime | str
    host_s: float | None
    parameters: int
    batch_size: int
    allocator_conf: str | None
    expandable_segments: bool | None
    memory_snapshot: str | None = None


@dataclass(frozen=True)
class OutOfMemory:
    """The measuring process ran out of memory: its error's message, raised again here."""

    message: str


def allocator_env(allocator: str) -> dict[str, str | None]:
    """The environment of the measuring process for `allocator`: run_ranks' `env` (None removes)."""
    if allocator not in ALLOCATOR_CONF:
        raise ValueError(f"allocator: unknown value {allocator!r}; accepted: {', '.join(ALLOCATORS)}")
    return {ALLOC_CONF: ALLOCATOR_CONF[allocator], GENERIC_ALLOC_CONF: None}


def run_timeout_s(budget_s: float) -> float:
    """The measuring process's time limit: MEASURE_TIMEOUT_S, and three times the timing budget."""
    return MEASURE_TIMEOUT_S + 3 * budget_s


def memory_figures(run: MemoryRun) -> dict[str, Any]:
    """extra_info entries of a run beyond its configuration: the allocator's figures, the setting the
    process had, what the harness records for a run in this process (warm-up steps, host_ms, peak
    memory, the memory snapshot), and activation_peak_bytes, the peak less the resident state."""
    f = run.figures
    info = {
        "allocator_conf": run.allocator_conf,
        "expandable_segments": run.expandable_segments,
        "warmup_steps": WARMUP_STEPS,
        "resident_bytes": f.resident_bytes,
        "peak_memory_bytes": f.peak_allocated_bytes,
        "peak_reserved_bytes": f.peak_reserved_bytes,
        "fragmentation_bytes": f.fragmentation_bytes,
        "activation_peak_bytes": f.peak_allocated_bytes - f.resident_bytes,
        "alloc_retries": f.alloc_retries,
        "ooms": f.ooms,
    }
    if run.host_s is not None:
        info["host_ms"] = run.host_s * 1e3
    if run.memory_snapshot is not None:
        info["memory_snapshot"] = run.memory_snapshot
    return info


def setting_problem(allocator: str, run: MemoryRun) -> str | None:
    """Why the run does not measure `allocator`, or None: expandable segments asked for and not used
    (torch warns "expandable_segments not supported on this platform" where its build lacks them)."""
    if allocator == "expandable_segments" and run.expandable_segments is False:
        return (
            f"{ALLOC_CONF}={run.allocator_conf} was set, but the allocator did not use expandable segments "
            "(not supported by this platform or torch build)"
        )
    return None


@dataclass(frozen=True)
class MemoryCase:
    """The step a memory benchmark measures: its mode, model, precision, context and optimizer."""

    mode: str
    preset: str
    precision: str
    context: int
    optimizer: str


# --------------------------------------------------------------------------- in this process
def measure_in_fresh_process(
    allocator: str,
    case: MemoryCase,
    *,
    device: torch.device,
    policy: TimingPolicy | None,
    snapshot: tuple[Path, str] | None = None,
) -> MemoryRun:
    """Measure one case in a fresh process with `allocator`'s setting; `policy` None: benchmarks are
    disabled (one untimed round). `snapshot`: (folder, name) for --memory-snapshot. An out-of-memory
    there is raised here as torch.OutOfMemoryError (the suite's out-of-memory skip); another error
    as parallel.launch.RankFailed, and a process past its time limit as RanksTimedOut."""
    env = allocator_env(allocator)
    release_cached_memory()  # the child gets the GPU's memory, less this process's CUDA context
    (outcome,) = run_ranks(
        measure_peak_memory,
        1,
        backend="gloo",
        args=(str(device), case, policy, snapshot),
        env=env,
        timeout_s=run_timeout_s(policy.budget_s if policy is not None else 0.0),
    )
    if isinstance(outcome, OutOfMemory):
        error = torch.OutOfMemoryError(outcome.message)
        setting = f"{ALLOC_CONF}={env[ALLOC_CONF]}" if env[ALLOC_CONF] else f"{ALLOC_CONF} unset"
        error.add_note(f"measured in a fresh process with {setting}")
        raise error
    return outcome


# --------------------------------------------------------------------------- in the measuring process
def measure_peak_memory(
    rank: int,
    world_size: int,
    device_name: str,
    case: MemoryCase,
    policy: TimingPolicy | None,
    snapshot: tuple[Path, str] | None,
) -> MemoryRun | OutOfMemory:
    """In the spawned process (run_ranks' rank 0 of 1): one step that creates the resident state,
    WARMUP_STEPS untimed steps, the timed rounds (an NVTX range TIMED_RANGE) with the peaks reset
    before them, the allocator's figures, then the host time, the GPU busy time and the snapshot."""
    device = torch.device(device_name)
    if device.type != "cuda":
        raise ValueError(f"peak memory comes from the CUDA caching allocator; got device {device}")
    if device.index is not None:  # "cuda" alone is the current device, 0 in a fresh process
        torch.cuda.set_device(device)
    conf = os.environ.get(ALLOC_CONF)
    _check_settings_parsed(conf)
    try:
        return _measure(device, case, policy, snapshot, conf)
    except Exception as err:
        oom = out_of_memory_in(err)
        if oom is None:
            raise
        return OutOfMemory(_oom_message(oom, err))


def _measure(
    device: torch.device,
    case: MemoryCase,
    policy: TimingPolicy | None,
    snapshot: tuple[Path, str] | None,
    conf: str | None,
) -> MemoryRun:
    workload = lm_workload(
        case.mode, "sdpa", case.preset, case.precision, case.context, device, optimizer=case.optimizer
    )
    step = workload.step
    # The first step creates the state that stays: gradients and, lazily, AdamW's moments.
    step()
    synchronize(device)
    resident = torch.cuda.memory_allocated(device)
    seconds_per_call = warm_up(step, WARMUP_STEPS)
    rounds, iterations = policy.plan(seconds_per_call) if policy is not None else (1, 1)
    torch.cuda.reset_peak_memory_stats(device)
    with nvtx_range(TIMED_RANGE):
        durations = timed_rounds(step, rounds, iterations)
    figures = allocator_figures(
        resident,
        torch.cuda.max_memory_allocated(device),
        torch.cuda.max_memory_reserved(device),
        torch.cuda.memory_stats(device),
    )
    expandable = _expandable_segments_used()
    host_s, gpu = None, "benchmarks are disabled: not measured"
    if policy is not None:
        median_s = statistics.median(d / iterations for d in durations)
        host_s = Bench.host_time(step)
        gpu = busy_time(step, median_s, device)
    written = None
    if snapshot is not None:
        folder, name = snapshot
        written = str(write_memory_snapshot(step, Path(folder), name))
    return MemoryRun(
        durations_s=tuple(durations),
        iterations=iterations,
        work=workload.work,
        figures=figures,
        gpu=gpu,
        host_s=host_s,
        parameters=workload.config.num_parameters(),
        batch_size=workload.config.batch_size,
        allocator_conf=conf,
        expandable_segments=expandable,
        memory_snapshot=written,
    )


def timed_rounds(fn: Callable[[], Any], rounds: int, iterations: int) -> list[float]:
    """Seconds of each of `rounds` rounds of `iterations` calls, timed between device
    synchronizations as pytest-benchmark times a round with perf.harness.synchronized_timer."""
    if rounds < 1 or iterations < 1:
        raise ValueError(f"rounds and iterations must be >= 1; got {rounds} and {iterations}")
    durations = []
    for _ in range(rounds):
        start = synchronized_timer()
        for _ in range(iterations):
            fn()
        durations.append(synchronized_timer() - start)
    return durations


def _check_settings_parsed(conf: str | None) -> None:
    """RuntimeError where the allocator's settings differ from the environment's: they were read
    before run_ranks set it (torch reads them once), and the case would measure other settings."""
    read = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
    if read is None:  # an older torch: nothing to compare with
        return
    parsed = read()
    if parsed != (conf or ""):
        raise RuntimeError(
            f"the allocator's settings are {parsed!r}, not {ALLOC_CONF}={conf!r} as this process has it: "
            "they were read before it was set"
        )


def _expandable_segments_used() -> bool | None:
    """Whether the CUDA allocator uses expandable segments, from its snapshot's settings; None where
    this torch's snapshot does not say."""
    try:
        settings = torch.cuda.memory._snapshot().get("allocator_settings", {})
    except Exception:  # a private interface: its absence costs this figure only
        return None
    value = settings.get("expandable_segments")
    return None if value is None else bool(value)


def _oom_message(oom: BaseException, err: BaseException) -> str:
    """The out-of-memory error's first line and the notes on it and on the error raised from it."""
    lines = str(oom).strip().splitlines()
    notes = dict.fromkeys([*getattr(oom, "__notes__", ()), *getattr(err, "__notes__", ())])
    return (lines[0] if lines else "CUDA out of memory") + "".join(f"; {n}" for n in notes)
