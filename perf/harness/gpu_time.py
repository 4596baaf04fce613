"""GPU busy time per call: how long the device worked for one call, whatever the host did meanwhile.

A host-bound step takes as long as the host, whose speed moves within a run on a shared machine; the
time its GPU spends in kernels, copies and memsets does not. Measured from CUPTI through torch.profiler
(device activity only) as the union of the intervals the device ran something for the call, by one of
three methods recorded as `gpu_method` (`rounds`, `burst`, `isolated`; docs/measuring.md says when
each applies). Where it cannot be measured, `measure_gpu_time` returns the reason and the run goes on.
"""

from __future__ import annotations

import os
import statistics
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from perf.harness.kernel_table import EXTRA_INFO_KEY as KERNELS_KEY
from perf.harness.kernel_table import Activity, kernel_rows, kernel_totals

# Calls profiled: about TARGET_S of work, at least MIN_CALLS; beyond MAX_CALLS the profiler's event list
# costs more than the calls do. Where the first calls are few and apart by more than SPREAD_FOR_MORE
# (of their median), MORE_CALLS more are profiled (NOTES.md: what the profiler costs).
MIN_CALLS = 2
TARGET_S = 0.03
MAX_CALLS = 1000
SPREAD_FOR_MORE = 0.01
MORE_CALLS = 3
# The burst: about BURST_S of counted calls, at least BURST_MIN_CALLS, after about BURST_LEAD_S of
# uncounted ones, at least one.
BURST_S = 0.2
BURST_MIN_CALLS = 3
BURST_LEAD_S = 0.2
# How a figure was measured (extra_info gpu_method); a result without gpu_method was measured isolated.
ROUNDS, BURST, ISOLATED = "rounds", "burst", "isolated"
# The run's choice (--gpu-time): `steady` takes the rounds' figure where the device was busy through them,
# else the burst's; `burst` and `isolated` take that method everywhere; `both` is steady with isolated
# calls' median beside it (gpu_isolated_ms), for comparison.
STEADY, BOTH = "steady", "both"
METHODS = (STEADY, BURST, ISOLATED, BOTH)
# The rounds' figure stands for the GPU's where the burst's busy time is at least this share of it: the
# device idled for at most the rest (a GPU-bound call reads 0.97-1.03, host-bound training steps 0.18-0.94).
ROUNDS_MIN_BUSY = 0.95
METHOD_VARIABLE = "PERF_GPU_TIME"  # the run's method, seen by the processes it starts (ranks, allocators)
# The name of torch.cuda._sleep's kernel ("at::cuda::(anonymous namespace)::spin_kernel(long)").
MARKER_KERNEL = "spin_kernel"
# Set in a process that Nsight Systems profiles, or into which another CUDA tool (ncu, a sanitizer)
# is injected: CUPTI then belongs to that tool. torch.profiler's first start under nsys spends
# seconds failing to subscribe (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED), then records
# nothing (NOTES.md: What the profiler costs); asking the environment costs nothing.
TOOL_VARIABLES = ("NSYS_PROFILING_SESSION_ID", "CUDA_INJECTION64_PATH")

# Why device activity cannot be recorded in this process, once found: every later call would fail
# the same way, and each failed start can cost seconds.
_process_reason: str | None = None


