"""The gate against history: the baseline is the recent runs of one branch on this GPU model, and each
benchmark's thresholds come from their spread (Mozilla Perfherder's noise profile), not from one stored
file and three runs of one afternoon.

Per benchmark, its last WINDOW clean runs (dirty trees never count) give the baseline's figure and its
noise by perf/tools/judging/window_rule.py. The result is a Results and a Noise as a stored baseline and
its noise file would give, so the gate's rule, re-measurement and verdict are the same whichever baseline
it judges against.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from perf.history.records import utc_time
from perf.history.store import History, HistoryError, Point, connect
from perf.tools.judging.noise_thresholds import Noise, NoiseThresholds
from perf.tools.judging.window_rule import FALSE_RATE, MIN_RUNS, WINDOW, window_baseline
from perf.tools.reading.errors import GateError
from perf.tools.reading.results import Results


def history_baseline(
    history: History,
    current: Results,
    *,
    branch: str | None = "main",
    window: int = WINDOW,
) -> tuple[Results, Noise]:
    """The baseline and noise profile for `current` from the history of its GPU model on `branch`.

    GateError where the history has no run of that GPU model on that branch."""
    gpu = current.machine
    before = _started(current)
    runs = [r for r in history.runs(gpu=gpu, branch=branch) if before is None or r.started_at < before][:1]
    if not runs:
        where = f" on branch {branch}" if branch else ""
        raise GateError(
            f"{history.url}: no clean run of {gpu}{where} recorded; record runs (--history) or import "
            "result files (python -m perf.history import) first"
        )
    newest = runs[0]
    series = {}
    for name in current.timings:
        points = [
            p for p in history.series(name, gpu, branch=branch) if before is None or p.started_at < before
        ]
        if points:
            series[name] = points[-window:]
    found = window_baseline(current, series)
    entries = [_entry(history, name, points) for name, points in series.items()]
    runs_held = min(window, len(history.runs(gpu=gpu, branch=branch, limit=window)))
    noise = found.noise(Path(f"{history.url} (last {window} runs)"), gpu, runs_held)
    document = {
        "machine_info": {"perf": _machine(newest)},
        "commit_info": {"id": newest.commit, "dirty": newest.dirty, "branch": newest.branch},
        "datetime": newest.started_at.isoformat(),
        "perf": {"tier": newest.tier, "history": {"window": window, "branch": branch}},
        "benchmarks": entries,
    }
    baseline = found.results(Path(f"{history.url} ({branch or 'all branches'}, {gpu})"), gpu, document)
    return baseline, noise


def _started(results: Results) -> datetime | None:
    """When the judged run began: history from then on is not its baseline (it may hold the run itself)."""
    return utc_time(results.document.get("datetime"))


def _entry(history: History, name: str, points: Sequence[Point]) -> dict[str, Any]:
    """The newest run's stored entry of `name` (its kernel table explains a regression), as a result
    file holds it."""
    stored = history.result(points[-1].run_id, name)
    return {"fullname": name, "name": name.split("::")[-1], **stored}


def _machine(run: Any) -> dict[str, Any]:
    """machine_info.perf of a recorded run, as far as the history keeps it."""
    return {
        "torch": run.torch,
        "triton": run.triton,
        "cuda": run.cuda,
        "gpu": {
            "name": run.gpu,
            "driver": run.driver,
            "power_limit_w": run.power_limit_w,
            "clocks_locked": run.clocks_locked,
        },
    }


def opened(url: str | None) -> History:
    """The results database of the gate's --against history (`url`, else $PERF_HISTORY, else the default
    file), opened as it is: refused (GateError) where it does not exist or cannot be read."""
    try:
        return connect(url, create=False)
    except HistoryError as err:
        raise GateError(str(err)) from None


def require_runs(history: History, gpu: str, *, branch: str) -> None:
    """Refused (GateError) where `history` holds no clean run of `gpu` on `branch`: the gate asks before the
    suite runs, so that a run is never made for nothing."""
    if not history.runs(gpu=gpu, branch=branch, limit=1):
        raise GateError(f"{history.url}: no clean run of {gpu} on branch {branch} recorded; nothing was run")


def against_history(
    history: History, current: Results, branch: str, threshold: float
) -> tuple[Results, NoiseThresholds]:
    """The gate's baseline and thresholds for `current` with --against history: the recent clean runs of
    `branch` (history_baseline), and each benchmark's thresholds from their spread, `threshold` where they
    are too few."""
    baseline, noise = history_baseline(history, current, branch=branch)
    note = (
        f"baseline: the last {WINDOW} clean runs of branch {branch} on {current.machine} "
        f"in {history.url}; thresholds max(floor, t x their sd x sqrt(1 + 1/n)), a {FALSE_RATE:.0%} chance "
        f"of any false regression; --threshold {threshold:.0%} where fewer than {MIN_RUNS} runs have a figure"
    )
    short = f"with fewer than {MIN_RUNS} clean runs of {{what}} in the history"
    return baseline, NoiseThresholds(threshold, noise, baseline.gpu_methods, [note], unknown_reason=short)
