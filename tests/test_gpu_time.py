"""GPU busy time per call (perf/harness/gpu_time.py): the interval arithmetic and the split into calls on any
machine; the measurement itself on a GPU, against kernels of known length."""

from __future__ import annotations

import statistics
import time
from types import SimpleNamespace

import pytest
import torch

from perf.harness import gpu_time
from perf.harness.gpu_time import MARKER_KERNEL, Activity, GpuTime, busy_ns, calls_for, split_calls

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: measures kernels")


def measures_kernels(test):
    """A test that times kernels on the GPU: skipped without one, and alone under pytest-xdist, where
    another process's kernels would share the GPU and count in the time."""
    return pytest.mark.gpu(pytest.mark.alone(needs_gpu(test)))


# --------------------------------------------------------------------------- pure parts
@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        ([], 0),
        ([(0, 10)], 10),
        ([(0, 10), (20, 25)], 15),  # the gap between them is idle
        ([(0, 10), (5, 15)], 15),  # two streams at once count once
        ([(5, 15), (0, 10), (2, 3)], 15),  # any order, one inside another
        ([(0, 10), (10, 20)], 20),  # touching
    ],
)
def test_busy_is_the_union_of_intervals(intervals, expected):
    assert busy_ns(intervals) == expected


def marker(start: int) -> Activity:
    return Activity(f"at::cuda::(anonymous namespace)::{MARKER_KERNEL}(long)", start, start + 1)


def test_split_calls_assigns_activities_between_each_calls_markers():
    activities = [
        marker(0),
        Activity("gemm", 5, 10),
        Activity("copy", 6, 8),
        marker(20),
        Activity("barrier", 22, 24),  # between two calls: in neither
        marker(25),
        Activity("gemm", 30, 50),
        marker(60),
    ]
    calls = split_calls(list(reversed(activities)), calls=2)  # order of the profile does not matter
    assert [[a.name for a in call] for call in calls] == [["gemm", "copy"], ["gemm"]]


def test_calls_without_device_work_have_a_reason_not_a_zero():
    assert gpu_time._measured([marker(0), marker(10), marker(20), marker(30)], 2, 0.1) == (
        "its calls ran no kernel, copy or memset on the GPU"
    )
    one_busy = [marker(0), Activity("gemm", 2, 6), marker(10), marker(20), marker(30)]
    measured = gpu_time._measured(one_busy, 2, 0.1)
    assert measured.per_call_ms == (4e-6, 0.0)  # one call idle among others is a figure of its own


def test_split_calls_refuses_a_profile_that_lost_markers():
    with pytest.raises(ValueError, match="3 of the 6 marker kernels around 3 calls"):
        split_calls([marker(0), Activity("gemm", 5, 10), marker(20), marker(30)], calls=3)


def test_a_burst_splits_calls_at_the_markers_between_them():
    activities = [
        Activity("lead", 0, 4),  # a lead call before the first marker: in no call
        marker(5),
        Activity("gemm", 7, 10),
        Activity("copy", 8, 12),
        marker(12),  # queued right behind the first call's work
        Activity("gemm", 14, 30),
        marker(31),
    ]
    calls = split_calls(list(reversed(activities)), calls=2, method=gpu_time.BURST)
    assert [[a.name for a in call] for call in calls] == [["gemm", "copy"], ["gemm"]]
    measured = gpu_time._measured(activities, 2, 0.1, gpu_time.BURST)
    assert measured.method == gpu_time.BURST and measured.per_call_ms == (5e-6, 16e-6)
    assert measured.figures(median_ms=1.0)["gpu_method"] == "burst"
    with pytest.raises(ValueError, match="2 of the 4 marker kernels around 3 calls"):
        split_calls(activities[:5], calls=3, method=gpu_time.BURST)


@pytest.mark.parametrize(("seconds", "calls"), [(None, 3), (1.0, 3), (0.01, 20), (0.001, 200), (1e-6, 1000)])
def test_a_burst_is_about_its_target_work(seconds, calls):
    assert gpu_time.burst_calls_for(seconds) == calls


def test_the_method_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(gpu_time.METHOD_VARIABLE, raising=False)
    assert gpu_time.configured_method() == gpu_time.STEADY
    monkeypatch.setenv(gpu_time.METHOD_VARIABLE, "isolated")
    assert gpu_time.configured_method() == gpu_time.ISOLATED
    monkeypatch.setenv(gpu_time.METHOD_VARIABLE, "rounds")
    with pytest.raises(ValueError, match="PERF_GPU_TIME='rounds': accepted: steady, burst, isolated, both"):
        gpu_time.configured_method()


