"""Measurement in one place: device choice, synchronized timing, NVTX ranges, derived figures, machine info.

conftest.py wires these into pytest and pytest-benchmark; benchmarks call `Bench.run` through the
`bench` fixture and never time anything themselves.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from model.precision import tf32_enabled
from perf.gpu_time import GpuTime, calls_for, failure, gpu_figures, measure_gpu_time, unavailable_reason
from perf.memory_snapshot import write_memory_snapshot
from perf.ranges import NVTX_AVAILABLE as NVTX_AVAILABLE  # conftest reads it from here
from perf.ranges import TIMED_RANGE, nvtx_range
from perf.results import folder_name


# --------------------------------------------------------------------------- devices
def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda when a GPU is visible, else cpu. Errors name what is accepted."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if re.fullmatch(r"cuda(:\d+)?", name):
        if not torch.cuda.is_available():
            raise ValueError(f"--device {name}: no CUDA GPU is visible to torch {torch.__version__}")
        device = torch.device(name)
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"--device {name}: only {torch.cuda.device_count()} GPU(s) visible")
        if device.index is not None:
            # The current device is what synchronized_timer waits for and where bare allocations go.
            torch.cuda.set_device(device.index)
        return device
    raise ValueError(f"unknown device {name!r}; accepted: auto, cpu, cuda, cuda:N")


def synchronize(device: torch.device | None = None) -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize(device if device is not None and device.type == "cuda" else None)


def synchronized_timer() -> float:
    """pytest-benchmark's timer: waits for queued GPU work, then reads the host clock.

    A round is `start = timer(); fn() x iterations; end = timer()`, so each round's time covers all
    the device work its iterations queued, while the iterations themselves run back to back
    without host synchronization in between.
    """
    synchronize()
    return time.perf_counter()


# --------------------------------------------------------------------------- peaks and machine info
# Dense (no sparsity) peak throughput in TFLOP/s from the vendors' datasheets, by precision of the
# matrix math: bf16/fp16 tensor cores, tf32 tensor cores, plain fp32 FMA. Matched against
# torch.cuda.get_device_name() in order; the first pattern that matches wins.
GPU_PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    (r"H200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    (r"H100.*(PCIe|PCI)", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2}),
    (r"H100.*NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    (r"H100|GH200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    (r"A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    (r"L40S", {"bf16": 362.1, "fp16": 362.1, "tf32": 183.0, "fp32": 91.6}),
    (r"A10G?\b", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    (r"L4\b", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    (r"V100", {"fp16": 125.0, "fp32": 15.7}),
)


def peak_tflops(gpu_name: str | None, math_precision: str) -> float | None:
    """Dense peak for the GPU and math precision ('bf16', 'fp16', 'tf32', 'fp32'); None if unknown."""
    if not gpu_name:
        return None
    for pattern, peaks in GPU_PEAK_TFLOPS:
        if re.search(pattern, gpu_name):
            return peaks.get(math_precision)
    return None


def gpu_name(device: torch.device) -> str | None:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


@functools.cache
def _nvidia_driver() -> str | None:
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:  # "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
        with open("/proc/driver/nvidia/version") as f:
            match = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", f.read())
            return match.group(1) if match else None
    except OSError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:  # a broken optional install must not stop the suite from reporting
        return None


def machine_info(device: torch.device) -> dict[str, Any]:
    """What a stored result must carry to be compared like with like."""
    info: dict[str, Any] = {
        "device": device.type,
        "torch": torch.__version__,
        "triton": _version("triton"),
        "cuda": torch.version.cuda,
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = {
            "name": props.name,
            "count": torch.cuda.device_count(),
            "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count,
            "driver": _nvidia_driver(),
        }
        # What decides collective bandwidth beside the GPUs: NCCL's version and the NCCL_* variables
        # set (NCCL_NVLS_ENABLE, NCCL_IB_HCA, NCCL_SOCKET_IFNAME, ...), which change its transports.
        info["nccl"] = _nccl_version()
        info["nccl_env"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}
    return info


def _nccl_version() -> str | None:
    try:
        return ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # a torch built without NCCL
        return None


def machine_slug(device: torch.device) -> str:
    """Folder name under baselines/: one per GPU model (or CPU model), never mixed."""
    return folder_name(gpu_name(device) or f"cpu {_cpu_model()}")


# --------------------------------------------------------------------------- out of memory
def out_of_memory_in(err: BaseException) -> BaseException | None:
    """The out-of-memory error that `err` is, or was raised from, or None.

    torch.compile reports errors of its compilation (autotuning allocates) as its own exceptions
    with the original as their cause. The CPU allocator's failure is a plain RuntimeError.
    """
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, torch.OutOfMemoryError) or (
            isinstance(current, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(current)
        ):
            return current
        current = current.__cause__ or current.__context__
    return None


@contextlib.contextmanager
def oom_note(note: str) -> Iterator[None]:
    """Attach `note` to an out-of-memory error raised inside; the skip it becomes says it."""
    try:
        yield
    except Exception as err:
        if out_of_memory_in(err) is not None:
            err.add_note(note)
        raise


# --------------------------------------------------------------------------- measurement
@dataclass(frozen=True)
class TimingPolicy:
    """How many rounds and iterations a benchmark gets.

    A round must last at least `min_round_s`, so that the synchronization and the first launch of
    each round are a small share of it; rounds are repeated until `budget_s` is spent, within
    [min_rounds, max_rounds].
    """

    min_round_s: float
    budget_s: float
    min_rounds: int
    max_rounds: int = 200

    def plan(self, seconds_per_call: float | None) -> tuple[int, int]:
        """(rounds, iterations) for a call of the given duration; None means not yet measured."""
        if seconds_per_call is None or seconds_per_call <= 0:
            return self.min_rounds, 1
        iterations = max(1, math.ceil(self.min_round_s / seconds_per_call))
        rounds = int(self.budget_s / (seconds_per_call * iterations))
        return max(self.min_rounds, min(self.max_rounds, rounds)), iterations


@dataclass(frozen=True)
class Work:
    """What one call of a benchmarked function does, for the derived figures."""

    flops: float | None = None  # floating-point operations per call
    tokens: int | None = None  # tokens processed per call
    bytes_moved: float | None = None  # bytes read plus written per call
    precision: str = "fp32"  # 'fp32', 'bf16', 'fp16': selects the peak for MFU


def derived_figures(seconds: float, work: Work, gpu: str | None, tf32: bool = False) -> dict[str, Any]:
    """Per-call figures from the median time: tokens/s, TFLOP/s, MFU against the GPU's dense peak, GB/s.

    MFU uses the peak of the precision the matmuls run in (fp32 counts as tf32 when TF32 is on);
    it is None on the CPU and on GPUs missing from GPU_PEAK_TFLOPS.
    """
    figures: dict[str, Any] = {"median_ms": seconds * 1e3}
    if work.tokens:
        figures["tokens_per_s"] = work.tokens / seconds
    if work.flops:
        achieved = work.flops / seconds / 1e12
        peak = peak_tflops(gpu, "tf32" if tf32 and work.precision == "fp32" else work.precision)
        figures.update(tflops=achieved, peak_tflops=peak, mfu=achieved / peak if peak else None)
    if work.bytes_moved:
        figures["gb_per_s"] = work.bytes_moved / seconds / 1e9
    return figures


def _nothing() -> None:
    pass


def _replay_clock(durations_s: Sequence[float]) -> Iterator[float]:
    """Readings of a clock that a round's start and end find `duration` apart, round after round."""
    now = 0.0
    for duration in durations_s:
        yield now
        now += duration
        yield now


