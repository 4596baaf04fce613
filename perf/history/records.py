"""A result file of this suite (pytest-benchmark JSON with machine_info.perf) as rows of the results
database: pure functions, no database. The digest names a run by its content, so a run recorded at its
end and imported again from its file is stored once; NotAResult says why a document is not a run.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from perf.storage import machine_folder, recorded_on
from perf.tools.reading.measurements import not_measured
from perf.tools.reading.timings import is_host_bound

ISOLATED = "isolated"  # the GPU-time method of a result that names none (perf/harness/gpu_time.py)
ROUNDS, BURST = "rounds", "burst"
STEADY = "steady"  # a run whose figures are a mix of rounds and burst, as --gpu-time steady chooses


class NotAResult(ValueError):
    """A document that is not a whole run of this suite; the message is one line, without its file."""


def check(document: object) -> None:
    """Raise NotAResult unless `document` is a whole result file of this suite."""
    if not isinstance(document, Mapping):
        raise NotAResult("not a result file (a JSON object with benchmarks and machine_info)")
    perf = document.get("perf")
    if isinstance(perf, Mapping) and perf.get("partial"):
        raise NotAResult(f"partial results ({perf['partial']}), not a whole run; record a complete run")
    benchmarks = document.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise NotAResult(
            "no benchmarks in it; a timed run (without --benchmark-disable) with --benchmark-json=FILE "
            "writes them"
        )
    machine_info = document.get("machine_info")
    if not isinstance(machine_info, Mapping) or not isinstance(machine_info.get("perf"), Mapping):
        raise NotAResult("no machine_info.perf: not a result file of this suite (another tool's JSON?)")
    if utc_time(document.get("datetime")) is None:
        raise NotAResult("no datetime of its run (pytest-benchmark's `datetime`)")
    seen = set()
    for i, entry in enumerate(benchmarks):
        name = entry.get("fullname") if isinstance(entry, Mapping) else None
        if not isinstance(name, str) or not name:
            raise NotAResult(f"benchmark #{i} has no fullname")
        wrong = not_measured(entry)
        if wrong is not None:
            raise NotAResult(f"benchmark {name}: {wrong}")
        if name in seen:
            raise NotAResult(f"benchmark {name} appears twice")
        seen.add(name)


def digest(document: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of what identifies a run: its time, commit, machine and every
    benchmark's figures (not the file's layout, nor the parts a tool may add around them)."""
    content = [
        document.get("datetime"),
        document.get("commit_info"),
        document.get("machine_info"),
        [
            {key: entry.get(key) for key in ("fullname", "stats", "extra_info")}
            for entry in document["benchmarks"]
        ],
    ]
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def machine_row(document: Mapping[str, Any]) -> dict[str, Any]:
    """The machines row of a run, with the fingerprint that deduplicates it."""
    machine_info = document["machine_info"]
    perf = machine_info["perf"]
    gpu = perf.get("gpu") if isinstance(perf.get("gpu"), Mapping) else {}
    row = {
        "gpu": recorded_on(dict(perf)),
        "gpu_count": _integer(gpu.get("count")),
        "runner": _text(machine_info.get("node")),
        "driver": _text(gpu.get("driver")),
        "cuda": _text(perf.get("cuda")),
        "torch": _text(perf.get("torch")),
        "triton": _text(perf.get("triton")),
        "power_limit_w": _number(gpu.get("power_limit_w")),
        "clocks_locked": gpu.get("clocks_locked") if isinstance(gpu.get("clocks_locked"), bool) else None,
    }
    text = json.dumps(row, sort_keys=True, separators=(",", ":"))
    return row | {"fingerprint": hashlib.sha256(text.encode()).hexdigest(), "slug": machine_folder(perf)}


