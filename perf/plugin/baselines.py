"""Results stored and compared per GPU model: baselines/<gpu>/, and what a comparison is told.

pytest-benchmark stores results under its own machine id (OS and Python version) in .benchmarks/;
here they go to baselines/<gpu-model>/ (perf/storage.py names the folder), with the harness's timer
and the machine info that makes two results comparable. Before anything runs, the baseline that
--benchmark-compare would use is checked: none for this GPU, one of another GPU or a file that cannot
be read is said at the start and end of the run, and is an error with --benchmark-compare-fail.
Baselines are stored compact (perf/storage.py, perf/plugin/result_files.py); pytest-benchmark's own
storage reads what it compares (fullname, stats, machine_info) from them as from any file it wrote.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from perf import harness
from perf.plugin.result_files import partial_results
from perf.storage import BASELINES, ROOT, read_result, recorded_on
from perf.workloads import launched_session

DEFAULT_STORAGE = "file://./.benchmarks"  # pytest-benchmark's default, replaced by baselines/<gpu>/
# How to save a baseline without make: pytest from the environment `make` sets up.
SAVE_COMMAND = "`.venv/bin/python -m pytest perf/ --benchmark-save=NAME`"


def route_results_to_baselines(config: pytest.Config, device: torch.device) -> None:
    """Store and compare results under baselines/<gpu-model>/ so that like is compared with like.

    pytest-benchmark files results under a folder named by its machine id (OS and Python version);
    here that id is the GPU model instead. Called from pytest_configure (perf/plugin/session.py);
    pytest-benchmark's plugin configures after it (trylast), so the options and machine id set here
    are the ones it uses.
    """
    if not hasattr(config.option, "benchmark_storage"):
        return  # pytest-benchmark not loaded (-p no:benchmark)
    slug = harness.machine_slug(device)
    if config.option.benchmark_storage == DEFAULT_STORAGE:
        config.option.benchmark_storage = f"file://{BASELINES}"
    if config.option.benchmark_timer == "time.perf_counter":
        config.option.benchmark_timer = "perf.harness.synchronized_timer"
    # A collection pass in the middle of a launch-bound step shows up as a spike in its round;
    # the bench fixture collects between benchmarks instead.
    config.option.benchmark_disable_gc = True
    import pytest_benchmark.session

    pytest_benchmark.session.get_machine_id = lambda: slug
    storage = config.option.benchmark_storage
    if storage.startswith("file://"):  # other backends (elasticsearch) do their own loading
        _check_baseline(config, device, Path(storage.removeprefix("file://")) / slug)


def _check_baseline(config: pytest.Config, device: torch.device, folder: Path) -> None:
    """Say what --benchmark-compare will compare with, or why it will not compare at all."""
    compare = config.option.benchmark_compare
    if compare is True:  # no file named: the newest stored result of this machine
        stored = sorted(folder.glob("[0-9][0-9][0-9][0-9]_*.json"))
        if not stored:
            _no_comparison(
                config,
                f"no stored baseline for {folder.name} in {_shown(folder.parent)}/: this run is not compared;"
                f"\n  save one with `make baseline NAME=...` ({SAVE_COMMAND} without make).",
            )
            return
        candidates = [stored[-1]]
    elif compare:
        # As pytest-benchmark reads it: a file (absolute or relative), a name prefix in this machine's
        # folder, or 'machine/prefix'.
        given = Path(compare).expanduser()
        if given.is_absolute() or given.is_file():
            candidates = [given]
        else:
            candidates = sorted(folder.glob(f"{compare}*.json")) or sorted(
                folder.parent.glob(f"{compare}*.json")
            )
        if not candidates:
            _no_comparison(
                config,
                f"cannot compare against {compare!r}: no file of that name, and no stored result starting "
                f"with it in {_shown(folder)}/.",
            )
            return
    else:
        return
    for path in candidates:
        problem = _baseline_problem(path, device)
        if problem:
            _no_comparison(config, f"cannot compare against {_shown(path)}: {problem}.")
            return
    config.perf_notes.append(f"comparing against {', '.join(_shown(p) for p in candidates)}")


def _shown(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _no_comparison(config: pytest.Config, message: str) -> None:
    if config.option.benchmark_compare_fail:
        raise pytest.UsageError(f"{message} A regression gate needs a baseline of this GPU.")
    config.option.benchmark_compare = False
    config.perf_notes.append(message)


def _baseline_problem(path: Path, device: torch.device) -> str | None:
    """Why a stored result cannot serve as this machine's baseline, or None if it can."""
    if not path.is_file():
        return "no such file"
    try:
        data = read_result(path)  # compact or indented, as load_results reads it
        benchmarks = data["benchmarks"]
        info = data["machine_info"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"unreadable result file ({type(err).__name__}: {err})"
    if not isinstance(benchmarks, list) or not isinstance(info, dict):
        return "unreadable result file (no list of benchmarks or no machine info)"
    partial = data.get("perf", {}).get("partial") if isinstance(data.get("perf"), dict) else None
    if partial:
        return f"it holds partial results ({partial})"
    stored, current = _recorded_on(info.get("perf")), _recorded_on(harness.machine_info(device))
    if stored != current:
        return f"it was recorded on {stored}, this run is on {current}; such results are not comparable"
    return None


def _recorded_on(perf_info: object) -> str:
    """The processor a result belongs to: the GPU model, or the CPU model for CPU runs."""
    return recorded_on(perf_info) or "an unknown machine (no 'perf' machine info)"


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    machine_info["perf"] = harness.machine_info(config.perf_device)
    launch = launched_session.machine_info()
    if launch is not None:
        machine_info["perf"]["launch"] = launch


def pytest_collection_finish(session: pytest.Session) -> None:
    """The benchmarks this run selected (after -k, the tier's cells and deselection), for its results."""
    session.config.perf_selected = [
        item.nodeid for item in session.items if "bench" in getattr(item, "fixturenames", ())
    ]


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    """Results say which tier ran and which benchmarks it selected: the gate tells a benchmark that
    vanished (skipped, failed) from one that this run's selection left out."""
    output_json["perf"] = {
        "tier": config.perf_tier.name,
        "selected": sorted(getattr(config, "perf_selected", [])),
    }
    partial_results(config, output_json)
