"""The trends page: a static site of each benchmark's GPU and wall time over the recorded runs, opened
from the file system. On top, what changed: the steps of the last days across every suite and GPU model,
slower first, each with the commits either side and the kernels that moved; below, a section per suite
of small charts, the providers or variants of one shape in one chart.

The page is one file (trends_page.html with its style and scripts put in); the data are JavaScript files
beside it that the page loads with script tags (no server needed): one per GPU model with every series,
and one per benchmark with its kernel tables, loaded when a point is clicked (trends_data.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from perf.history import trends_data as data
from perf.history.steps import series_steps
from perf.history.store import History
from perf.storage import FOLDER, cannot_write, folder_name, write_whole

PAGE = Path(__file__).with_name("trends_page.html")
SCRIPTS = (
    "trends_chart.js",
    "trends_state.js",
    "trends_landing.js",
    "trends_page.js",
)  # put into the page in this order
STYLE = "trends_page.css"
LANDING_ROWS = 100  # steps kept for the landing, most important first; the rest are counted
FRESH_ROWS = 50  # series whose newest runs left their band, kept likewise


def publish(
    history: History,
    out: Path,
    *,
    days: int | None = None,
    branch: str | None = None,
    recent_days: int = 30,
    min_change: float = 0.02,
    steps: bool = True,
) -> Path:
    """Write the site into `out` (index.html, data/) and return the page's path. `days` keeps the runs of
    the last N days; dirty runs are left out, as they are of every baseline. The landing lists the steps
    whose first run after is at most `recent_days` old, as `python -m perf.history steps` does."""
    now = datetime.now(UTC)
    since = now - timedelta(days=days) if days else None
    recent = now - timedelta(days=recent_days)
    gpus, landing, fresh, unmeasured = [], [], [], {}
    for gpu in history.gpus():
        if skipped := history.unmeasured(gpu):
            unmeasured[gpu] = skipped
        series = {
            name: kept
            for name, found in history.all_series(gpu, branch=branch).items()
            if (kept := [p for p in found if since is None or p.started_at >= since])
        }
        if not series:
            continue
        found_steps = {n: series_steps(n, gpu, p, min_change) if steps else [] for n, p in series.items()}
        recent_steps = [s for found in found_steps.values() for s in found if s.after.started_at >= recent]
        fresh_found = [  # of the series still run lately
            f
            for n, p in series.items()
            if steps
            and (f := data.fresh_change(n, gpu, p, found_steps[n], min_change)) is not None
            and f.after.started_at >= recent
        ]
        wanted = {
            (f.benchmark, side.run_id) for f in recent_steps + fresh_found for side in (f.before, f.after)
        }
        names = sorted(series)
        labels, infos = _kernel_files(history, gpu, branch, since, out, names, wanted)
        keys = data.chart_keys(names, labels)
        gpus.append(_write_series(out, gpu, series, names, keys, found_steps))
        for found in recent_steps:
            landing.append(data.landing_entry(found, keys[found.benchmark], infos.get(found.benchmark, {})))
        for found in fresh_found:
            fresh.append(data.landing_entry(found, keys[found.benchmark], infos.get(found.benchmark, {})))
    landing.sort(key=data.importance)
    fresh.sort(key=data.importance)
    index = {
        "gpus": gpus,
        "created": now.isoformat(timespec="seconds"),
        "source": history.url,
        "branch": branch,
        "recent_days": recent_days,
        "steps": steps,
        "landing": landing[:LANDING_ROWS],
        "landing_total": len(landing),
        "fresh": fresh[:FRESH_ROWS],
        "fresh_total": len(fresh),
        "window": data.WINDOW,
        "band_k": data.BAND_K,
        "capped_share": data.CAPPED_SHARE,
        "unmeasured": unmeasured,  # per GPU model: stored times of 0 or less, left out of the charts
        "empty": None if gpus else _why_empty(history, branch, days),
    }
    return write_page(out, index)


def _kernel_files(
    history: History,
    gpu: str,
    branch: str | None,
    since: datetime | None,
    out: Path,
    names: list[str],
    wanted: set[tuple[str, int]],
) -> tuple[dict[str, dict], dict[str, dict[int, Any]]]:
    """Write a kernel-table file per benchmark (data/<gpu>/<its position in `names`>.js) from one
    streamed query; return the variant labels of each benchmark's newest run and the extra_info of the
    (benchmark, run id) pairs `wanted`."""
    position = {name: i for i, name in enumerate(names)}
    folder = out / "data" / folder_name(gpu)
    folder.mkdir(parents=True, exist_ok=True)
    labels: dict[str, dict] = {}
    infos: dict[str, dict[int, Any]] = {}
    current, tables, newest = None, data.KernelTables(), -1

    def flush() -> None:
        if current is not None:
            call = f"PERF.kernelsLoaded({json.dumps(gpu)}, {position[current]}, "
            _write_js(folder / f"{position[current]}.js", call, tables.payload())

    for name, run_id, info in history.extra_infos(gpu, branch=branch, since=since):
        if name not in position:
            continue
        if name != current:
            flush()
            current, tables, newest = name, data.KernelTables(), -1
        tables.add(run_id, info)
        if run_id > newest:  # run ids grow as runs are recorded: the last recorded names the variant
            labels[name], newest = data.labels_of(info), run_id
        if (name, run_id) in wanted:
            infos.setdefault(name, {})[run_id] = info
    flush()
    return labels, infos


def _write_series(out: Path, gpu: str, series, names, keys, found_steps) -> dict[str, Any]:
    """Write data/<gpu>.js, every series of one GPU model and the charts that group them."""
    runs_table, position = data.runs_table(series)
    encoded, charts, methods = [], {}, {}
    for i, name in enumerate(names):
        entry = data.encode_series(name, series[name], position, found_steps[name], methods)
        entry["v"] = keys[name][1]
        encoded.append(entry)
        charts.setdefault(keys[name][0], []).append(i)
    ordered = sorted(charts.items(), key=lambda item: (data.suite_of(item[0]), data.natural_key(item[0])))
    payload = {
        "runs": runs_table,
        "series": encoded,
        "methods": list(methods),  # the GPU-time methods the series' "m" number
        "charts": [[data.suite_of(key), key, members] for key, members in ordered],
    }
    file = f"data/{folder_name(gpu)}.js"
    _write_js(out / file, f"PERF.loaded({json.dumps(gpu)}, ", payload)
    return {
        "name": gpu,
        "file": file,
        "dir": f"data/{folder_name(gpu)}",
        "benchmarks": len(names),
        "charts": len(charts),
        "runs": len(runs_table["id"]),
        "gpu_series": sum(1 for e in encoded if "g" in e),  # series with GPU time (by any method)
        "last": runs_table["t"][-1],
    }


def _why_empty(history: History, branch: str | None, days: int | None) -> str:
    """What the page says where it has no chart: no run at all, none of the branch, none in the days."""
    recorded = history.runs(include_dirty=True)
    if not recorded:
        return f"{history.url} holds no runs yet: record some (python -m perf.history import FILE...)."
    clean = [r for r in recorded if not r.dirty]
    branches = sorted({r.branch or "?" for r in clean})
    if not clean:
        return f"{history.url} holds {len(recorded)} run(s), all of dirty trees, which are never charted."
    if branch is not None and branch not in branches:
        return f"No clean run of branch {branch} in {history.url}; recorded branches: {', '.join(branches)}."
    newest = f"{clean[0].started_at:%Y-%m-%d}"
    return f"No clean run of branch {branch or 'any'} in the last {days} days; the newest is of {newest}."


def write_page(out: Path, index: dict[str, Any]) -> Path:
    """index.html: the page with its style, scripts and `index` put in."""
    here = PAGE.parent
    page = PAGE.read_text()
    page = page.replace("/*STYLE*/", (here / STYLE).read_text())
    page = page.replace("/*SCRIPTS*/", "\n".join((here / name).read_text() for name in SCRIPTS))
    # "</" escaped: a benchmark name holding "</script>" cannot end the script early.
    page = page.replace("/*INDEX*/null", json.dumps(index).replace("</", "<\\/"))
    write_whole(out / "index.html", page.encode())
    return out / "index.html"


def empty_index(reason: str) -> dict[str, Any]:
    """The index of a page without data, saying why."""
    created = datetime.now(UTC).isoformat(timespec="seconds")
    return {"gpus": [], "created": created, "source": "", "landing": [], "fresh": [], "empty": reason}


def _write_js(path: Path, call: str, payload: Any) -> None:
    write_whole(path, (call + json.dumps(payload, separators=(",", ":")) + ");\n").encode())


HELP = "write the trends page (a static site) of the recorded runs"


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="the folder to write the site into"
    )
    parser.add_argument("--days", type=int, metavar="N", help="only the runs of the last N days (all)")
    parser.add_argument("--branch", default="main", help="the branch whose runs are charted (main)")
    parser.add_argument(
        "--recent-days", type=int, default=30, metavar="N",
        help="the landing lists the steps that began in the last N days (30)",
    )  # fmt: skip
    parser.add_argument("--no-steps", action="store_true", help="leave out the change points")


def run(args: Any) -> int:
    from perf.history.store import EmptyHistory, HistoryError, connect

    for flag in ("days", "recent_days"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise HistoryError(f"--{flag.replace('_', '-')} {value}: give a whole number of at least 1")
    if (wrong := cannot_write(args.out, FOLDER)) is not None:
        raise HistoryError(f"--out {args.out}: {wrong}; nothing was written")
    try:
        history = connect(args.db, create=False)
    except EmptyHistory as err:  # a database with no tables: a page that says so, not an error
        page = write_page(args.out, empty_index(str(err)))
        print(f"trends page: {page} (no runs: {err})")
        return 0
    with history:
        page = publish(
            history,
            args.out,
            days=args.days,
            branch=args.branch,
            recent_days=args.recent_days,
            steps=not args.no_steps,
        )
        left_out = {gpu: history.unmeasured(gpu) for gpu in history.gpus()}
    print(f"trends page: {page}")
    for gpu, count in left_out.items():
        if count:
            print(f"{gpu}: {count} stored result(s) with a time of 0 or less left out (not measurements)")
    return 0
