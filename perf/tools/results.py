"""Result files as the gate, the report and combine read them: machine, node ids, and each benchmark's
figures (perf/tools/regression_rule.py), or why a file cannot be used."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf.storage import recorded_on
from perf.tools.regression_rule import GPU, WALL, Timing, gpu_timing, is_host_bound, median_standard_error

# The GPU-time method of a result that does not name one: measured call by call (perf/harness/gpu_time.py).
ISOLATED = "isolated"
# The reason a benchmark has no GPU time where its result gives none.
NO_GPU_TIME = "no gpu_ms in the result (recorded before GPU busy time was measured, or an untimed run)"


class GateError(ValueError):
    """Input on which the gate refuses a verdict: it says why and exits 2, it never passes."""


@dataclass(frozen=True)
class Results:
    """A pytest-benchmark JSON file: where it was recorded and its timings by pytest node id."""

    path: Path
    machine: str  # the GPU model, or 'the CPU (<model>)' for CPU runs
    timings: dict[str, Timing]  # the wall time of every benchmark
    gpu_timings: dict[str, Timing] = field(default_factory=dict)  # GPU busy time, where recorded
    gpu_absent: dict[str, str] = field(default_factory=dict)  # why the others have none
    # The whole file as read, for readers that need more than timings (reports, combining parts).
    document: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # How each GPU time was measured (extra_info gpu_method; ISOLATED where a result does not say).
    gpu_methods: dict[str, str] = field(default_factory=dict)

    def figures(self, name: str) -> dict[str, Timing]:
        """The figures of one benchmark: 'wall' always, 'gpu' where it was measured."""
        found = {WALL: self.timings[name]}
        if name in self.gpu_timings:
            found[GPU] = self.gpu_timings[name]
        return found


def load_results(path: Path, role: str) -> Results:
    """Read a result file; `role` ('--baseline', '--current', 're-measurement') names it in errors."""
    where = f"{role} {path}"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise GateError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise GateError(f"{where}: cannot be read ({err})") from None
    except json.JSONDecodeError as err:
        raise GateError(f"{where}: not valid JSON, truncated or damaged ({err})") from None
    benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benchmarks, list) or not benchmarks:
        raise GateError(
            f"{where}: no benchmarks in it; a timed run (without --benchmark-disable) with "
            "--benchmark-json=FILE writes them"
        )
    perf = data.get("perf") if isinstance(data, dict) else None
    if isinstance(perf, dict) and perf.get("partial"):
        raise GateError(
            f"{where}: partial results, not a baseline or a run to judge ({perf['partial']}); measure again"
        )
    machine_info = data.get("machine_info")
    machine = recorded_on(machine_info.get("perf") if isinstance(machine_info, dict) else None)
    if machine is None:
        raise GateError(f"{where}: no machine_info.perf, so the GPU it ran on is unknown")
    timings, gpu_timings, gpu_absent, gpu_methods = {}, {}, {}, {}
    for i, entry in enumerate(benchmarks):
        stats = entry.get("stats") if isinstance(entry, dict) else None
        median = stats.get("median") if isinstance(stats, dict) else None
        name = entry.get("fullname") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not isinstance(median, int | float) or not median > 0:
            raise GateError(f"{where}: benchmark #{i} has no fullname or no positive stats.median")
        info = entry.get("extra_info")
        timings[name] = Timing(float(median), median_standard_error(stats), is_host_bound(info))
        gpu = gpu_timing(info)
        if gpu is not None:
            gpu_timings[name] = gpu
            method = info.get("gpu_method") if isinstance(info, dict) else None
            gpu_methods[name] = method if isinstance(method, str) and method else ISOLATED
        else:
            reason = info.get("gpu_ms_absent") if isinstance(info, dict) else None
            gpu_absent[name] = str(reason) if reason else NO_GPU_TIME
    return Results(path, machine, timings, gpu_timings, gpu_absent, data, gpu_methods)


def check_same_machine(baseline: Results, current: Results, current_label: str) -> None:
    """`current_label` names the current results in the message: '--current FILE' or 'this run'."""
    if baseline.machine != current.machine:
        raise GateError(
            f"{current_label} was recorded on {current.machine}, --baseline {baseline.path} on "
            f"{baseline.machine}; results of different processors are not comparable"
        )


def newest_baseline(baselines_dir: Path, slug: str) -> Path:
    """The newest stored result of one machine's folder (baselines/README.md names them NNNN_name.json)."""
    stored = sorted((baselines_dir / slug).glob("[0-9][0-9][0-9][0-9]_*.json"))
    if not stored:
        raise GateError(
            f"no stored baseline for {slug} in {baselines_dir / slug}/; "
            "save one with `make baseline NAME=...` "
            "on this machine, or give --baseline FILE"
        )
    return stored[-1]


def this_machine(device: str = "auto") -> str:
    """The processor a run here on `device` (--device's value) is recorded on, as results name it; torch
    is imported only here (see this_machine_slug)."""
    from perf.harness.machine import machine_info, resolve_device

    try:
        return recorded_on(machine_info(resolve_device(device))) or "an unknown machine"
    except ValueError as err:
        raise GateError(str(err)) from None  # it names --device and its value


def this_machine_slug() -> str:
    """The baselines/ folder of the machine this runs on, as the suite's own run names it. The one
    import of the harness by a tool, made only here: torch is imported only when the machine must be
    asked, and reading result files never needs it."""
    from perf.harness.machine import machine_slug, resolve_device

    return machine_slug(resolve_device("auto"))
