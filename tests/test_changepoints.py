"""perf/history/changepoints.py: steps found at their commit, outliers and gaps ignored, and the recall and
false rate on synthetic series (perf/history/synthetic.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import ttest_ind, ttest_ind_from_stats

from perf.history import synthetic
from perf.history.changepoints import Step, find_steps, welch_p


def noisy(n: int, noise: float, seed: int, level: float = 1e-3) -> np.ndarray:
    return level * np.exp(noise * np.random.default_rng(seed).standard_normal(n))


def test_clean_step_at_its_commit_with_its_ratio():
    values = noisy(120, 0.01, seed=1)
    values[70:] *= 1.05
    commits = [f"commit{i:03d}" for i in range(120)]
    steps = find_steps(values.tolist(), commits)
    assert [(s.index, s.commit) for s in steps] == [(70, "commit070")], steps
    (step,) = steps
    assert isinstance(step, Step)
    assert step.ratio == pytest.approx(1.05, abs=0.01)
    assert step.ratio == pytest.approx(step.after / step.before)
    assert step.before == pytest.approx(1e-3, rel=0.01) and step.after == pytest.approx(1.05e-3, rel=0.01)
    assert step.certainty > 0.999 and step.certainty == pytest.approx(1 - step.p_value)
    assert 0.006 < step.noise < 0.015  # the noise is 1 %; the step did not inflate it

    # A speed-up is a step too; without commits, a step's commit is its index.
    faster = find_steps((values / np.where(np.arange(120) >= 30, 1.1, 1.0)).tolist())
    assert [(s.index, s.commit) for s in faster] == [(30, "30"), (70, "70")]
    assert faster[0].ratio == pytest.approx(1 / 1.1, abs=0.01)


def test_step_at_the_first_run_of_a_commit_with_several_runs():
    # Commit "c050" has three runs; the change is in it, but its first run is noisy low, as before.
    values = noisy(100, 0.005, seed=2)
    commits = [f"c{i:03d}" for i in range(100)]
    commits[51] = commits[52] = "c050"
    values[50:] *= 1.08
    values[50] = 1.015e-3
    steps = find_steps(values.tolist(), commits)
    assert [(s.index, s.commit) for s in steps] == [(50, "c050")]

    # Never between two runs of one commit, on many series with half their commits run 2-3 times.
    for seed in range(40):
        rng = np.random.default_rng(seed)
        values, commits, _ = synthetic.series(
            200, 0.01, [(int(rng.integers(20, 90)), 1.06), (int(rng.integers(110, 180)), 0.93)],
            seed=seed, multi=0.5,
        )  # fmt: skip
        for step in find_steps(values, commits):
            assert commits[step.index] != commits[step.index - 1], (seed, step)
            assert step.commit == commits[step.index]


def test_outliers_are_not_steps():
    values = noisy(150, 0.01, seed=3)
    values[[20, 60, 61, 100, 149]] *= [1.2, 1.25, 1.2, 0.8, 1.3]  # single runs, a pair, the last run
    assert find_steps(values.tolist()) == []

    # An outlier next to a step moves neither the step nor its size.
    values[75:] *= 1.05
    values[76] *= 1.2
    steps = find_steps(values.tolist())
    assert [s.index for s in steps] == [75]
    assert steps[0].ratio == pytest.approx(1.05, abs=0.01)

    # Nor do the many outliers of synthetic series make steps (2 % of the runs, 10-30 % off).
    found = [s for seed in range(30) for s in find_steps(synthetic.series(365, 0.01, seed=seed)[0])]
    assert found == []


def test_gaps_do_not_matter():
    # The same runs, on consecutive days or with days missing between them: the same steps.
    values, commits, true = synthetic.series(300, 0.01, [(100, 1.04), (200, 0.95)], gaps=0.6, seed=4)
    days = [int(c[1:]) for c in commits]
    assert max(np.diff(days)) > 3  # there are gaps
    dense = [f"c{k:05d}" for k in np.cumsum([0, *(np.diff(days) > 0)])]
    found = find_steps(values, commits)
    assert [s.index for s in found] == true
    assert [(s.index, s.ratio) for s in find_steps(values, dense)] == [(s.index, s.ratio) for s in found]


def test_a_fresh_step_is_found_with_three_runs_after_it():
    values = noisy(100, 0.01, seed=5)
    values[97:] *= 1.1
    assert [s.index for s in find_steps(values.tolist())] == [97]
    assert find_steps(values[:99].tolist()) == []  # two runs: too few to tell from outliers

    # Three runs that happen to agree, 3 % above 1 % noise, are not yet a certain step; ten are.
    values = noisy(100, 0.01, seed=6)
    values[97:] = 1.03e-3
    assert find_steps(values.tolist()) == []
    values[90:97] = noisy(7, 0.01, seed=7, level=1.03e-3)
    assert [s.index for s in find_steps(values.tolist())] == [90]


def test_welch_p_is_scipys():
    rng = np.random.default_rng(8)
    for n, m in [(12, 12), (3, 12), (12, 4), (2, 2)]:
        a, b = rng.normal(0, 1, n), rng.normal(1, 2, m)
        assert welch_p(a, b) == pytest.approx(ttest_ind(a, b, equal_var=False).pvalue, rel=1e-9)
    a, b = np.zeros(5), np.ones(3)
    assert welch_p(a, b) == 0.0 and welch_p(a, a) == 1.0
    floored = ttest_ind_from_stats(0.0, 1.0, 5, 1.0, 1.0, 3, equal_var=False).pvalue  # both sds 1
    assert welch_p(a, b, floor=1.0) == pytest.approx(floored, rel=1e-9)


@pytest.mark.parametrize("noise", [0.01, 0.03])
def test_recall_and_false_rate_on_synthetic_series(noise):
    # Steps of 2 and 3 x the noise (min_change below them), up or down, with outliers, gaps and commits
    # with several runs; 200 series of 365 points without steps for the false rate. The best any method
    # can do at the exact commit, knowing both levels, is about 63 % at 2 x and 86 % at 3 x the noise
    # (87 % and 97 % within one commit); on the full grid this reaches 58 % and 87 % (86 % and 98 %).
    result = synthetic.evaluate(
        30, seed=11, noises=[noise], sizes=[2 * noise, 3 * noise], clean=200, min_change=noise
    )
    two, three = result["cells"]
    assert two["exact"] / two["steps"] >= 0.45 and two["near"] / two["steps"] >= 0.75, two
    assert three["exact"] / three["steps"] >= 0.8 and three["near"] / three["steps"] >= 0.93, three
    assert result["clean"][0]["points"] == 200 * 365
    assert result["false_per_1000_clean"] <= 1.0, result["clean"]
    assert two["false"] + three["false"] <= 0.1 * (two["steps"] + three["steps"]), result["cells"]
    assert result["ms_per_series"] < 20


@pytest.mark.parametrize(
    ("args", "kwargs", "argument"),
    [
        (([1.0, 2.0, -1.0],), {}, "values"),
        (([1.0, math.nan, 1.0],), {}, "values"),
        (([1.0, 0.0, 1.0],), {}, "values"),
        (([1.0, math.inf],), {}, "values"),
        (([[1.0, 2.0]],), {}, "values"),
        (([1.0, 2.0, 3.0], ["a", "b"]), {}, "commits"),
        (([1.0, 2.0, 3.0],), {"window": 1}, "window"),
        (([1.0, 2.0, 3.0],), {"min_change": -0.1}, "min_change"),
        (([1.0, 2.0, 3.0],), {"alpha": 0.0}, "alpha"),
    ],
)
def test_bad_input(args, kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        find_steps(*args, **kwargs)


def test_short_series_have_no_steps():
    assert find_steps([]) == []
    assert find_steps([1.0, 2.0, 2.0, 2.0]) == []