def test_a_burst_on_the_cpu_gets_a_reason_and_calls_nothing():
    ran = []
    measured = gpu_time.measure_burst(lambda: ran.append(1), 4, torch.device("cpu"))
    assert isinstance(measured, str) and measured.startswith("runs on cpu") and ran == []


def test_isolated_calls_are_measured_isolated_whatever_the_method(monkeypatch):
    monkeypatch.setenv(gpu_time.METHOD_VARIABLE, "burst")
    asked = []
    monkeypatch.setattr(gpu_time, "profile_calls", lambda fn, s, device: asked.append("isolated") or "alone")
    monkeypatch.setattr(
        gpu_time, "measure_burst", lambda fn, calls, device, lead: asked.append(("burst", lead)) or "burst"
    )
    device = torch.device("cuda", 0)
    assert gpu_time.steady_gpu_time(lambda: None, 0.01, device, isolated=True) == "alone"
    assert gpu_time.steady_gpu_time(lambda: None, 0.01, device) == "burst"
    assert asked == ["isolated", ("burst", 20)]  # lead calls of about BURST_LEAD_S


def test_both_records_the_isolated_median_beside_the_burst(monkeypatch):
    monkeypatch.setenv(gpu_time.METHOD_VARIABLE, "both")
    burst = GpuTime((1.0, 1.0, 1.0), 1.0, 0.1, method=gpu_time.BURST)
    monkeypatch.setattr(gpu_time, "measure_burst", lambda fn, calls, device, lead: burst)
    monkeypatch.setattr(gpu_time, "profile_calls", lambda fn, s, device: GpuTime((1.2, 1.4, 1.3), 1.0, 0.1))
    measured = gpu_time.steady_gpu_time(lambda: None, 0.01, torch.device("cuda", 0))
    figures = measured.figures(median_ms=2.0)
    assert figures["gpu_method"] == "burst" and figures["gpu_ms"] == 1.0
    assert figures["gpu_isolated_ms"] == 1.3


@pytest.mark.parametrize(
    ("method", "rounds", "chosen"),
    [
        ("steady", (1.0, 1.02, 0.98), "rounds"),  # busy through the rounds: their figure stands
        ("both", (1.0, 1.02, 0.98), "rounds"),
        ("steady", (1.1, 1.2, 1.0), "burst"),  # busy 1.0 of 1.1 ms: the rounds waited on the host
        ("burst", (1.0, 1.02, 0.98), "burst"),
    ],
)
def test_the_rounds_figure_stands_where_the_device_was_busy_through_them(method, rounds, chosen):
    burst = GpuTime((1.0, 0.99, 1.01), 2.0, 0.1, {"k": (6, 3000)}, method=gpu_time.BURST)
    measured = gpu_time.with_rounds(burst, rounds, method)
    figures = measured.figures(median_ms=1.05)
    assert figures["gpu_method"] == chosen and figures["gpu_burst_ms"] == 1.0
    assert figures["gpu_rounds_ms"] == statistics.median(rounds)
    assert (figures["gpu_rounds_ms_min"], figures["gpu_rounds_ms_max"]) == (min(rounds), max(rounds))
    expected = figures["gpu_rounds_ms"] if chosen == "rounds" else 1.0
    assert figures["gpu_ms"] == expected and figures["gpu_calls"] == 3
    assert figures["gpu_kernels"][0]["launches"] == 2.0  # per burst call, whichever figure stands


def test_rounds_leave_isolated_calls_and_reasons_alone():
    alone = GpuTime((1.0, 1.0), 1.0, 0.1)
    assert gpu_time.with_rounds(alone, (0.5,), "steady") is alone
    assert gpu_time.with_rounds("runs on cpu", (0.5,), "steady") == "runs on cpu"
    burst = GpuTime((1.0,), 1.0, 0.1, method=gpu_time.BURST)
    assert gpu_time.with_rounds(burst, (), "steady") is burst


@pytest.mark.parametrize(
    ("seconds", "calls"), [(None, 2), (0.0, 2), (1.0, 2), (0.01, 3), (0.001, 30), (1e-6, 1000)]
)
def test_calls_make_about_the_target_work(seconds, calls):
    assert calls_for(seconds) == calls