@dataclass(frozen=True)
class GpuTime:
    """Busy milliseconds of each measured call, its kernels, and what the measurement cost."""

    per_call_ms: tuple[float, ...]
    activities_per_call: float  # median count of kernels, copies and memsets per call
    profile_s: float  # host seconds the measurement took, profiler start and stop included
    # Per full kernel name: launches and nanoseconds over all the calls (perf/harness/kernel_table.py).
    kernels: Mapping[str, tuple[int, int]] = field(default_factory=dict, repr=False)
    method: str = ISOLATED  # the figure's method: ROUNDS (from rounds_ms), BURST or ISOLATED
    isolated_ms: float | None = None  # with method `both`: the median of isolated calls, for comparison
    rounds_ms: tuple[float, ...] = ()  # device milliseconds per call of each timed round, where recorded

    @property
    def spread(self) -> float:
        """(max - min) / median of the calls' busy times."""
        return (max(self.per_call_ms) - min(self.per_call_ms)) / statistics.median(self.per_call_ms)

    def merged(self, more: GpuTime) -> GpuTime:
        """These calls and `more`, as one measurement."""
        kernels = dict(self.kernels)
        for name, (launches, ns) in more.kernels.items():
            had = kernels.get(name, (0, 0))
            kernels[name] = (had[0] + launches, had[1] + ns)
        calls = len(self.per_call_ms) + len(more.per_call_ms)
        activities = (
            self.activities_per_call * len(self.per_call_ms)
            + more.activities_per_call * len(more.per_call_ms)
        ) / calls
        return GpuTime(
            self.per_call_ms + more.per_call_ms,
            activities,
            self.profile_s + more.profile_s,
            kernels,
            self.method,
            self.isolated_ms,
            self.rounds_ms,
        )

    def figures(self, median_ms: float | None) -> dict[str, Any]:
        """extra_info entries: gpu_ms (median of the calls, or of the rounds where the method is ROUNDS),
        its spread, gpu_busy_share against `median_ms`, and each method's figure that was measured."""
        from pytest_benchmark.stats import Stats  # the quartiles the wall-time statistics use

        stats = Stats()
        values = self.rounds_ms if self.method == ROUNDS else self.per_call_ms
        for value in values:
            stats.update(value)
        gpu_ms = stats.median
        figures = {
            "gpu_ms": gpu_ms,
            "gpu_method": self.method,
            "gpu_ms_iqr": stats.iqr,
            "gpu_ms_stddev": stats.stddev,
            "gpu_ms_min": stats.min,
            "gpu_ms_max": stats.max,
            "gpu_calls": len(values),
            "gpu_activities": self.activities_per_call,
            "gpu_busy_share": gpu_ms / median_ms if median_ms else None,
            "gpu_profile_s": self.profile_s,
            KERNELS_KEY: kernel_rows(self.kernels, len(self.per_call_ms)),
        }
        if self.method != ISOLATED:
            figures["gpu_burst_ms"] = statistics.median(self.per_call_ms)
        if self.rounds_ms:
            figures.update(
                gpu_rounds_ms=statistics.median(self.rounds_ms),
                gpu_rounds_ms_min=min(self.rounds_ms),
                gpu_rounds_ms_max=max(self.rounds_ms),
            )
        if self.isolated_ms is not None:
            figures["gpu_isolated_ms"] = self.isolated_ms
        return figures


def with_rounds(measured: GpuTime | str, rounds_ms: Sequence[float], method: str) -> GpuTime | str:
    """A burst's measurement with the timed rounds' device times beside it; under the `steady` and `both`
    methods the rounds' figure becomes gpu_ms where the burst shows the device busy through the rounds
    (ROUNDS_MIN_BUSY). The rounds hold the clocks near their top, synchronizing after each round, while a
    burst settles under the power cap by a margin that moves from run to run (NOTES.md: A steady GPU
    figure); a host-bound call's rounds time the host, so the burst stands there."""
    if not isinstance(measured, GpuTime) or measured.method != BURST or not rounds_ms:
        return measured
    rounds = replace(measured, rounds_ms=tuple(rounds_ms))
    busy = statistics.median(measured.per_call_ms) >= ROUNDS_MIN_BUSY * statistics.median(rounds_ms)
    return replace(rounds, method=ROUNDS) if method in (STEADY, BOTH) and busy else rounds


def gpu_figures(measured: GpuTime | str | None, median_ms: float | None) -> dict[str, Any]:
    """extra_info entries for a measurement or the reason there is none (`gpu_ms_absent`)."""
    if isinstance(measured, GpuTime):
        return measured.figures(median_ms)
    return {"gpu_ms_absent": measured or "not measured"}


def run_notes(infos: Iterable[dict[str, Any]]) -> list[str]:
    """For the end of a run: what GPU busy time cost, and why benchmarks have none, by reason."""
    infos = list(infos)
    measured = [x for x in infos if x.get("gpu_ms") is not None]
    notes = []
    if measured:
        seconds = sum(x.get("gpu_profile_s") or 0.0 for x in measured)
        methods = Counter(x.get("gpu_method", ISOLATED) for x in measured)
        how = ", ".join(f"{count} {method}" for method, count in sorted(methods.items()))
        notes.append(
            f"GPU busy time (gpu_ms): measured for {len(measured)} benchmark(s) after their timed rounds "
            f"({how}), in {seconds:.1f} s"
        )
    absent = Counter(x["gpu_ms_absent"] for x in infos if x.get("gpu_ms_absent"))
    notes += [f"no GPU busy time for {count} benchmark(s): {reason}" for reason, count in absent.items()]
    return notes


def calls_for(seconds_per_call: float | None) -> int:
    """How many calls make about TARGET_S of work, within [MIN_CALLS, MAX_CALLS]."""
    if seconds_per_call is None or not seconds_per_call > 0:
        return MIN_CALLS
    return max(MIN_CALLS, min(MAX_CALLS, round(TARGET_S / seconds_per_call)))


def configured_method() -> str:
    """The run's method: METHOD_VARIABLE where set (the --gpu-time option sets it), else STEADY."""
    method = os.environ.get(METHOD_VARIABLE) or STEADY
    if method not in METHODS:
        raise ValueError(f"{METHOD_VARIABLE}={method!r}: accepted: {', '.join(METHODS)}")
    return method


