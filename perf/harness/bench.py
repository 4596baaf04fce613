"""The `bench` fixture's object: warm-up, round planning, the timed region and the figures it reports.

Benchmarks call `Bench.run` (or `run_interleaved`, `record_rounds`) and never time anything
themselves. A round is timed between two device synchronizations (perf.harness.timing); after the
timed rounds come the GPU busy time (perf/harness/gpu_time.py; a burst goes on from the state the
rounds left), the host time of one call and, on request, a memory snapshot, none of them inside the
timed region.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from model.precision import tf32_enabled
from perf.harness.clocks import ClockSampler
from perf.harness.gpu_time import (
    GpuTime,
    configured_method,
    failure,
    gpu_figures,
    steady_gpu_time,
    unavailable_reason,
    with_rounds,
)
from perf.harness.machine import gpu_name, peak_tflops
from perf.harness.memory_snapshot import write_memory_snapshot
from perf.harness.ranges import TIMED_RANGE, nvtx_range
from perf.harness.timing import RoundEvents, elapsed_ms, mark, synchronize, synchronized_timer


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


class Workload(Protocol):
    """What a benchmark times: one call of `step`, doing `work`."""

    step: Callable[[], Any]
    work: Work


def _step_and_work(fn: Callable[[], Any] | Workload, work: Work | None) -> tuple[Callable[[], Any], Work]:
    """A workload's step and work, or a function with the work given beside it."""
    if work is None:
        if not (hasattr(fn, "step") and hasattr(fn, "work")):
            raise TypeError("work: give the Work of one call beside a function, or pass a workload instead")
        return fn.step, fn.work
    return fn, work


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


def warm_up(fn: Callable[[], Any], steps: int) -> float | None:
    """Run `steps` untimed calls (an NVTX range "warmup"); return the duration of the last one (None if
    steps == 0)."""
    last = None
    with nvtx_range("warmup"):
        for _ in range(steps):
            start = synchronized_timer()
            fn()
            last = synchronized_timer() - start
    return last


def busy_time(
    fn: Callable[[], Any], seconds_per_call: float, device: torch.device, *, isolated: bool = False
) -> GpuTime | str:
    """The GPU busy time of `fn` (perf/harness/gpu_time.py) by the run's method, or isolated calls where
    `isolated`, measured after the timed rounds; or the reason it could not be measured: a failure here
    never fails the run."""
    measured = unavailable_reason(device)
    if measured is None:
        with nvtx_range("gpu_time"):
            try:
                measured = steady_gpu_time(fn, seconds_per_call, device, isolated=isolated)
            except Exception as err:  # the timed rounds stand; only this figure is lost
                measured = failure("a call failed while GPU time was measured", err)
    return measured


def _nothing() -> None:
    pass


def _replay_clock(durations_s: Sequence[float]) -> Iterator[float]:
    """Readings of a clock that a round's start and end find `duration` apart, round after round."""
    now = 0.0
    for duration in durations_s:
        yield now
        now += duration
        yield now


