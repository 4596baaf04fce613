"""Result files as the gate, the report and combine read them: machine, node ids, and each benchmark's
figures (perf/tools/reading/timings.py), or why a file cannot be used (GateError). Stored baselines are
compact (perf/storage.py): `load_results` gives every tool the document as written, whichever the form."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perf.storage import expand_document, recorded_on
from perf.tools.reading.errors import GateError
from perf.tools.reading.kernel_changes import EXTRA_INFO_KEY
from perf.tools.reading.measurements import not_measured
from perf.tools.reading.timings import GPU, WALL, Timing, gpu_timing, is_host_bound, median_standard_error

# The GPU-time method of a result that does not name one: measured call by call (perf/harness/gpu_time.py).
ISOLATED = "isolated"
BURST = "burst"
# Figures a result records beside its own gpu_ms, by method: what runs that chose differently can share.
ALTERNATES = {BURST: "gpu_burst_ms", ISOLATED: "gpu_isolated_ms"}
# The reason a benchmark has no GPU time where its result gives none.
NO_GPU_TIME = "no gpu_ms in the result (recorded before GPU busy time was measured, or an untimed run)"


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
    # The figures of other methods recorded beside gpu_ms (ALTERNATES), by benchmark and method.
    gpu_alternates: dict[str, dict[str, Timing]] = field(default_factory=dict)

    def gpu_figure(self, name: str, method: str) -> Timing | None:
        """The GPU figure of `name` by `method`: its own or one recorded beside it; None if neither."""
        if name not in self.gpu_timings:
            return None
        if self.gpu_methods.get(name, ISOLATED) == method:
            return self.gpu_timings[name]
        return self.gpu_alternates.get(name, {}).get(method)

    @functools.cached_property
    def kernel_tables(self) -> dict[str, dict[str, float]]:
        """Microseconds per call of each kernel, by benchmark, from the kernel tables it recorded (extra_info
        gpu_kernels); read once per run, as the A/B asks for them benchmark by benchmark."""
        tables = {}
        for entry in self.document.get("benchmarks", ()):
            info = entry.get("extra_info") if isinstance(entry, dict) else None
            rows = info.get(EXTRA_INFO_KEY) if isinstance(info, dict) else None
            if isinstance(rows, list) and isinstance(entry.get("fullname"), str):
                times = {row.get("kernel"): row.get("us") for row in rows if isinstance(row, dict)}
                tables[entry["fullname"]] = {
                    k: float(v) for k, v in times.items() if isinstance(k, str) and _positive(v)
                }
        return tables

    def figures(self, name: str) -> dict[str, Timing]:
        """The figures of one benchmark: 'wall' always, 'gpu' where it was measured."""
        found = {WALL: self.timings[name]}
        if name in self.gpu_timings:
            found[GPU] = self.gpu_timings[name]
        return found


def read_document(path: Path, where: str) -> Any:
    """A result file's document (a compact baseline expanded as written; any other as it is), or GateError
    starting with `where` and saying what is wrong."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise GateError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise GateError(f"{where}: cannot be read ({err})") from None
    except json.JSONDecodeError as err:
        raise GateError(f"{where}: not valid JSON, truncated or damaged ({err})") from None
    try:
        return expand_document(data)
    except ValueError as err:
        raise GateError(f"{where}: {err}") from None


def load_results(path: Path, role: str) -> Results:
    """Read a result file; `role` ('--baseline', '--current', 're-measurement') names it in errors."""
    where = f"{role} {path}"
    data = read_document(path, where)
    benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not {"benchmarks", "machine_info"} & set(data):
        raise GateError(
            f"{where}: not a result file of pytest-benchmark (no benchmarks, no machine_info): another "
            "tool's JSON? Give a file that --benchmark-json or --benchmark-save wrote"
        )
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
    timings, gpu_timings, gpu_absent, gpu_methods, gpu_alternates = {}, {}, {}, {}, {}
    for i, entry in enumerate(benchmarks):
        stats = entry.get("stats") if isinstance(entry, dict) else None
        median = stats.get("median") if isinstance(stats, dict) else None
        name = entry.get("fullname") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise GateError(f"{where}: benchmark #{i} has no fullname")
        wrong = not_measured(entry)
        if wrong is not None:
            raise GateError(f"{where}: benchmark {name}: {wrong}")
        info = entry.get("extra_info")
        timings[name] = Timing(float(median), median_standard_error(stats), is_host_bound(info))
        gpu = gpu_timing(info)
        if gpu is not None:
            gpu_timings[name] = gpu
            method = info.get("gpu_method") if isinstance(info, dict) else None
            gpu_methods[name] = method if isinstance(method, str) and method else ISOLATED
            others = {
                other: Timing(float(info[key]) / 1e3, None, sm_mhz=gpu.sm_mhz)
                for other, key in ALTERNATES.items()
                if other != gpu_methods[name] and _positive(info.get(key))
            }
            if others:
                gpu_alternates[name] = others
        else:
            reason = info.get("gpu_ms_absent") if isinstance(info, dict) else None
            gpu_absent[name] = str(reason) if reason else NO_GPU_TIME
    return Results(path, machine, timings, gpu_timings, gpu_absent, data, gpu_methods, gpu_alternates)


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def shared_method(runs: Sequence[Results], name: str) -> str | None:
    """The method by which every run has a GPU figure of `name`: their own where all chose one, else the
    burst's (or isolated calls') figure that each recorded; None where they share none."""
    own = {run.gpu_methods.get(name, ISOLATED) for run in runs}
    if len(own) == 1:
        return own.pop()
    for method in ALTERNATES:
        if all(run.gpu_figure(name, method) is not None for run in runs):
            return method
    return None


def aligned(runs: Sequence[Results]) -> list[Results]:
    """The runs with each benchmark's GPU figure taken by a method all the runs that measured it share,
    where their own methods differ (the steady method chooses rounds or burst per run; perf/harness/
    gpu_time.py); a run without it (a re-measurement of others) changes nothing. Where they share none,
    their own figures stay and the tools judge wall time (they say so)."""
    runs = list(runs)
    chosen = {}
    for name in {name for run in runs for name in run.gpu_timings}:
        having = [run for run in runs if name in run.gpu_timings]
        method = shared_method(having, name)
        if method is not None and any(run.gpu_methods.get(name, ISOLATED) != method for run in having):
            chosen[name] = method
    return [align_to(run, chosen) for run in runs]


def align_to(run: Results, methods: Mapping[str, str]) -> Results:
    """`run` with the GPU figure of each benchmark named in `methods` taken by that method, where it
    recorded one."""
    timings, own = dict(run.gpu_timings), dict(run.gpu_methods)
    for name, method in methods.items():
        figure = run.gpu_figure(name, method)
        if figure is not None:
            timings[name], own[name] = figure, method
    if timings == run.gpu_timings and own == run.gpu_methods:
        return run
    return replace(run, gpu_timings=timings, gpu_methods=own)


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