def burst_calls_for(
    seconds_per_call: float | None, seconds: float = BURST_S, least: int = BURST_MIN_CALLS
) -> int:
    """How many calls make about `seconds` of work, within [least, MAX_CALLS]."""
    if seconds_per_call is None or not seconds_per_call > 0:
        return least
    return max(least, min(MAX_CALLS, round(seconds / seconds_per_call)))


def steady_gpu_time(
    fn: Callable[[], Any], seconds_per_call: float | None, device: torch.device, *, isolated: bool = False
) -> GpuTime | str:
    """The GPU busy time of `fn` by the run's method (`isolated` where the call needs it: several
    streams, collectives), or why it cannot be had."""
    method = ISOLATED if isolated else configured_method()
    if method == ISOLATED:
        return profile_calls(fn, seconds_per_call, device)
    lead = burst_calls_for(seconds_per_call, BURST_LEAD_S, least=1)
    measured = measure_burst(fn, burst_calls_for(seconds_per_call), device, lead=lead)
    if method == BOTH and isinstance(measured, GpuTime):
        alone = profile_calls(fn, seconds_per_call, device)
        if isinstance(alone, GpuTime):
            measured = replace(measured, isolated_ms=statistics.median(alone.per_call_ms))
    return measured


def profile_calls(
    fn: Callable[[], Any], seconds_per_call: float | None, device: torch.device
) -> GpuTime | str:
    """`measure_gpu_time` of about TARGET_S of calls; where those are few and apart by more than
    SPREAD_FOR_MORE, MORE_CALLS more, as one measurement."""
    measured = measure_gpu_time(fn, calls_for(seconds_per_call), device)
    if isinstance(measured, GpuTime) and len(measured.per_call_ms) < MIN_CALLS + MORE_CALLS:
        if measured.spread > SPREAD_FOR_MORE:
            more = measure_gpu_time(fn, MORE_CALLS, device)
            if isinstance(more, GpuTime):
                measured = measured.merged(more)
    return measured


# --------------------------------------------------------------------------- intervals
def busy_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals: time in which at least one of them ran."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def split_calls(activities: Sequence[Activity], calls: int, method: str = ISOLATED) -> list[list[Activity]]:
    """The activities of each call, told apart by the marker kernels around it: a start and an end
    marker per call (ISOLATED), or one marker between consecutive calls (BURST); activities outside
    every call's markers (work between calls, a burst's lead calls) belong to none.

    ValueError when the markers are not all there: a profile that lost activity cannot be trusted.
    """
    ordered = sorted(activities, key=lambda a: a.start_ns)
    markers = [a for a in ordered if MARKER_KERNEL in a.name]
    expected = calls + 1 if method == BURST else 2 * calls
    if len(markers) != expected:
        raise ValueError(
            f"the profile holds {len(markers)} of the {expected} marker kernels around {calls} calls; "
            "activity records were lost"
        )
    step = 1 if method == BURST else 2
    windows = [(markers[step * i].end_ns, markers[step * i + 1].start_ns) for i in range(calls)]
    per_call: list[list[Activity]] = [[] for _ in range(calls)]
    for activity in ordered:
        if MARKER_KERNEL in activity.name:
            continue
        for i, (start, end) in enumerate(windows):
            if start <= activity.start_ns < end:
                per_call[i].append(activity)
                break
    return per_call


# --------------------------------------------------------------------------- measuring
def unavailable_reason(device: torch.device) -> str | None:
    """Why GPU busy time cannot be measured for work on `device` in this process, or None."""
    if device.type != "cuda":
        return f"runs on {device.type}: GPU busy time is measured for CUDA devices"
    if _process_reason is not None:
        return _process_reason
    tools = [name for name in TOOL_VARIABLES if os.environ.get(name)]
    if tools:
        return (
            f"a CUDA profiling tool holds CUPTI in this process ({', '.join(tools)} set, e.g. by nsys "
            "profile); its own trace has the GPU times"
        )
    if not torch.autograd.kineto_available():
        return f"torch {torch.__version__} was built without Kineto: its profiler records no device activity"
    return None


