"""Test-wide setup.

Triton reads TRITON_INTERPRET when @triton.jit decorates a kernel, i.e. when a kernels module is first
imported. Without a GPU the kernels can only run in Triton's interpreter, so it is switched on here,
before any test module imports them, unless the caller set it (as `make test` does).

Under pytest-xdist (`make test` runs a worker per core) each test holds the run's lock: shared, or
exclusive for the tests marked `alone` (tests/alone.py), which come last in the order the workers are
handed tests. Each worker compiles with TorchInductor
on its share of the cores: its default, a pool as large as the machine in every worker, would start
cores x workers processes.
"""

from __future__ import annotations

import os
import uuid

import pytest
import torch

from tests import alone, shared_run

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

if os.environ.get("PYTEST_XDIST_WORKER"):
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = str(max(1, (os.cpu_count() or 1) // workers))
    # The worker's share of the cores for torch's CPU threads and for the processes its tests start (ranks
    # read OMP_NUM_THREADS): torch's default, a thread per core in each of cores x workers processes, ran
    # the compile tests several times slower than alone (NOTES.md: make test on one H100).
    os.environ.setdefault("OMP_NUM_THREADS", share)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", share)
    # Not passed on to the pytest runs that tests start: pytest-benchmark turns itself off in any process
    # with PYTEST_XDIST_WORKER set, and those runs measure. This worker knows its role from its config.
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        os.environ.pop(name, None)


def pytest_configure(config: pytest.Config) -> None:
    # The controller of an xdist run names the run, so that it knows the lock files to remove at its end.
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        if config.getoption("numprocesses", None) and config.getoption("testrunuid", None) is None:
            config.option.testrunuid = uuid.uuid4().hex


def _alone(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker(alone.MARK) is not None


def _compiles(item: pytest.Item) -> bool:
    """Tests that compile with torch.compile or Triton from a cold cache: the longest of a fresh run."""
    return "compile" in item.nodeid.lower()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The compiling tests first: handed out while every worker is busy, they end before the short ones
    # instead of one of them holding up the end of the run. The `alone` tests last: handed out when
    # little else is left, each waits for the few tests still running, where first (as one xdist group,
    # which xdist hands out before single tests) they waited for the compiling tests while the
    # turnstile held every new test back. Stable: every worker collects the same order.
    items.sort(key=lambda item: (_alone(item), not _compiles(item)))


_row = alone.ExclusiveRow()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    # Only the workers themselves: a pytest that a test starts inherits their environment, not their role.
    worker = getattr(item.config, "workerinput", None)
    if worker is None:
        return (yield)
    if not _alone(item):
        with alone.held(worker["testrunuid"], exclusive=False):
            return (yield)
    # A worker handed `alone` tests one after another holds the machine over the row.
    _row.enter(worker["testrunuid"])
    try:
        return (yield)
    finally:
        if not _alone(nextitem):
            _row.leave()


def pytest_unconfigure(config: pytest.Config) -> None:
    # The controller ends after its workers: the lock files go with the run.
    run_id = None if hasattr(config, "workerinput") else config.getoption("testrunuid", None)
    if run_id is not None:
        alone.remove(run_id)
        shared_run.remove(run_id)


@pytest.fixture
def dq_conversions(monkeypatch) -> list[torch.Tensor]:
    """The fp32 dQ buffers FlashAttentionTriton's one-pass backward converted in this test, one a launch."""
    from kernels.flash_attention_triton import tuning  # after TRITON_INTERPRET is set above

    converted = []
    convert = tuning.convert_dq

    def recorded(dq_acc, sm_scale, dq):
        converted.append(dq_acc)
        convert(dq_acc, sm_scale, dq)

    monkeypatch.setattr(tuning, "convert_dq", recorded)
    return converted


@pytest.fixture
def backward_buffers(monkeypatch) -> list[tuple[int, bool]]:
    """Per backward launch in this test: the size of the fp32 dQ buffer it got and whether it got
    TMA descriptors (both are the one-pass form's)."""
    from kernels.flash_attention_triton import tuning  # after TRITON_INTERPRET is set above

    seen = []
    kernel = tuning.AUTOTUNED["backward"]
    original = kernel.launch

    def recorded(grid, *args, **kwargs):
        named = kernel.named(args, kwargs)
        seen.append((named["DQ_ACC"].numel(), named["desc_q"] is not None))
        return original(grid, *args, **kwargs)

    monkeypatch.setattr(kernel, "launch", recorded)
    return seen