class Bench:
    """The `bench` fixture: warm-up, round planning, the timed region and the figures it reports."""

    def __init__(
        self,
        benchmark: Any,
        device: torch.device,
        policy: TimingPolicy,
        snapshot_dir: Path | None = None,
        suite: str | None = None,
        records: tuple[str, ...] = (),
    ):
        self.benchmark = benchmark
        self.device = device
        self.policy = policy
        self.snapshot_dir = snapshot_dir  # where memory snapshots go; None: none are taken
        self.suite = suite  # what results record as `suite` where a run names none
        self.records = records  # the fields the suite declares; empty: any

    def _fields(self, extra: dict[str, Any]) -> dict[str, Any]:
        """A run's own fields, with the suite's name where it gives none; a field the suite does not
        declare (perf/cases/declare.py `Suite.records`) is an error naming both."""
        unknown = sorted(set(extra) - set(self.records) - {"suite"}) if self.records else []
        if unknown:
            raise TypeError(
                f"suite {self.suite!r}: bench.run records {', '.join(unknown)}, which the suite does not "
                f"declare; its records: {', '.join(self.records)}"
            )
        return {"suite": self.suite, **extra} if self.suite else dict(extra)

    def warm_up(self, fn: Callable[[], Any], steps: int) -> float | None:
        """Run `steps` untimed calls; return the duration of the last one (None if steps == 0)."""
        return warm_up(fn, steps)

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

    def gpu_time(
        self,
        fn: Callable[[], Any],
        seconds_per_call: float,
        isolated: bool = False,
        rounds_ms: Sequence[float] = (),
    ) -> dict[str, Any]:
        """extra_info's GPU busy time of `fn` (`busy_time`, with the timed rounds' device times where
        given), or `gpu_ms_absent` with the reason it could not be measured."""
        measured = busy_time(fn, seconds_per_call, self.device, isolated=isolated)
        if not isolated:
            measured = with_rounds(measured, rounds_ms, configured_method())
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
        self,
        fn: Callable[[], Any] | Workload,
        *,
        work: Work | None = None,
        warmup_steps: int = 2,
        gpu_isolated: bool = False,
        **extra: Any,
    ) -> dict[str, Any]:
        """Warm up, time `fn` (or a workload's step) with pytest-benchmark, attach derived figures to
        extra_info.

        With warmup_steps == 0 the first timed round is the first call ever made, which is the point
        of that setting: it shows what allocation, autotuning and lazy initialization cost.
        `gpu_isolated`: its GPU time is measured call by call (work on several streams), not in a burst.
        """
        fn, work = _step_and_work(fn, work)
        seconds_per_call = self.warm_up(fn, warmup_steps)
        rounds, iterations = self.policy.plan(seconds_per_call)
        return self._timed(
            fn, work, warmup_steps, rounds, iterations, setup=None, extra=extra, isolated=gpu_isolated
        )

    def run_interleaved(
        self,
        fn: Callable[[], Any] | Workload,
        baseline: Callable[[], Any],
        *,
        work: Work | None = None,
        warmup_steps: int = 2,
        **extra: Any,
    ) -> dict[str, Any]:
        """Time `fn` as `run` does, with one call of `baseline` timed before each round of it.

        The two alternate round by round, so drifts of the host or the GPU (load, clocks) reach
        both alike and their ratio holds where each one's own time moves. A round is one call
        (pytest-benchmark runs a setup only with one iteration per round), so use it for calls of
        a few milliseconds or more. extra_info gets baseline_median_ms and ratio_to_baseline.
        """
        fn, work = _step_and_work(fn, work)
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
        if not hasattr(self.benchmark, "_timer"):  # pyproject.toml bounds pytest-benchmark below 6
            from pytest_benchmark import __version__

            raise RuntimeError(
                f"pytest-benchmark {__version__}: its fixture has no _timer, the clock record_rounds replays "
                "rounds timed elsewhere through (pytest-benchmark 4 and 5 have it)"
            )
        timer = self.benchmark._timer  # pytest-benchmark 4 and 5 read the clock from this attribute
        self.benchmark._timer = lambda: next(ticks)
        try:
            self.benchmark.pedantic(_nothing, rounds=len(durations_s), iterations=iterations, warmup_rounds=0)
        finally:
            self.benchmark._timer = timer
        info = self.benchmark.extra_info
        info.update(self._fields(extra))
        info.update(rounds=len(durations_s), iterations=iterations, device=str(self.device))
        info["clocks_absent"] = "its rounds ran in other processes; their GPU clocks were not sampled"
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
        isolated: bool = False,
    ) -> dict[str, Any]:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        # Events around each round give the device's time for the rounds (not where calls use several
        # streams: an event on one stream does not wait for the others).
        timed = RoundEvents(fn, iterations) if self.device.type == "cuda" and not isolated else fn
        # The GPU's clocks are sampled while its timed rounds and its profiled calls run.
        with ClockSampler(self.device) as clocks:
            with nvtx_range(TIMED_RANGE):
                self.benchmark.pedantic(
                    timed, setup=setup, rounds=rounds, iterations=iterations, warmup_rounds=0
                )
            info = self.benchmark.extra_info
            stats = getattr(self.benchmark, "stats", None)
            peak = torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else None
            # GPU time first: a burst goes on from the clock and power state the timed rounds left.
            gpu = {}
            if stats is not None:
                rounds_ms = timed.per_call_ms() if isinstance(timed, RoundEvents) else ()
                clocks.mark()
                gpu = self.gpu_time(fn, stats.stats.median, isolated, rounds_ms)
            info.update(self._fields(extra))
            info.update(
                warmup_steps=warmup_steps, rounds=rounds, iterations=iterations, device=str(self.device)
            )
            info["peak_memory_bytes"] = peak
            if stats is not None and self.device.type == "cuda":
                info["host_ms"] = self.host_time(fn) * 1e3
            info.update(gpu)
        if stats is not None:
            info.update(clocks.figures())
        if self.snapshot_dir is not None and self.device.type == "cuda":
            info["memory_snapshot"] = str(write_memory_snapshot(fn, self.snapshot_dir, self.benchmark.name))
        if stats is not None:  # None when benchmarks are disabled: the call ran once, untimed
            tf32 = self.device.type == "cuda" and tf32_enabled()
            info.update(derived_figures(stats.stats.median, work, gpu_name(self.device), tf32))
            info.update(flops_per_call=work.flops, tokens_per_call=work.tokens, precision=work.precision)
        return info