def measure_gpu_time(
    fn: Callable[[], Any],
    calls: int,
    device: torch.device,
    *,
    before_call: Callable[[], Any] | None = None,
    profiled: bool = True,
) -> GpuTime | str:
    """Busy time of `calls` calls of `fn` on `device`, or why it cannot be had. Never raises for the
    profiler's sake; an error of `fn` itself propagates.

    `before_call` runs before each call's start marker, outside what is measured (ranks put their
    barrier there). With `profiled=False` the calls run the same way without a profiler: ranks other
    than the measured one must take part in every collective of the measured rank's calls.
    """
    if calls < 1:
        raise ValueError(f"calls: an int >= 1 is accepted; got {calls!r}")
    reason = unavailable_reason(device) if profiled else "measured on another rank"
    started = time.perf_counter()
    profiler, activities = None, []
    if reason is None:
        profiler, reason = _started_profiler()
    try:
        for _ in range(calls):
            if before_call is not None:
                before_call()
            _boundary(device)
            fn()
            _boundary(device)
    finally:
        if profiler is not None:
            activities, reason = _stopped_profiler(profiler, device)
    if reason is not None:
        return reason
    return _measured(activities, calls, time.perf_counter() - started)


def measure_burst(fn: Callable[[], Any], calls: int, device: torch.device, *, lead: int = 1) -> GpuTime | str:
    """Busy time of each of `calls` calls of `fn` run back to back on `device` after `lead` uncounted
    ones, a marker kernel queued between calls and no synchronization; or why it cannot be had (then
    nothing is called). Never raises for the profiler's sake; an error of `fn` itself propagates."""
    if calls < 1:
        raise ValueError(f"calls: an int >= 1 is accepted; got {calls!r}")
    reason = unavailable_reason(device)
    if reason is not None:
        return reason
    started = time.perf_counter()
    for _ in range(lead):  # queued before the profiler starts: the device is busy while it does
        fn()
    profiler, reason = _started_profiler()
    if profiler is None:
        torch.cuda.synchronize(device)
        return reason or "torch.profiler did not start"
    activities: list[Activity] = []
    try:
        _marker(device)
        for _ in range(calls):
            fn()
            _marker(device)
        torch.cuda.synchronize(device)
    finally:
        activities, reason = _stopped_profiler(profiler, device)
    if reason is not None:
        return reason
    return _measured(activities, calls, time.perf_counter() - started, BURST)


def _marker(device: torch.device) -> None:
    """A marker kernel queued on the current stream, without synchronizing."""
    with torch.cuda.device(device):
        torch.cuda._sleep(0)


def _boundary(device: torch.device) -> None:
    """A marker kernel between two synchronizations: nothing before it overlaps what follows it."""
    if device.type != "cuda":
        return
    torch.cuda.synchronize(device)
    _marker(device)
    torch.cuda.synchronize(device)


def _started_profiler() -> tuple[Any, str | None]:
    from torch.profiler import ProfilerActivity, profile

    profiler = profile(activities=[ProfilerActivity.CUDA])
    try:
        with warnings.catch_warnings():
            # "Profiler clears events at the end of each cycle": there is one cycle here.
            warnings.simplefilter("ignore")
            profiler.start()
    except Exception as err:  # a profiler that cannot start must not stop the benchmark
        return None, failure("torch.profiler did not start", err)
    return profiler, None


def _stopped_profiler(profiler: Any, device: torch.device) -> tuple[list[Activity], str | None]:
    global _process_reason
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            profiler.stop()
        events = profiler.profiler.kineto_results.events()
    except Exception as err:
        return [], failure("torch.profiler did not stop cleanly", err)
    index = device.index
    if index is None and device.type == "cuda":
        index = torch.cuda.current_device()
    cuda = torch.autograd.DeviceType.CUDA
    activities = [
        Activity(e.name(), e.start_ns(), e.start_ns() + e.duration_ns())
        for e in events
        if e.device_type() == cuda and e.device_index() == index
    ]
    if not activities:
        # Not even the markers: CUPTI delivers nothing to this process, now or later.
        _process_reason = (
            "torch.profiler recorded no device activity, not even its marker kernels: CUPTI is not "
            "available to it in this process"
        )
        return [], _process_reason
    return activities, None


def _measured(
    activities: list[Activity], calls: int, profile_s: float, method: str = ISOLATED
) -> GpuTime | str:
    try:
        per_call = split_calls(activities, calls, method)
    except ValueError as err:
        return str(err)
    if not any(per_call):
        # E.g. NCCL's all-reduce in a group of one rank: a GPU time of 0 would read as infinitely fast.
        return "its calls ran no kernel, copy or memset on the GPU"
    busy_ms = tuple(busy_ns((a.start_ns, a.end_ns) for a in call) / 1e6 for call in per_call)
    counts = statistics.median(len(call) for call in per_call)
    return GpuTime(busy_ms, float(counts), profile_s, kernel_totals(per_call), method)


def failure(what: str, err: BaseException) -> str:
    """A one-line reason: what failed, the error's type and its first line."""
    first_line = (str(err).strip().splitlines() or [""])[0][:200]
    return f"{what}: {type(err).__name__}: {first_line}"
