"""perf/tools/judging/paired_rule.py on synthetic runs: a small slowdown in little noise is SLOWER, noise
alone SAME, too much noise UNKNOWN, faster symmetric, and GPU times of different methods judged on wall
time."""

from __future__ import annotations

import dataclasses
import math

import pytest

from perf.tools.judging import paired_rule
from perf.tools.judging.paired_rule import FASTER, SAME, SLOWER, UNKNOWN, judge_all, judge_figure
from perf.tools.reading.results import Results
from perf.tools.reading.timings import Timing

NAME = "perf/test_matmul.py::test_matmul[n256]"
# Alternating offsets of the runs' medians: a noise of `noise` around the mean, whose sample sd is 1.
SPREAD = (1.0, -1.0, -1.0, 1.0)


def timings(median: float, noise: float, n: int, se: float | None = None) -> list[Timing]:
    """n runs' medians spread by a relative sd of `noise`, each with a relative standard error `se`."""
    offsets = [SPREAD[i % 4] * noise * math.sqrt((n - 1) / n) for i in range(n)]
    return [Timing(median * math.exp(o), None if se is None else se * median) for o in offsets]


def results(
    wall: dict[str, float], gpu: dict[str, float] | None = None, method: str | None = None
) -> Results:
    """One run: wall (and GPU) medians in seconds per node id, a tight standard error on each."""
    return Results(
        path=None,
        machine="NVIDIA H100",
        timings={n: Timing(t, t * 1e-4) for n, t in wall.items()},
        gpu_timings={n: Timing(t, t * 1e-4) for n, t in (gpu or {}).items()},
        gpu_methods={n: method or "isolated" for n in gpu or {}},  # as load_results reads them
    )


def test_two_percent_slower_in_a_third_of_a_percent_of_noise_is_slower():
    verdict = judge_figure("gpu", timings(1e-3, 0.003, 2), timings(1.02e-3, 0.003, 2))
    assert verdict.verdict == SLOWER
    assert verdict.ratio == pytest.approx(1.02)
    assert verdict.se == pytest.approx(0.003, rel=1e-6)  # s * sqrt(1/2 + 1/2)


def test_faster_is_symmetric():
    assert judge_figure("gpu", timings(1.02e-3, 0.003, 2), timings(1e-3, 0.003, 2)).verdict == FASTER


def test_noise_alone_is_same():
    assert judge_figure("gpu", timings(1e-3, 0.001, 2), timings(1e-3, 0.001, 2)).verdict == SAME


def test_large_noise_is_unknown_and_more_pairs_can_decide():
    assert judge_figure("gpu", timings(1e-3, 0.05, 2), timings(1.02e-3, 0.05, 2)).verdict == UNKNOWN
    # A 0.3% change in 0.3% noise: undecided after ABBA, the same after 4 pairs of steadier runs.
    assert judge_figure("gpu", timings(1e-3, 0.003, 2), timings(1.003e-3, 0.003, 2)).verdict == UNKNOWN
    assert judge_figure("gpu", timings(1e-3, 0.001, 4), timings(1.003e-3, 0.001, 4)).verdict == SAME


def test_runs_that_agree_by_chance_are_bounded_by_their_own_standard_errors():
    agreeing = judge_figure("wall", timings(1e-3, 0.0, 2, se=0.01), timings(1.02e-3, 0.0, 2, se=0.01))
    assert agreeing.verdict == UNKNOWN  # spread 0, but each median is only known to 1%
    assert agreeing.se == pytest.approx(0.01)


def test_threshold_and_z_are_the_named_defaults_and_can_be_set():
    base, head = timings(1e-3, 0.001, 2), timings(1.02e-3, 0.001, 2)
    assert judge_figure("gpu", base, head).verdict == SLOWER
    assert judge_figure("gpu", base, head, threshold=0.05).verdict == SAME
    assert judge_figure("gpu", base, head, z=30).verdict == UNKNOWN
    assert (paired_rule.THRESHOLD, paired_rule.Z) == (0.01, 3.0)


def ab_runs(base_gpu: float, head_gpu: float, base_wall: float, head_wall: float, methods=("burst", "burst")):
    wobble = (1.0, 1.001, 0.999, 1.0)
    base = [results({NAME: base_wall * w}, {NAME: base_gpu * w}, methods[0]) for w in wobble[::2]]
    head = [results({NAME: head_wall * w}, {NAME: head_gpu * w}, methods[1]) for w in wobble[1::2]]
    return base, head


def test_gpu_time_is_primary_and_wall_slower_fails_too_unless_host_bound():
    paired = judge_all(*ab_runs(1e-3, 1.03e-3, 2e-3, 2e-3))
    assert paired.judged[NAME].primary == "gpu" and paired.judged[NAME].verdict == SLOWER
    wall_only = judge_all(*ab_runs(1e-3, 1e-3, 2e-3, 2.1e-3))
    assert wall_only.judged[NAME].figures["gpu"].verdict == SAME
    assert wall_only.judged[NAME].verdict == SLOWER
    base, head = ab_runs(1e-3, 1e-3, 2e-3, 2.1e-3)
    base = [
        dataclasses.replace(r, timings={NAME: dataclasses.replace(r.timings[NAME], host_bound=True)})
        for r in base
    ]
    assert judge_all(base, head).judged[NAME].verdict == SAME  # host-bound: the wall time follows the CPU