def _scripted(per_call_ms: list[tuple[float, ...]], monkeypatch) -> list[int]:
    """measure_gpu_time replaced by one that returns the given per-call times in turn; the calls asked."""
    asked: list[int] = []
    results = iter(per_call_ms)

    def measure(fn, calls, device):
        asked.append(calls)
        times = next(results)
        return GpuTime(times, 3.0, 0.1, {"gemm": (len(times), int(sum(times) * 1e6))})

    monkeypatch.setattr(gpu_time, "measure_gpu_time", measure)
    return asked


def test_two_calls_that_agree_are_enough(monkeypatch):
    asked = _scripted([(100.0, 100.4)], monkeypatch)
    measured = gpu_time.profile_calls(lambda: None, 0.1, torch.device("cuda", 0))
    assert asked == [2] and measured.per_call_ms == (100.0, 100.4)


def test_two_calls_apart_get_more_measured_as_one(monkeypatch):
    asked = _scripted([(100.0, 103.0), (101.0, 100.5, 100.7)], monkeypatch)
    measured = gpu_time.profile_calls(lambda: None, 0.1, torch.device("cuda", 0))
    assert asked == [2, gpu_time.MORE_CALLS]
    assert measured.per_call_ms == (100.0, 103.0, 101.0, 100.5, 100.7)
    assert measured.profile_s == pytest.approx(0.2)
    assert measured.kernels == {"gemm": (5, int(203.0e6) + int(302.2e6))}  # launches and ns add up
    figures = measured.figures(median_ms=110.0)
    assert figures["gpu_calls"] == 5 and figures["gpu_ms"] == 100.7
    assert figures["gpu_kernels"] == [
        {"kernel": "gemm", "launches": 1.0, "us": pytest.approx(101040.0, abs=1)}
    ]


def test_many_calls_are_not_extended(monkeypatch):
    asked = _scripted([(1.0, 1.5, 1.2, 1.1, 1.3)], monkeypatch)
    gpu_time.profile_calls(lambda: None, 0.006, torch.device("cuda", 0))
    assert asked == [5]  # spread 40%, but enough calls for their median already


def test_figures_carry_median_spread_and_busy_share():
    figures = GpuTime((4.0, 6.0, 5.0, 5.0), activities_per_call=7.0, profile_s=0.2).figures(median_ms=10.0)
    assert figures["gpu_ms"] == 5.0 and figures["gpu_calls"] == 4
    assert figures["gpu_ms_min"] == 4.0 and figures["gpu_ms_max"] == 6.0
    assert figures["gpu_ms_iqr"] == pytest.approx(1.0)  # pytest-benchmark's quartiles, as for rounds
    assert figures["gpu_busy_share"] == pytest.approx(0.5) and figures["gpu_profile_s"] == 0.2
    assert figures["gpu_kernels"] == []  # no kernels recorded: an empty table
    assert gpu_time.gpu_figures("on the CPU", 10.0) == {"gpu_ms_absent": "on the CPU"}


def test_cpu_work_gets_a_reason_and_its_calls_still_run():
    ran = []
    measured = gpu_time.measure_gpu_time(lambda: ran.append(1), 4, torch.device("cpu"))
    assert isinstance(measured, str) and measured.startswith("runs on cpu")
    assert len(ran) == 4  # ranks rely on it: every rank makes the same calls


@pytest.mark.parametrize("variable", gpu_time.TOOL_VARIABLES)
def test_a_profiling_tool_in_the_process_is_a_reason(monkeypatch, variable):
    monkeypatch.setenv(variable, "1")
    reason = gpu_time.unavailable_reason(torch.device("cuda", 0))
    assert reason is not None and variable in reason and "CUPTI" in reason


def test_run_notes_count_the_cost_and_group_the_reasons():
    infos = [
        {"gpu_ms": 1.0, "gpu_profile_s": 0.5},
        {"gpu_ms": 2.0, "gpu_profile_s": 1.0},
        {"gpu_ms_absent": "runs on cpu"},
        {"gpu_ms_absent": "runs on cpu"},
    ]
    assert gpu_time.run_notes(infos) == [
        "GPU busy time (gpu_ms): measured for 2 benchmark(s) after their timed rounds (2 isolated), in 1.5 s",
        "no GPU busy time for 2 benchmark(s): runs on cpu",
    ]


