"""The steps of the history: each benchmark's series on each GPU model scanned for change points
(perf/history/changepoints.py), those that began in the last N days listed most certain first, each with
its size, the commits either side and the kernels that changed between the runs either side.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from perf.history.changepoints import Step, find_steps
from perf.history.store import History, Point
from perf.tools.reading.kernel_changes import explanation_lines


@dataclass(frozen=True)
class SeriesStep:
    """A step of one benchmark's series on one GPU model, with the runs either side of it."""

    benchmark: str
    gpu: str
    figure: str  # 'gpu' or 'wall': the figure the series was scanned on
    step: Step
    before: Point  # the last run before the step
    after: Point  # the first run after it

    @property
    def slower(self) -> bool:
        return self.step.ratio > 1


def figure_of(points: Sequence[Point]) -> tuple[str, list[float]]:
    """The figure a series is scanned on: GPU time where every run has it by one method, else wall time."""
    methods = {p.gpu_method for p in points}
    if points and all(p.gpu_s is not None for p in points) and len(methods) == 1:
        return "gpu", [p.gpu_s for p in points]  # type: ignore[misc]
    return "wall", [p.wall_s for p in points]


def scan(
    history: History, *, gpu: str | None = None, branch: str | None = "main", min_change: float = 0.02
) -> Iterator[SeriesStep]:
    """Every step of every series (dirty runs left out), GPU model by GPU model."""
    for model in [gpu] if gpu else history.gpus():
        for name, points in history.all_series(model, branch=branch).items():
            yield from series_steps(name, model, points, min_change)


def series_steps(name: str, gpu: str, points: Sequence[Point], min_change: float = 0.02) -> list[SeriesStep]:
    """The steps of one benchmark's series on one GPU model (points oldest first), in time order."""
    if len(points) < 4:
        return []
    figure, values = figure_of(points)
    found = find_steps(values, [p.commit or "" for p in points], min_change=min_change)
    return [SeriesStep(name, gpu, figure, s, points[s.index - 1], points[s.index]) for s in found]


def recent_steps(
    history: History,
    *,
    days: int,
    gpu: str | None = None,
    branch: str | None = "main",
    min_change: float = 0.02,
) -> tuple[list[SeriesStep], float]:
    """The steps whose first run after is at most `days` old, most certain first, the larger first among
    equals; and the seconds the scan took."""
    since = datetime.now(UTC) - timedelta(days=days)
    start = time.perf_counter()
    found = [
        s for s in scan(history, gpu=gpu, branch=branch, min_change=min_change) if s.after.started_at >= since
    ]
    found.sort(key=lambda s: (-s.step.certainty, -abs(s.step.ratio - 1)))
    return found, time.perf_counter() - start


def describe(history: History, found: SeriesStep, kernels: bool = True) -> list[str]:
    """A step in a few lines: benchmark, size, certainty, the commits either side, the kernel diff."""
    s = found.step
    lines = [
        f"{found.benchmark} on {found.gpu}: {found.figure} x{s.ratio:.4f} "
        f"({'slower' if found.slower else 'faster'}), certainty {s.certainty:.4f}, noise {s.noise:.2%}",
        f"    from {(found.before.commit or '?')[:12]} ({found.before.started_at:%Y-%m-%d}) to "
        f"{(found.after.commit or '?')[:12]} ({found.after.started_at:%Y-%m-%d}); "
        f"median {s.before * 1e3:.4f} -> {s.after * 1e3:.4f} ms",
    ]
    if kernels:
        before = history.result(found.before.run_id, found.benchmark).get("extra_info")
        after = history.result(found.after.run_id, found.benchmark).get("extra_info")
        lines += ["    " + line for line in explanation_lines(found.benchmark, before, after)]
    return lines


HELP = "list the steps (change points) of the last N days, most certain first"


def add_arguments(parser: Any) -> None:
    parser.add_argument("--days", type=int, default=30, metavar="N", help="steps of the last N days (30)")
    parser.add_argument("--gpu", metavar="NAME", help="only this GPU model")
    parser.add_argument("--branch", default="main", help="the branch whose runs are scanned (main)")
    parser.add_argument("--limit", type=int, default=20, metavar="N", help="list at most N steps (20)")
    parser.add_argument(
        "--min-change", type=float, default=0.02, metavar="FRACTION",
        help="the least change that is a step, in (0, 1) (0.02, as Perfherder's)",
    )  # fmt: skip


def run(args: Any) -> int:
    from perf.history.store import HistoryError, connect

    for flag in ("days", "limit"):
        if getattr(args, flag) < 1:
            raise HistoryError(f"--{flag} {getattr(args, flag)}: give a whole number of at least 1")
    if not 0 < args.min_change < 1:
        raise HistoryError(f"--min-change {args.min_change:g}: give a fraction > 0 and < 1, e.g. 0.02")
    with connect(args.db, create=False) as history:
        found, seconds = recent_steps(
            history, days=args.days, gpu=args.gpu, branch=args.branch, min_change=args.min_change
        )
        print(
            f"{len(found)} step(s) began in the last {args.days} days on branch {args.branch} "
            f"({history.url}; every series scanned in {seconds:.1f} s)"
        )
        for step in found[: args.limit]:
            print("\n".join(describe(history, step)))
        if len(found) > args.limit:
            print(f"... {len(found) - args.limit} more (--limit)")
    return 0