def test_different_gpu_methods_fall_back_to_wall_and_say_so_once():
    paired = judge_all(*ab_runs(1e-3, 1.5e-3, 2e-3, 2e-3, methods=("isolated", "burst")))
    judgement = paired.judged[NAME]
    assert judgement.primary == "wall" and set(judgement.figures) == {"wall"}
    assert judgement.verdict == SAME  # the 50% GPU change is a change of method, not judged
    assert paired.method_fallbacks == [NAME]
    assert paired.fallback_line().startswith("1 benchmark judged on wall time: base and head measured GPU")
    # A result without gpu_method counts as isolated.
    same_method = judge_all(*ab_runs(1e-3, 1.5e-3, 2e-3, 2e-3, methods=(None, "isolated")))
    assert same_method.judged[NAME].primary == "gpu" and same_method.fallback_line() is None


def test_gpu_figures_of_two_methods_stay_aligned_when_runs_of_other_benchmarks_are_added():
    # The steady method picks rounds or burst per run and records the other beside it: both sides are judged
    # by the one they share, burst here, also once a pair that measured only another benchmark is added.
    other = "perf/test_matmul.py::test_matmul[other]"

    def run(gpu: float, method: str) -> Results:
        found = results({NAME: 2e-3, other: 1e-3}, {NAME: gpu, other: 1e-3}, method)
        alternates = {NAME: {"burst": Timing(gpu, gpu * 1e-4)}} if method == "rounds" else {}
        return dataclasses.replace(found, gpu_alternates=alternates)

    base = [run(1e-3, "rounds"), run(1e-3, "burst")]
    head = [run(1.03e-3, "burst"), run(1.03e-3, "rounds")]
    alone = results({other: 1e-3}, {other: 1e-3})
    for extra in ([], [alone]):
        paired = judge_all([*base, *extra], [*head, *extra])
        assert paired.judged[NAME].primary == "gpu" and NAME not in paired.method_fallbacks
        assert paired.judged[NAME].verdict == SLOWER


def test_one_sided_benchmarks_are_new_or_missing_and_pair_ratios_follow_the_runs():
    base = [results({NAME: 1e-3, "a": 1e-3}), results({NAME: 1e-3, "a": 1e-3})]
    head = [results({NAME: 1.1e-3, "b": 1e-3}), results({NAME: 1.2e-3, "b": 1e-3})]
    paired = judge_all(base, head)
    assert (paired.new, paired.missing, list(paired.judged)) == (["b"], ["a"], [NAME])
    assert paired.judged[NAME].pair_ratios == pytest.approx([1.1, 1.2])


def test_pairs_that_disagree_widen_the_noise_so_a_drift_is_not_a_slowdown():
    # Each side's runs within 0.35% of each other, but moving against each other pair by pair: the pairs'
    # ratios range over 1.4% (1.017, 1.003, 1.010; mean 1.0101), as on a clean H100 A/B that failed.
    wobble = (0.9965, 1.0035, 1.000)
    base = [Timing(1e-3 * w, 1e-7) for w in wobble]
    head = [Timing(1.0101e-3 / w, 1e-7) for w in wobble]
    judged = judge_figure("gpu", base, head)
    assert judged.ratio == pytest.approx(1.0101, abs=1e-4) and judged.verdict == UNKNOWN, judged
    # The same sides with their runs paired alike: every pair says 1.0101, a slowdown.
    steady = [Timing(1.0101e-3 * w, 1e-7) for w in wobble]
    assert judge_figure("gpu", base, steady).verdict == SLOWER


def test_the_bound_of_slower_is_family_wise_over_the_gates_tests_and_looks():
    one = paired_rule.family_bounds(3.0, tests=1, looks=1, noise=None)
    many = paired_rule.family_bounds(3.0, tests=300, looks=3, noise=None)
    assert one.z_slower == 3.0  # --z is the least bound
    assert many.per_test == pytest.approx(0.01 / 900) and many.z_slower == pytest.approx(4.25, abs=0.01)
    base, head = timings(1e-3, 0.003, 2), timings(1.012e-3, 0.003, 2)
    assert judge_figure("gpu", base, head, z_slower=one.z_slower).verdict == SLOWER
    assert judge_figure("gpu", base, head, z_slower=many.z_slower).verdict == UNKNOWN


def test_slower_needs_head_slower_in_every_pair():
    base = [Timing(1.000e-3, None), Timing(1.000e-3, None)]
    assert judge_figure("gpu", base, [Timing(1.05e-3, None), Timing(1.04e-3, None)]).verdict == SLOWER
    # The same mean, but one pair the other way: one run's outlier, not the code.
    split = [Timing(1.095e-3, None), Timing(0.995e-3, None)]
    assert judge_figure("gpu", base, split, z=0.1).verdict != SLOWER


def test_the_runners_noise_profile_keeps_runs_that_agree_by_chance_from_deciding():
    base, head = timings(1e-3, 0.0005, 2), timings(1.02e-3, 0.0005, 2)  # agree within 0.05%
    assert judge_figure("gpu", base, head).verdict == SLOWER
    profiled = judge_figure("gpu", base, head, sd=0.02)  # the runner moves this figure by 2% from run to run
    assert profiled.verdict == UNKNOWN and profiled.se > 0.015