def run_row(document: Mapping[str, Any], source: str, recorded_at: datetime, key: str) -> dict[str, Any]:
    """The runs row of a run whose digest is `key`, but its machine_id."""
    commit = document.get("commit_info")
    commit = commit if isinstance(commit, Mapping) else {}
    perf = document.get("perf")
    perf = perf if isinstance(perf, Mapping) else {}
    return {
        "digest": key,
        "commit": _text(commit.get("id")),
        "commit_time": utc_time(commit.get("time")),
        "dirty": bool(commit.get("dirty")),
        "branch": _text(commit.get("branch")),
        "project": _text(commit.get("project")),
        "started_at": utc_time(document.get("datetime")),
        "recorded_at": recorded_at,
        "tier": _text(perf.get("tier")),
        "gpu_method": run_method([entry.get("extra_info") for entry in document["benchmarks"]]),
        "source": source,
        "benchmarks": len(document["benchmarks"]),
    }


def result_rows(document: Mapping[str, Any], gpu: str) -> list[dict[str, Any]]:
    """The results rows of a run's benchmarks, but their run_id."""
    rows = []
    for entry in document["benchmarks"]:
        stats = finite({key: value for key, value in entry["stats"].items() if key != "data"})
        info = entry.get("extra_info")
        info = finite(info) if isinstance(info, Mapping) else {}
        gpu_ms = _number(info.get("gpu_ms"))
        gpu_s = gpu_ms / 1e3 if gpu_ms is not None and gpu_ms > 0 else None
        clocks = info.get("clocks") if isinstance(info.get("clocks"), Mapping) else {}
        throttle = clocks.get("throttle") if isinstance(clocks.get("throttle"), Mapping) else {}
        rows.append(
            {
                "gpu": gpu,
                "benchmark": entry["fullname"],
                "group": _text(entry.get("group")),
                "wall_s": _number(stats.get("median")),
                "wall_iqr_s": _number(stats.get("iqr")),
                "wall_stddev_s": _number(stats.get("stddev")),
                "wall_min_s": _number(stats.get("min")),
                "rounds": _integer(stats.get("rounds")),
                "iterations": _integer(stats.get("iterations")),
                "gpu_s": gpu_s,
                "gpu_method": method_of(info) if gpu_s is not None else None,
                "sm_mhz": measured_clock(info),
                "power_capped": _number(throttle.get("power_cap")),
                "host_bound": is_host_bound(info),
                "stats": stats,
                "extra_info": info,
            }
        )
    return rows


def method_of(extra_info: Mapping[str, Any]) -> str:
    """How a result's GPU time was measured: its gpu_method, ISOLATED where it names none."""
    method = extra_info.get("gpu_method")
    return method if isinstance(method, str) and method else ISOLATED


def run_method(infos: Sequence[object]) -> str | None:
    """The method of a run's GPU figures: the one all share, STEADY for a mix of rounds and burst, else
    the methods joined by '+'; None where no benchmark has GPU time."""
    methods = {
        method_of(info)
        for info in infos
        if isinstance(info, Mapping) and (_number(info.get("gpu_ms")) or 0) > 0
    }
    if len(methods) <= 1:
        return next(iter(methods), None)
    return STEADY if methods <= {ROUNDS, BURST} else "+".join(sorted(methods))


def measured_clock(extra_info: Mapping[str, Any]) -> float | None:
    """The mean SM clock its GPU figure was measured at: the timed rounds' for the rounds method, else the
    profiled calls', else the whole benchmark's; None where no clock was sampled."""
    clocks = extra_info.get("clocks")
    if not isinstance(clocks, Mapping):
        return None
    parts = (["rounds"] if extra_info.get("gpu_method") == ROUNDS else []) + ["profiled"]
    for part in parts:
        if isinstance(clocks.get(part), Mapping) and _number(clocks[part].get("sm_mhz_mean")):
            return _number(clocks[part]["sm_mhz_mean"])
    return _number(clocks.get("sm_mhz_mean")) or None


def finite(value: Any) -> Any:
    """`value` as JSON both backends store: NaN and infinities as null (PostgreSQL's json refuses them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(key): finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def utc_time(value: object) -> datetime | None:
    """An ISO 8601 time as aware UTC (a naive one taken as UTC); None where absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _integer(value: object) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: object) -> str | None:
    return str(value) if value is not None and value != "" else None
