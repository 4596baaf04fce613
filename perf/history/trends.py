"""The trends page: a static site (asv publish is the anchor) of each benchmark's GPU and wall time over
the recorded runs, one chart per benchmark and GPU model, with the clock state of each point, the noise
band of the points before it, the steps found in the series, and each point's kernel table a click away.

It opens from the file system (no server): the data are JavaScript files that the page loads with script
tags, one per GPU model for the series and one per run for its kernel tables, so a page of a year's runs
loads only what is looked at.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from perf.history.store import History, Point
from perf.storage import FOLDER, cannot_write, folder_name, write_whole
from perf.tools.judging.window_rule import robust_sd

PAGE = Path(__file__).with_name("trends_page.html")
# The noise band of a point: the median of the WINDOW points before it, +- BAND_K robust standard deviations.
WINDOW = 12
BAND_K = 3.0
# A point whose GPU clock was held down by the power cap in at least this share of its samples is marked.
CAPPED_SHARE = 0.5
# Kernel rows kept per benchmark in a run's file: the costliest, which is what a reader looks at first.
KERNEL_ROWS = 10


def band(values: Sequence[float | None]) -> list[tuple[float, float] | None]:
    """Per point, (low, high) of the noise band of the WINDOW points before it; None where fewer than 3."""
    bands: list[tuple[float, float] | None] = []
    for i in range(len(values)):
        before = [v for v in values[max(0, i - WINDOW) : i] if v is not None]
        if len(before) < 3:
            bands.append(None)
            continue
        middle, spread = robust_sd(before)
        bands.append((middle - BAND_K * spread, middle + BAND_K * spread))
    return bands


def _point(p: Point) -> list[Any]:
    """One point as the page reads it (the field order is POINT_FIELDS in trends_page.html)."""
    capped = p.power_capped is not None and p.power_capped >= CAPPED_SHARE
    return [
        p.run_id,
        int(p.started_at.timestamp()),
        (p.commit or "")[:10],
        int(bool(p.dirty)),
        round(p.wall_s * 1e3, 6),
        round(p.gpu_s * 1e3, 6) if p.gpu_s is not None else None,
        p.gpu_method or "",
        round(p.sm_mhz) if p.sm_mhz else None,
        int(capped),
        int(bool(p.clocks_locked)),
    ]


def benchmark_series(points: Sequence[Point], steps_of: Any = None) -> dict[str, Any]:
    """A benchmark's chart data: its points, the noise band of the figure charted first (GPU time where
    every point has it, else wall time), and the steps that `steps_of(values, commits)` finds in it."""
    on_gpu = all(p.gpu_s is not None for p in points)
    values = [p.gpu_s if on_gpu else p.wall_s for p in points]
    data: dict[str, Any] = {
        "figure": "gpu" if on_gpu else "wall",
        "points": [_point(p) for p in points],
        "band": [[round(b[0] * 1e3, 6), round(b[1] * 1e3, 6)] if b else None for b in band(values)],
    }
    if steps_of is not None and len(points) >= 2:
        data["steps"] = [
            {
                "index": s.index,
                "commit": s.commit[:10],
                "ratio": round(s.ratio, 4),
                "certainty": round(s.certainty, 4),
            }
            for s in steps_of([float(v) for v in values], [p.commit or "" for p in points])
        ]
    return data


def run_kernels(history: History, run_id: int, benchmarks: Sequence[str]) -> dict[str, Any]:
    """The kernel tables of one run, its KERNEL_ROWS costliest kernels per benchmark."""
    tables = {}
    for name in benchmarks:
        extra = history.result(run_id, name).get("extra_info") or {}
        rows = extra.get("gpu_kernels") or []
        if rows:
            tables[name] = rows[:KERNEL_ROWS]
    return tables


def publish(
    history: History, out: Path, *, days: int | None = None, branch: str | None = None, steps_of: Any = None
) -> Path:
    """Write the site into `out` (index.html, data/*.js) and return the page's path. `days` keeps the runs
    of the last N days; dirty runs are left out, as they are of every baseline."""
    since = datetime.now(UTC) - timedelta(days=days) if days else None
    data_dir = out / "data"
    (data_dir / "runs").mkdir(parents=True, exist_ok=True)
    gpus, unmeasured = [], {}
    for gpu in history.gpus():
        if skipped := history.unmeasured(gpu):
            unmeasured[gpu] = skipped
        series, run_benchmarks = {}, {}
        for name, found in history.all_series(gpu, branch=branch).items():
            points = [p for p in found if since is None or p.started_at >= since]
            if not points:
                continue
            series[name] = benchmark_series(points, steps_of)
            for p in points:
                run_benchmarks.setdefault(p.run_id, []).append(name)
        if not series:
            continue
        gpus.append({"name": gpu, "file": f"data/{folder_name(gpu)}.js", "benchmarks": len(series)})
        _write_js(data_dir / f"{folder_name(gpu)}.js", f"PERF.loaded({json.dumps(gpu)}, ", series)
        for run_id, names in run_benchmarks.items():
            target = data_dir / "runs" / f"{run_id}.js"
            if not target.exists():  # a run belongs to one GPU model
                _write_js(target, f"PERF.runLoaded({run_id}, ", run_kernels(history, run_id, names))
    index = {
        "gpus": gpus,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": history.url,
        "window": WINDOW,
        "band_k": BAND_K,
        "capped_share": CAPPED_SHARE,
        "unmeasured": unmeasured,  # per GPU model: stored times of 0 or less, left out of the charts
    }
    page = PAGE.read_text().replace("/*INDEX*/null", json.dumps(index))
    write_whole(out / "index.html", page.encode())
    return out / "index.html"


def _write_js(path: Path, call: str, payload: Any) -> None:
    write_whole(path, (call + json.dumps(payload, separators=(",", ":")) + ");\n").encode())


HELP = "write the trends page (a static site) of the recorded runs"


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="the folder to write the site into"
    )
    parser.add_argument("--days", type=int, metavar="N", help="only the runs of the last N days (all)")
    parser.add_argument("--branch", default="main", help="the branch whose runs are charted (main)")
    parser.add_argument("--no-steps", action="store_true", help="leave out the change points")


def run(args: Any) -> int:
    from perf.history.changepoints import find_steps
    from perf.history.store import HistoryError, connect

    if args.days is not None and args.days < 1:
        raise HistoryError(f"--days {args.days}: give a whole number of at least 1")
    if (wrong := cannot_write(args.out, FOLDER)) is not None:
        raise HistoryError(f"--out {args.out}: {wrong}; nothing was written")
    with connect(args.db, create=False) as history:
        page = publish(
            history,
            args.out,
            days=args.days,
            branch=args.branch,
            steps_of=None if args.no_steps else find_steps,
        )
        left_out = {gpu: history.unmeasured(gpu) for gpu in history.gpus()}
    print(f"trends page: {page}")
    for gpu, count in left_out.items():
        if count:
            print(f"{gpu}: {count} stored result(s) with a time of 0 or less left out (not measurements)")
    return 0
