"""Change points (steps) in a benchmark's series: the commit where a lasting change began, its size
(after / before) and how certain it is.

On the log of the values (steps and noise relative), with the noise sigma from the first differences'
MAD and outliers left out: PELT, exact (ruptures' KernelCPD, linear kernel), penalty PENALTY x sigma^2 x
log(n), segments of at least MIN_SIZE runs, each step moved to the first run of a commit; then each
step tested as Perfherder does (window medians at least 1 + min_change apart, a Welch t-test at
`alpha`), the weakest failing one merged away until none fails. docs/history.md says why; NOTES.md
(The results history) has the recall measured on synthetic series.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import ruptures
from scipy.special import stdtr

PENALTY = 3.0  # x sigma^2 x log(n): the cost of one more change point in the L2 fit
MIN_SIZE = 3  # the fewest runs in a segment: fewer is an outlier, or a change too new to judge
OUTLIER = 4.0  # a point this many sigma from the runs either side is left out of the fit
MIN_NOISE = 1e-4  # the floor under the noise estimate (a series of equal values)


@dataclass(frozen=True)
class Step:
    """A lasting change in a series, starting at point `index` (the first run of commit `commit`)."""

    index: int  # the first point after the step
    commit: str  # that point's commit
    before: float  # median of the window before
    after: float  # median of the window after
    ratio: float  # after / before
    certainty: float  # 1 - p_value
    p_value: float  # Welch t-test of the logs, two-sided, between the windows
    noise: float  # the series' relative noise (robust standard deviation of a run)


def robust_noise(logs: np.ndarray) -> float:
    """The standard deviation of the noise of `logs` from the MAD of its first differences."""
    if len(logs) < 3:
        return MIN_NOISE
    diffs = np.diff(logs)
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    return max(1.4826 * mad / math.sqrt(2), MIN_NOISE)


def _inliers(logs: np.ndarray, sigma: float, side: int = 3) -> np.ndarray:
    """Which points of `logs` (more than 2 x side) are within OUTLIER x sigma of the median of the `side`
    points before them or of that of the `side` points after them (near either end, of the `side` others
    nearest that end). A point next to a step is near one side; an outlier is far from both, even from a
    side that holds another outlier."""
    n = len(logs)
    medians = np.median(np.lib.stride_tricks.sliding_window_view(logs, side), axis=1)
    left = np.empty(n)
    right = np.empty(n)
    left[side:] = medians[: n - side]
    right[: n - side] = medians[1:]
    for i in range(side):  # the ends: a fresh step's first runs are not outliers
        left[i] = np.median(np.delete(logs[: side + 1], i))
        right[n - 1 - i] = np.median(np.delete(logs[n - side - 1 :], side - i))
    return np.minimum(np.abs(logs - left), np.abs(logs - right)) <= OUTLIER * sigma


def _check(
    values: Sequence[float], commits: Sequence[str] | None, window: int, min_change: float, alpha: float
):
    try:
        y = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as error:
        raise ValueError(f"values must be numbers: {error}") from None
    if y.ndim != 1:
        raise ValueError(f"values must be a flat sequence, got shape {y.shape}")
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        bad = int(np.flatnonzero(~np.isfinite(y) | (y <= 0))[0])
        raise ValueError(f"values must be positive and finite: values[{bad}] = {y[bad]!r}")
    if commits is not None and len(commits) != len(y):
        raise ValueError(f"commits has {len(commits)} entries for {len(y)} values")
    if not isinstance(window, int | np.integer) or window < 2:
        raise ValueError(f"window must be an integer of at least 2, got {window!r}")
    if not min_change >= 0:
        raise ValueError(f"min_change must be >= 0, got {min_change!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return y


def _commit_starts(commits: Sequence[str] | None, n: int) -> np.ndarray:
    """The index of each commit's first run: consecutive runs of one commit are one commit; an empty commit
    (unknown) is a commit of its own at every run."""
    if commits is None:
        return np.arange(n)
    return np.array([i for i in range(n) if i == 0 or not commits[i] or commits[i] != commits[i - 1]])


class _Fit:
    """L2 costs of segments, for placing steps at commits' first runs: of the inliers, and of all points
    (which only decides between places that differ by outliers: the side an outlier is nearer to)."""

    def __init__(self, logs: np.ndarray, inliers: np.ndarray, starts: np.ndarray):
        self.starts = starts
        self.sums = []
        for weights in (inliers.astype(float), np.ones(len(logs))):
            z = weights * logs
            self.sums.append([np.concatenate([[0.0], np.cumsum(x)]) for x in (weights, z, z * logs)])

    def cost(self, a: int, b: int, which: int) -> float:
        count, total, squares = (x[b] - x[a] for x in self.sums[which])
        return squares - (total * total / count if count else 0.0)

    def place(self, at: int, lo: int, hi: int, reach: int) -> int | None:
        """The first run of a commit within `reach` runs of `at`, strictly between lo and hi, that best
        splits [lo, hi) in two (or the start of the commit that holds `at` or of the next one); None if
        there is none."""
        own = int(np.searchsorted(self.starts, at, side="right")) - 1  # the commit that holds `at`
        near = {
            *self.starts[(self.starts >= at - reach) & (self.starts <= at + reach)],
            *self.starts[own : own + 2],
        }
        options = [int(s) for s in near if lo < s < hi]
        if not options:
            return None
        return min(
            options,
            key=lambda s: (*(self.cost(lo, s, w) + self.cost(s, hi, w) for w in (0, 1)), abs(s - at)),
        )


def _judge(
    y: np.ndarray, kept: np.ndarray, noise: float, at: int, lo: int, hi: int, window: int
) -> tuple[float, float, float]:
    """(median before, median after, p-value) for a step at point `at`: the windows are the `window`
    inliers (indices `kept`) either side of it within [lo, hi); their variance is at least noise^2."""
    split, first, last = np.searchsorted(kept, [at, lo, hi])
    before = y[kept[max(first, split - window) : split]]
    after = y[kept[split : min(last, split + window)]]
    if len(before) < 2 or len(after) < 2:
        return float(np.median(y[lo:at])), float(np.median(y[at:hi])), 1.0
    return float(np.median(before)), float(np.median(after)), welch_p(np.log(before), np.log(after), noise)


def welch_p(a: np.ndarray, b: np.ndarray, floor: float = 0.0) -> float:
    """Welch's t-test, two-sided: the p-value of "same mean", as scipy.stats.ttest_ind(equal_var=False)
    without its overhead, each side's variance at least floor^2 (so that 3 runs that happen to agree
    cannot make a certain step); 0 or 1 when neither side has any spread."""
    va = max(a.var(ddof=1), floor * floor) / len(a)
    vb = max(b.var(ddof=1), floor * floor) / len(b)
    if va + vb == 0:
        return 0.0 if a.mean() != b.mean() else 1.0
    t = (a.mean() - b.mean()) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1))
    return float(2 * stdtr(df, -abs(t)))


def find_steps(
    values: Sequence[float],
    commits: Sequence[str] | None = None,
    *,
    min_change: float = 0.02,
    window: int = 12,
    alpha: float = 0.01,
) -> list[Step]:
    """The steps of a series in time order, in index order.

    values: positive (seconds); commits: each value's commit (runs of one commit are consecutive), or None
    for one commit per value; min_change: the least relative change reported (a ratio of at least
    1 + min_change or at most 1 / (1 + min_change)); window: the most runs either side that judge a step;
    alpha: the largest p-value reported. A step needs MIN_SIZE runs either side, and enough of them to
    pass the test at `alpha`.
    """
    y = _check(values, commits, window, min_change, alpha)
    n = len(y)
    logs = np.log(y)
    noise = robust_noise(logs)
    if n < 2 * MIN_SIZE:
        return []
    inliers = _inliers(logs, noise)
    kept = np.flatnonzero(inliers)
    if len(kept) < 2 * MIN_SIZE:
        return []
    fit = ruptures.KernelCPD(kernel="linear", min_size=MIN_SIZE).fit(logs[kept].reshape(-1, 1))
    cuts = [int(kept[b]) for b in fit.predict(pen=PENALTY * noise**2 * math.log(len(kept)))[:-1]]
    segments = _Fit(logs, inliers, _commit_starts(commits, n))
    points: list[int] = []
    for k, cut in enumerate(cuts):  # at the first run of a commit: the cut's, the next or an outlier's
        at = segments.place(cut, points[-1] if points else 0, cuts[k + 1] if k + 1 < len(cuts) else n, 3)
        if at is not None:
            points.append(at)

    least = math.log1p(min_change)
    cache: dict[tuple[int, int, int], tuple[float, float, float]] = {}
    while True:
        edges = [0, *points, n]
        keys = [(at, edges[k], edges[k + 2]) for k, at in enumerate(points)]
        judged = [
            cache.get(key) or cache.setdefault(key, _judge(y, kept, noise, *key, window)) for key in keys
        ]
        failed = [
            (p, -abs(math.log(a / b)), k)
            for k, (b, a, p) in enumerate(judged)
            if p > alpha or abs(math.log(a / b)) < least
        ]
        if not failed:
            break
        k = max(failed)[2]  # the weakest goes first; its neighbours move to the best split of their segments
        del points[k]
        for j in (k - 1, k):
            if 0 <= j < len(points):
                lo = points[j - 1] if j > 0 else 0
                hi = points[j + 1] if j + 1 < len(points) else n
                points[j] = segments.place(points[j], lo, hi, window) or points[j]

    steps = []
    for at, (b, a, p) in zip(points, judged, strict=True):
        commit = commits[at] if commits is not None else str(at)
        steps.append(Step(at, commit, b, a, a / b, 1 - p, p, noise))
    return steps
