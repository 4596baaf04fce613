"""One pytest session of the suite: its device and tier, set up once in pytest_configure, and the
session as one rank of a launcher's job (torchrun, srun) where it is one.

Under a launcher every rank joins the launcher's process group first, before the device is chosen
(cuda:LOCAL_RANK) and with the launcher's world size as the only one (perf/workloads/launched_session.py).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from perf import harness
from perf.plugin.baselines import route_results_to_baselines
from perf.plugin.options import former_names_used, given_values, select_tier
from perf.workloads import launched_session


def pytest_configure(config: pytest.Config) -> None:
    # Under torchrun or srun this process is one rank of the job: it joins the launcher's group first.
    rank = launched_session.join()
    if rank:
        _quiet(config)
    try:
        device = launched_session.device(config.getoption("device")) or harness.resolve_device(
            config.getoption("device")
        )
    except ValueError as err:
        raise pytest.UsageError(str(err)) from None
    config.perf_device = device
    config.perf_tier = launched_session.world_sizes(select_tier(config, device), set(given_values(config)))
    config.perf_notes = former_names_used(config)
    config.perf_out_of_memory = []
    config.perf_snapshot_dir = _snapshot_dir(config, device)
    route_results_to_baselines(config, device)


def _snapshot_dir(config: pytest.Config, device: torch.device) -> Path | None:
    """--memory-snapshot's folder, created and checked for writing before anything runs."""
    raw = config.getoption("memory_snapshot")
    if raw is None:
        return None
    folder = Path(raw).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise pytest.UsageError(
            f"--memory-snapshot: cannot write into {raw!r} ({err.strerror or err}); give a writable folder"
        ) from None
    if device.type != "cuda":
        config.perf_notes.append(
            "--memory-snapshot: snapshots come from the CUDA caching allocator; none are written on the CPU"
        )
        return None
    config.perf_notes.append(f"memory snapshots (.pickle and .html per benchmark) go to {folder}")
    return folder


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    launched_session.skip_single_process(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    # Every benchmark's teardown collects garbage: the modules imported by now need not be scanned each time.
    harness.freeze_long_lived()


def pytest_unconfigure(config: pytest.Config) -> None:
    harness.thaw()
    launched_session.finish()


def _quiet(config: pytest.Config) -> None:
    """A rank other than 0 stores, compares and prints nothing: one file per run, from rank 0, whose
    figures the others' results are; rank 0 prints a failure, naming the rank it came from."""
    option = config.option
    for name, off in (("benchmark_save", None), ("benchmark_autosave", False), ("benchmark_json", None)):
        if hasattr(option, name):
            setattr(option, name, off)
    if hasattr(option, "benchmark_compare"):
        option.benchmark_compare = False
    option.verbose = min(option.verbose, -1)
    option.reportchars = ""
    option.tbstyle = "no"