# --------------------------------------------------------------------------- on a GPU
@pytest.fixture(scope="module")
def spin():
    """spin(ms): a one-program kernel busy for about `ms` milliseconds. One program, so that two of them
    on two streams run side by side; not torch.cuda._sleep, which is the measurement's marker."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["steps"])  # one compiled kernel for every length, calibrated once
    def _busy(x_ptr, steps):
        x = tl.load(x_ptr)
        for _ in range(steps):
            x = x * 0.999 + 0.001  # each step waits for the last: the loop's length is its time
        tl.store(x_ptr, x)

    x = torch.ones(1, device="cuda")

    def launch(steps: int) -> None:
        _busy[(1,)](x, steps)

    launch(1000)  # compile
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    launch(10**6)
    end.record()
    end.synchronize()
    steps_per_ms = 10**6 / start.elapsed_time(end)
    spin = lambda ms: launch(round(ms * steps_per_ms))  # noqa: E731
    start.record()
    spin(2.0)
    end.record()
    end.synchronize()
    assert 1.8 < start.elapsed_time(end) < 2.2, "the kernel's time does not follow its step count"
    return spin


@measures_kernels
def test_gpu_time_counts_the_device_not_the_host(spin):
    """A call that spends 20 ms on the host and 2 ms on the GPU: about 2 ms busy, a tenth of its time."""

    def call():
        time.sleep(0.02)
        spin(2.0)

    measured = gpu_time.measure_gpu_time(call, 5, torch.device("cuda"))
    assert isinstance(measured, GpuTime), measured
    assert len(measured.per_call_ms) == 5 and measured.activities_per_call == 1
    assert all(1.7 < ms < 2.5 for ms in measured.per_call_ms), measured.per_call_ms


@measures_kernels
def test_twice_the_kernels_read_twice_the_time(spin):
    """The figure the gate judges: a deliberate slowdown of the GPU work shows at its size."""
    device = torch.device("cuda")
    once = gpu_time.measure_gpu_time(lambda: spin(1.0), 5, device)
    twice = gpu_time.measure_gpu_time(lambda: (spin(1.0), spin(1.0)), 5, device)
    ratio = sorted(twice.per_call_ms)[2] / sorted(once.per_call_ms)[2]
    assert ratio == pytest.approx(2.0, rel=0.05)


@measures_kernels
def test_kernel_table_names_the_kernels_and_their_time_per_call(spin):
    """What the gate explains a regression with: an added kernel shows with its launches and time."""
    device = torch.device("cuda")
    x = torch.randn(2**20, device=device)
    measured = gpu_time.measure_gpu_time(lambda: (spin(1.0), x.sin(), x.sin()), 4, device)
    rows = {row["kernel"]: row for row in measured.figures(median_ms=2.0)["gpu_kernels"]}
    sin = [row for name, row in rows.items() if "sin" in name.lower()]
    assert len(sin) == 1 and sin[0]["launches"] == 2.0 and sin[0]["us"] > 0, rows
    assert rows["_busy"]["launches"] == 1.0 and 700 < rows["_busy"]["us"] < 1500, rows  # the 1 ms spin
    assert not any("spin_kernel" in name for name in rows)  # the markers are outside every call
    assert sum(row["us"] for row in rows.values()) / 1e3 >= min(measured.per_call_ms) * 0.99


@measures_kernels
def test_clock_sampler_reads_the_gpus_clock_while_it_works(spin):
    from perf.harness.clocks import ClockSampler, gpu_clock_state

    device = torch.device("cuda")
    with ClockSampler(device, interval_s=0.005) as sampler:
        for _ in range(20):
            spin(5.0)
        torch.cuda.synchronize()
    figures = sampler.figures()
    assert "clocks" in figures, figures  # the GPU machines' image has nvidia-ml-py
    clocks = figures["clocks"]
    assert (
        clocks["samples"] >= 10
        and 300 < clocks["sm_mhz_min"] <= clocks["sm_mhz_mean"] <= clocks["sm_mhz_max"]
    )
    state = gpu_clock_state(device)
    assert state.get("power_limit_w", 0) > 0 and state.get("max_sm_clock_mhz", 0) >= clocks["sm_mhz_max"]


@measures_kernels
def test_two_streams_at_once_count_once(spin):
    side = torch.cuda.Stream()

    def call():
        side.wait_stream(torch.cuda.current_stream())
        spin(3.0)
        with torch.cuda.stream(side):
            spin(3.0)
        torch.cuda.current_stream().wait_stream(side)

    measured = gpu_time.measure_gpu_time(call, 3, torch.device("cuda"))
    assert isinstance(measured, GpuTime), measured
    assert measured.activities_per_call == 2
    assert all(2.7 < ms < 4.5 for ms in measured.per_call_ms), measured.per_call_ms  # not 6 ms


@measures_kernels
def test_graph_replays_and_copies_are_measured():
    a = torch.randn(2048, 2048, device="cuda")
    host = torch.randn(2**24).pin_memory()
    device_copy = torch.empty(2**24, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        (a @ a).relu_()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (a @ a).relu_()

    def call():
        graph.replay()
        device_copy.copy_(host, non_blocking=True)

    measured = gpu_time.measure_gpu_time(call, 4, torch.device("cuda"))
    assert isinstance(measured, GpuTime), measured
    assert measured.activities_per_call == 3  # the graph's matmul and relu, and the copy
    assert min(measured.per_call_ms) > 0


@measures_kernels
def test_before_call_is_not_measured(spin):
    measured = gpu_time.measure_gpu_time(
        lambda: spin(1.0), 3, torch.device("cuda"), before_call=lambda: spin(5.0)
    )
    assert isinstance(measured, GpuTime), measured
    assert all(ms < 1.5 for ms in measured.per_call_ms), measured.per_call_ms


# --------------------------------------------------------------------------- failures never fail a run
@pytest.fixture
def no_known_reason(monkeypatch):
    """Measure as if on a GPU with CUPTI free: what a failure of the profiler itself leads to."""
    monkeypatch.setattr(gpu_time, "unavailable_reason", lambda device: None)
    monkeypatch.setattr(gpu_time, "_process_reason", None)


def test_a_profiler_that_records_nothing_is_a_reason_remembered_for_the_process(no_known_reason, monkeypatch):
    class NothingRecorded:  # what torch.profiler gives where CUPTI is held by another tool
        profiler = SimpleNamespace(kineto_results=SimpleNamespace(events=list))

        def stop(self) -> None:
            pass

    monkeypatch.setattr(gpu_time, "_started_profiler", lambda: (NothingRecorded(), None))
    ran = []
    measured = gpu_time.measure_gpu_time(lambda: ran.append(1), 3, torch.device("cpu"))
    assert isinstance(measured, str) and "recorded no device activity" in measured
    assert len(ran) == 3
    assert gpu_time._process_reason == measured  # later benchmarks get it without a profiler start


def test_a_profiler_that_does_not_start_is_a_reason(no_known_reason, monkeypatch):
    def refuse(self):
        raise RuntimeError("Can't disable Kineto profiler when it's not running\nmore detail")

    monkeypatch.setattr(torch.profiler.profile, "start", refuse)
    measured = gpu_time.measure_gpu_time(lambda: None, 3, torch.device("cpu"))
    assert measured == (
        "torch.profiler did not start: RuntimeError: Can't disable Kineto profiler when it's not running"
    )


def test_an_error_of_the_function_itself_propagates(no_known_reason):
    def failing():
        raise ValueError("wrong shape")

    with pytest.raises(ValueError, match="wrong shape"):
        gpu_time.measure_gpu_time(failing, 3, torch.device("cpu"))


@measures_kernels
def test_a_burst_counts_the_device_not_the_host(spin):
    """Calls back to back that spend 5 ms on the host and 2 ms on the GPU: about 2 ms busy each."""

    def call():
        time.sleep(0.005)
        spin(2.0)

    measured = gpu_time.measure_burst(call, 5, torch.device("cuda"))
    assert isinstance(measured, GpuTime), measured
    assert measured.method == gpu_time.BURST and len(measured.per_call_ms) == 5
    assert all(1.7 < ms < 2.5 for ms in measured.per_call_ms), measured.per_call_ms


@measures_kernels
def test_a_burst_reads_twice_the_kernels_as_twice_the_time(spin):
    device = torch.device("cuda")
    once = gpu_time.measure_burst(lambda: spin(1.0), 9, device)
    twice = gpu_time.measure_burst(lambda: (spin(1.0), spin(1.0)), 9, device)
    ratio = sorted(twice.per_call_ms)[4] / sorted(once.per_call_ms)[4]
    assert ratio == pytest.approx(2.0, rel=0.05)
    assert twice.activities_per_call == 2  # the markers between calls belong to none
