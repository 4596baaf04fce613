"""The data of the trends page, in the compact form the page reads (perf/history/trends_page.js).

Per GPU model one file of every series: the runs once (time, commit, clocks locked), each benchmark's
figures as columns rounded to SERIES_DIGITS significant digits, the runs where its GPU-time method
changed, its steps, and the chart it shares with the other variants of its shape (chart_keys). Per
benchmark one file of its kernel tables, loaded when a point is clicked: the kernel names once, each
run's microseconds, and its rows' names and launches only where they differ from the run before. And the
landing: the steps of the last days and the series whose newest runs left their noise band, with the
kernels that moved.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perf.history.changepoints import MIN_SIZE, robust_noise
from perf.history.steps import SeriesStep, figure_of
from perf.history.store import Point
from perf.tools.reading.kernel_changes import EXTRA_INFO_KEY, changes_between

SERIES_DIGITS = 5  # significant digits of a charted time: at most 0.01% apart, far below any run's noise
KERNEL_DIGITS = 4  # of a kernel's microseconds and launches in its table
KERNEL_ROWS = 10  # the costliest kernels kept per run and benchmark: what a reader looks at first
KERNELS_MOVED = 3  # kernels named per landing entry
# A point whose GPU clock was held down by the power cap in at least this share of its samples is marked.
CAPPED_SHARE = 0.5
# The noise band of a point: the median of the WINDOW points before it, +- BAND_K robust standard deviations.
WINDOW = 12
BAND_K = 3.0
# The extra_info entries that name a benchmark's variant (provider, model implementation, eager or
# compiled, allocator, host memory, schedule), in the order tried: the first one whose value is a part
# of every node id of the test function decides which of them share a chart.
VARIANT_KEYS = ("provider", "impl", "variant", "allocator", "host_memory", "schedule")


def rounded(value: float, digits: int) -> float | int:
    """`value` to `digits` significant digits, an int where that is whole (shorter in JSON)."""
    if not math.isfinite(value):
        return 0
    found = float(f"{value:.{digits}g}")
    return int(found) if found.is_integer() else found


# A number with an optional byte unit, in a node id: ordered by value, so 16B < 128B < 1KiB < 1GiB.
_NUMBER = re.compile(r"(\d+(?:\.\d+)?)(GiB|MiB|KiB|B)?")
_UNITS = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "B": 1, None: 1}


def natural_key(text: str) -> list:
    """A sort key of a node id that orders its numbers by value (byte sizes by bytes), the rest as text."""
    parts = _NUMBER.split(text)  # text, number, unit, text, number, unit, ..., text
    return [(parts[i], float(parts[i + 1]) * _UNITS[parts[i + 2]] if i + 1 < len(parts) else -1.0)
            for i in range(0, len(parts), 3)]  # fmt: skip


def suite_of(name: str) -> str:
    """The suite section of a node id: its test file without test_ and .py (perf/test_attention.py::x:
    attention); 'other' for a name of no test file."""
    path = name.partition("::")[0].rpartition("/")[2]
    return (
        path.removeprefix("test_").removesuffix(".py") if path.endswith(".py") and "::" in name else "other"
    )


def chart_keys(names: Iterable[str], infos: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """Per node id, (the key of the chart it is drawn in, its label in that chart's legend).

    The benchmarks of one test function share charts by the first of VARIANT_KEYS whose value (in the
    extra_info of the benchmark's newest run, `infos`) is one of the dash-separated parts of every one
    of its node ids' parameters: the key is the node id without that part (its last occurrence), the
    label the part. A function where no such entry names every benchmark gets a chart per benchmark.
    """
    functions: dict[str, list[tuple[str, list[str]]]] = {}
    for name in names:
        function, bracket, params = name.partition("[")
        parts = params[:-1].split("-") if bracket and params.endswith("]") else None
        functions.setdefault(function, []).append((name, parts))
    found = {}
    for function, members in functions.items():
        key = next(
            (
                key
                for key in VARIANT_KEYS
                if all(parts and (infos.get(name) or {}).get(key) in parts for name, parts in members)
            ),
            None,
        )
        for name, parts in members:
            if key is None or parts is None:
                found[name] = (name, "")
                continue
            label = infos[name][key]
            at = len(parts) - 1 - parts[::-1].index(label)
            found[name] = (f"{function}[{'-'.join(parts[:at] + parts[at + 1 :])}]", label)
    return found


def runs_table(series: Mapping[str, Sequence[Point]]) -> tuple[dict[str, list], dict[int, int]]:
    """The runs of a GPU model's series in time order, as columns; and each run id's position."""
    seen: dict[int, Point] = {}
    for points in series.values():
        for p in points:
            seen.setdefault(p.run_id, p)
    ordered = sorted(seen.values(), key=lambda p: (p.started_at, p.run_id))
    table = {
        "id": [p.run_id for p in ordered],
        "t": [int(p.started_at.timestamp()) for p in ordered],
        "c": [(p.commit or "")[:10] for p in ordered],
        "l": [int(bool(p.clocks_locked)) for p in ordered],
    }
    return table, {p.run_id: i for i, p in enumerate(ordered)}


def _ranges(indices: list[int]) -> list[list[int]]:
    """Consecutive run positions as [first, count] pairs: a series present in every run is one pair."""
    out: list[list[int]] = []
    for i in indices:
        if out and out[-1][0] + out[-1][1] == i:
            out[-1][1] += 1
        else:
            out.append([i, 1])
    return out


def encode_series(
    name: str,
    points: Sequence[Point],
    position: Mapping[int, int],
    steps: Sequence[SeriesStep],
    methods: dict[str, int],
) -> dict[str, Any]:
    """One benchmark's series as the page reads it (the keys are trends_page.js's). `methods` numbers the
    GPU-time methods of the GPU model's file; those new to it are added."""
    figure, _ = figure_of(points)
    data: dict[str, Any] = {
        "n": name,
        "f": figure,
        "r": _ranges([position[p.run_id] for p in points]),
        "w": [rounded(p.wall_s * 1e3, SERIES_DIGITS) for p in points],
    }
    if any(p.gpu_s is not None for p in points):
        data["g"] = [None if p.gpu_s is None else rounded(p.gpu_s * 1e3, SERIES_DIGITS) for p in points]
        data["m"] = method_changes(points, methods)
    if any(p.sm_mhz for p in points):
        data["s"] = [round(p.sm_mhz) if p.sm_mhz else None for p in points]
    capped = [i for i, p in enumerate(points) if (p.power_capped or 0) >= CAPPED_SHARE]
    if capped:
        data["c"] = capped
    if steps:
        data["st"] = [[s.step.index, round(s.step.ratio, 4), round(s.step.certainty, 4)] for s in steps]
    return data


def method_changes(points: Sequence[Point], methods: dict[str, int]) -> list[list[int]]:
    """[point index, method number] where the GPU-time method differs from that of the GPU time before:
    the page breaks the line there. Points without GPU time are passed over (the page leaves them out)."""
    changes: list[list[int]] = []
    last = None
    for i, p in enumerate(points):
        if p.gpu_s is None:
            continue
        method = methods.setdefault(p.gpu_method or "?", len(methods))
        if method != last:
            changes.append([i, method])
            last = method
    return changes


class KernelTables:
    """One benchmark's kernel tables over its runs, in the order added (the page replays them in order)."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.runs: list[list[Any]] = []
        self._last: tuple[list[int], list[float]] | None = None

    def add(self, run_id: int, info: object) -> None:
        rows = info.get(EXTRA_INFO_KEY) if isinstance(info, dict) else None
        if not isinstance(rows, list):
            return
        names, times, launches = [], [], []
        for row in rows[:KERNEL_ROWS]:  # a damaged row is left out, as the tools' readers refuse it
            if (
                not isinstance(row, dict)
                or not isinstance(row.get("kernel"), str)
                or not _amount(row.get("us"))
            ):
                continue
            names.append(self.names.setdefault(row["kernel"], len(self.names)))
            times.append(rounded(row["us"], KERNEL_DIGITS))
            count = row.get("launches")
            launches.append(rounded(count, KERNEL_DIGITS) if _amount(count) else 0)
        if not names:
            return
        last = self._last
        same_names, same_launches = (
            last is not None and last[0] == names,
            last is not None and last[1] == launches,
        )
        self.runs.append([run_id, times, 0 if same_names else names, 0 if same_launches else launches])
        self._last = (names, launches)

    def payload(self) -> dict[str, Any]:
        return {"n": list(self.names), "r": self.runs}


def _amount(value: object) -> bool:
    return type(value) in (int, float) and 0 <= value < math.inf  # NaN fails both


def labels_of(info: object) -> dict[str, str]:
    """The entries of an extra_info that chart_keys reads."""
    if not isinstance(info, dict):
        return {}
    return {key: info[key] for key in VARIANT_KEYS if isinstance(info.get(key), str) and info[key]}


# --------------------------------------------------------------------------- the landing
@dataclass(frozen=True)
class Fresh:
    """The newest runs of a series off its noise band: a change too new to be a step (it needs MIN_SIZE
    runs after it)."""

    benchmark: str
    gpu: str
    figure: str
    index: int  # the first of the runs off the band
    ratio: float  # their median over the band's median
    certainty: float
    before: Point
    after: Point  # the newest run


def fresh_change(
    name: str, gpu: str, points: Sequence[Point], steps: Sequence[SeriesStep], min_change: float
) -> Fresh | None:
    """The last 1 or 2 runs (fewer than a step needs) where all are more than BAND_K robust standard
    deviations and min_change from the median of the WINDOW runs before them (after the last step)."""
    figure, values = figure_of(points)
    n = len(values)
    start = steps[-1].step.index if steps else 0
    for k in range(MIN_SIZE - 1, 0, -1):
        window = np.log(values[max(start, n - k - WINDOW) : n - k])
        if len(window) < 2 * MIN_SIZE:
            continue
        middle = float(np.median(window))
        spread = max(1.4826 * float(np.median(np.abs(window - middle))), robust_noise(window))
        z = (np.log(values[n - k :]) - middle) / spread
        ratio = math.exp(float(np.median(np.log(values[n - k :]))) - middle)
        if (np.all(z > BAND_K) or np.all(z < -BAND_K)) and abs(math.log(ratio)) >= math.log1p(min_change):
            certainty = 1 - math.erfc(abs(float(np.mean(z))) * math.sqrt(k) / math.sqrt(2))
            return Fresh(name, gpu, figure, n - k, ratio, certainty, points[n - k - 1], points[-1])
    return None


def landing_entry(found: SeriesStep | Fresh, chart: tuple[str, str], infos: Mapping[int, object]) -> dict:
    """A landing entry of a step or a fresh change; `infos` holds the extra_info of its runs by run id."""
    step = found.step if isinstance(found, SeriesStep) else found
    changes = changes_between(infos.get(found.before.run_id), infos.get(found.after.run_id))
    kernels = (
        changes
        if isinstance(changes, str)
        else [
            [c.kernel, round(c.change_us, 3), c.base_launches, c.current_launches]
            for c in changes[:KERNELS_MOVED]
        ]
    )
    return {
        "gpu": found.gpu,
        "name": found.benchmark,
        "chart": chart[0],
        "label": chart[1],
        "suite": suite_of(found.benchmark),
        "figure": found.figure,
        "index": step.index,
        "ratio": round(step.ratio, 4),
        "certainty": round(step.certainty, 4),
        "before": _side(found.before, found.figure),
        "after": _side(found.after, found.figure),
        "kernels": kernels,
    }


def _side(p: Point, figure: str) -> dict[str, Any]:
    value = p.gpu_s if figure == "gpu" else p.wall_s
    return {
        "commit": (p.commit or "")[:10],
        "t": int(p.started_at.timestamp()),
        "ms": rounded((value or 0.0) * 1e3, SERIES_DIGITS),
    }


def importance(entry: Mapping[str, Any]) -> tuple:
    """The landing's order: slower first, then the more certain (to 0.1%), then the larger."""
    return (entry["ratio"] < 1, -round(entry["certainty"], 3), -abs(math.log(entry["ratio"])), entry["name"])
