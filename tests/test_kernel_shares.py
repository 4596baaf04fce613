"""Kernel by kernel in an A/B (perf/tools/judging/kernel_shares.py): a kernel that grew is named and makes its
benchmark slower where the benchmark's own time moves too much with the clock to decide; a clock that moves
every kernel alike, a kernel whose share grew only because another got faster, and a small kernel are not."""

from __future__ import annotations

import pytest

from perf.tools.judging import kernel_shares, paired_rule
from perf.tools.judging.noise_thresholds import FigureNoise, Noise
from perf.tools.judging.paired_rule import FASTER, SLOWER, UNKNOWN, Bounds, judge_all
from perf.tools.reading.results import Results
from perf.tools.reading.timings import Timing

NAME = "perf/test_attention.py::test_attention[bf16-forward_backward-b16-flash_triton]"
# The clock of each run, as under the power cap: every kernel of a run slower or faster by this factor.
CLOCK = (1.000, 1.030, 0.975, 1.012)
BASE_US = {"forward_kernel": 250.0, "backward_kernel": 700.0, "row_dot_kernel": 40.0}


def run(kernels_us: dict[str, float], clock: float) -> Results:
    """One run: its kernel table at this clock, GPU and wall time their sum."""
    table = [{"kernel": k, "launches": 1.0, "us": us * clock} for k, us in kernels_us.items()]
    gpu_s = sum(row["us"] for row in table) * 1e-6
    return Results(
        path=None,
        machine="NVIDIA H100",
        timings={NAME: Timing(gpu_s * 1.02, gpu_s * 1e-3)},
        gpu_timings={NAME: Timing(gpu_s, gpu_s * 1e-3)},
        document={"benchmarks": [{"fullname": NAME, "extra_info": {"gpu_kernels": table}}]},
        gpu_methods={NAME: "burst"},
    )


def ab(head_us: dict[str, float]) -> tuple[list[Results], list[Results]]:
    """ABBA: base at the 1st and 4th clocks, head at the 2nd and 3rd."""
    base = [run(BASE_US, CLOCK[0]), run(BASE_US, CLOCK[3])]
    head = [run(head_us, CLOCK[1]), run(head_us, CLOCK[2])]
    return base, head


# The runner's noise profile, as a noise file of many runs gives it: the clock moves the cell by about 2%
# from run to run, each kernel's share by 0.2%.
PROFILE = Noise(
    path=None,
    gpu="NVIDIA H100",
    runs=12,
    figures={"gpu": FigureNoise(4.0, 0.015, {NAME: 0.05})},
    sd={"gpu": {NAME: 0.02}, "wall": {NAME: 0.02}},
    kernel_sd={NAME: {k: {"share_sd": 0.002, "us_sd": 0.02} for k in BASE_US}},
)


def judged(head_us: dict[str, float], noise: Noise | None = PROFILE) -> paired_rule.Judgement:
    base, head = ab(head_us)
    return kernel_shares.judged(base, head, 0.01, 3.0, noise=noise).judged[NAME]


def test_the_clock_alone_moves_every_kernel_alike_and_names_none():
    judgement = judged(BASE_US)
    assert judgement.verdict == UNKNOWN and judgement.kernels == ()  # the time alone cannot decide


def test_a_kernel_four_percent_slower_is_named_where_the_time_cannot_decide():
    slower = BASE_US | {"forward_kernel": 260.0}
    base, head = ab(slower)
    assert judge_all(base, head).judged[NAME].verdict == UNKNOWN  # +1% of the time, in 3% of clock
    judgement = judged(slower)
    assert judgement.verdict == SLOWER
    assert [g.kernel for g in judgement.kernels] == ["forward_kernel"]
    assert judgement.kernels[0].time_ratio == pytest.approx(1.04, abs=0.01)
    (line,) = kernel_shares.kernel_lines(judgement)
    assert line.startswith("kernel forward_kernel: 1.03") and "x its share of the GPU time" in line


def test_a_share_grown_because_another_kernel_got_faster_is_no_slowdown():
    judgement = judged(BASE_US | {"backward_kernel": 630.0})
    assert judgement.verdict != SLOWER and judgement.kernels == ()


def test_a_kernel_below_the_least_share_is_not_judged_alone():
    judgement = judged(BASE_US | {"row_dot_kernel": 48.0})  # 4% of the time, 20% slower
    assert judgement.kernels == ()


def test_a_faster_benchmark_stays_faster():
    faster = {"forward_kernel": 262.0, "backward_kernel": 560.0, "row_dot_kernel": 40.0}
    base, head = ab(faster)
    assert judge_all(base, head).judged[NAME].verdict == FASTER
    assert judged(faster).verdict == FASTER


def test_results_without_kernel_tables_are_left_as_judged():
    base, head = ab(BASE_US)
    for results in (*base, *head):
        results.document["benchmarks"][0]["extra_info"] = {}
    assert kernel_shares.grown_kernels(NAME, base, head, 0.01, Bounds(noise=PROFILE)) == []


def test_without_a_noise_profile_two_runs_a_side_name_no_kernel():
    """Two runs a side estimate a share's spread too loosely: without the runner's profile the share must
    clear Student's t at their degrees of freedom, which a 4% kernel in ABBA does not."""
    jitter = (1.01, 0.99, 0.992, 1.008)  # each run's forward kernel apart from the clock
    slower = BASE_US | {"forward_kernel": 260.0}
    base = [run(BASE_US | {"forward_kernel": 250.0 * jitter[i]}, CLOCK[i]) for i in (0, 3)]
    head = [run(slower | {"forward_kernel": 260.0 * jitter[i]}, CLOCK[i]) for i in (1, 2)]
    assert kernel_shares.judged(base, head, 0.01, 3.0).judged[NAME].kernels == ()
    assert kernel_shares.judged(base, head, 0.01, 3.0, noise=PROFILE).judged[NAME].kernels != ()