def mark(cuda: bool) -> Any:
    """A point in a step's timeline: a recorded CUDA event on the GPU, the host clock on the CPU."""
    if not cuda:
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def elapsed_ms(start: Any, end: Any, cuda: bool) -> float:
    """Milliseconds between two marks; CUDA events must have completed (synchronize first)."""
    return start.elapsed_time(end) if cuda else (end - start) * 1e3


class Bench:
    """The `bench` fixture: warm-up, round planning, the timed region and the figures it reports."""

    def __init__(
        self, benchmark: Any, device: torch.device, policy: TimingPolicy, snapshot_dir: Path | None = None
    ):
        self.benchmark = benchmark
        self.device = device
        self.policy = policy
        self.snapshot_dir = snapshot_dir  # where memory snapshots go; None: none are taken

    def warm_up(self, fn: Callable[[], Any], steps: int) -> float | None:
        """Run `steps` untimed calls; return the duration of the last one (None if steps == 0)."""
        last = None
        with nvtx_range("warmup"):
            for _ in range(steps):
                start = synchronized_timer()
                fn()
                last = synchronized_timer() - start
        return last

    def first_call(self, fn: Callable[[], Any], setup: Callable[[], Any] | None = None) -> float:
        """Seconds of `setup` and the first call of `fn`, from an idle device: what compiling,
        autotuning or lazy initialization costs before any warm-up."""
        start = synchronized_timer()
        with nvtx_range("first_call"):
            if setup is not None:
                setup()
            fn()
        return synchronized_timer() - start

    @staticmethod
    def host_time(fn: Callable[[], Any]) -> float:
        """Seconds until one call returns, starting from an idle GPU: the host's share of a step.

        When it is close to the step time, the step is bound by Python and kernel launches, not by
        the GPU, and its timings move with whatever else the host is doing.
        """
        start = synchronized_timer()
        fn()
        host = time.perf_counter() - start
        synchronize()
        return host

    def gpu_time(self, fn: Callable[[], Any], seconds_per_call: float) -> dict[str, Any]:
        """extra_info's GPU busy time of `fn` (perf/gpu_time.py), measured after the timed rounds, or
        `gpu_ms_absent` with the reason it could not be measured; a failure here never fails the run."""
        measured = unavailable_reason(self.device)
        if measured is None:
            with nvtx_range("gpu_time"):
                try:
                    measured = measure_gpu_time(fn, calls_for(seconds_per_call), self.device)
                except Exception as err:  # the timed rounds stand; only this figure is lost
                    measured = failure("a call failed while GPU time was measured", err)
        return gpu_figures(measured, seconds_per_call * 1e3)

    def time_phases(
        self, phases: Sequence[tuple[str, Callable[[Any], Any]]], repeats: int
    ) -> dict[str, float]:
        """Median milliseconds of each phase of a step, the phases run `repeats` times in order.

        Each phase gets the previous one's return value (the first gets None), as a backward gets
        the forward's output. On a GPU, CUDA events between the phases time them without a host
        synchronization inside the step; on the CPU, the host clock does.
        """
        if repeats < 1:
            raise ValueError(f"repeats must be >= 1; got {repeats}")
        cuda = self.device.type == "cuda"
        marks: list[list[Any]] = []
        synchronize()
        for _ in range(repeats):
            value = None
            row = [mark(cuda)]
            for _name, phase in phases:
                value = phase(value)
                row.append(mark(cuda))
            marks.append(row)
        synchronize()
        medians = {}
        for i, (name, _phase) in enumerate(phases):
            medians[name] = statistics.median(elapsed_ms(row[i], row[i + 1], cuda) for row in marks)
        return medians

    def run(
        self, fn: Callable[[], Any], *, work: Work, warmup_steps: int = 2, **extra: Any
    ) -> dict[str, Any]:
        """Warm up, time `fn` with pytest-benchmark, attach derived figures to extra_info.

        With warmup_steps == 0 the first timed round is the first call ever made, which is the point
        of that setting: it shows what allocation, autotuning and lazy initialization cost.
        """
        seconds_per_call = self.warm_up(fn, warmup_steps)
        rounds, iterations = self.policy.plan(seconds_per_call)
        return self._timed(fn, work, warmup_steps, rounds, iterations, setup=None, extra=extra)

    def run_interleaved(
        self,
        fn: Callable[[], Any],
        baseline: Callable[[], Any],
        *,
        work: Work,
        warmup_steps: int = 2,
        **extra: Any,
    ) -> dict[str, Any]:
        """Time `fn` as `run` does, with one call of `baseline` timed before each round of it.

        The two alternate round by round, so drifts of the host or the GPU (load, clocks) reach
        both alike and their ratio holds where each one's own time moves. A round is one call
        (pytest-benchmark runs a setup only with one iteration per round), so use it for calls of
        a few milliseconds or more. extra_info gets baseline_median_ms and ratio_to_baseline.
        """
        self.warm_up(baseline, warmup_steps)
        seconds_per_call = self.warm_up(fn, warmup_steps)
        rounds, _ = self.policy.plan(2 * seconds_per_call if seconds_per_call else None)
        baseline_times: list[float] = []

        def timed_baseline() -> None:
            start = synchronized_timer()
            baseline()
            baseline_times.append(synchronized_timer() - start)

        info = self._timed(fn, work, warmup_steps, rounds, 1, setup=timed_baseline, extra=extra)
        if baseline_times and "median_ms" in info:
            baseline_ms = statistics.median(baseline_times) * 1e3
            info.update(baseline_median_ms=baseline_ms, ratio_to_baseline=info["median_ms"] / baseline_ms)
        return info

    def record_rounds(
        self,
        durations_s: Sequence[float],
        *,
        work: Work,
        gpu: GpuTime | str,
        iterations: int = 1,
        **extra: Any,
    ) -> dict[str, Any]:
        """Hand pytest-benchmark rounds timed elsewhere, e.g. by ranks in other processes.

        Each duration is one round of `iterations` calls. pytest-benchmark only times what it calls,
        so it calls a no-op while its timer replays the durations: its statistics, storage,
        comparisons and tables then treat these rounds like any other. extra_info gets the derived
        figures, the GPU time measured where the rounds ran (`gpu`, or why there is none) and `extra`;
        figures of this process (peak memory, host time) are left out.
        """
        if not durations_s or any(d < 0 for d in durations_s):
            raise ValueError(f"durations_s must be non-negative and not empty; got {list(durations_s)!r}")
        ticks = _replay_clock(durations_s)
        timer = self.benchmark._timer  # pytest-benchmark 4 and 5 read the clock from this attribute
        self.benchmark._timer = lambda: next(ticks)
        try:
            self.benchmark.pedantic(_nothing, rounds=len(durations_s), iterations=iterations, warmup_rounds=0)
        finally:
            self.benchmark._timer = timer
        info = self.benchmark.extra_info
        info.update(extra)
        info.update(rounds=len(durations_s), iterations=iterations, device=str(self.device))
        stats = getattr(self.benchmark, "stats", None)
        if stats is not None:
            info.update(derived_figures(stats.stats.median, work, gpu_name(self.device)))
            info.update(flops_per_call=work.flops, tokens_per_call=work.tokens, precision=work.precision)
            info.update(gpu_figures(gpu, stats.stats.median * 1e3))
        return info

    def _timed(
        self,
        fn: Callable[[], Any],
        work: Work,
        warmup_steps: int,
        rounds: int,
        iterations: int,
        setup: Callable[[], None] | None,
        extra: dict[str, Any],
    ) -> dict[str, Any]:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        with nvtx_range(TIMED_RANGE):
            self.benchmark.pedantic(fn, setup=setup, rounds=rounds, iterations=iterations, warmup_rounds=0)
        info = self.benchmark.extra_info
        info.update(extra)
        info.update(warmup_steps=warmup_steps, rounds=rounds, iterations=iterations, device=str(self.device))
        info["peak_memory_bytes"] = (
            torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else None
        )
        stats = getattr(self.benchmark, "stats", None)
        if stats is not None and self.device.type == "cuda":
            info["host_ms"] = self.host_time(fn) * 1e3
        if stats is not None:
            info.update(self.gpu_time(fn, stats.stats.median))
        if self.snapshot_dir is not None and self.device.type == "cuda":
            info["memory_snapshot"] = str(write_memory_snapshot(fn, self.snapshot_dir, self.benchmark.name))
        if stats is not None:  # None when benchmarks are disabled: the call ran once, untimed
            tf32 = self.device.type == "cuda" and tf32_enabled()
            info.update(derived_figures(stats.stats.median, work, gpu_name(self.device), tf32))
            info.update(flops_per_call=work.flops, tokens_per_call=work.tokens, precision=work.precision)
        return info
