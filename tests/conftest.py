"""Test-wide setup.

Triton reads TRITON_INTERPRET when @triton.jit decorates a kernel, i.e. when a kernels module is first
imported. Without a GPU the kernels can only run in Triton's interpreter, so it is switched on here,
before any test module imports them, unless the caller set it (as `make test` does).

Under pytest-xdist (`make test` runs a worker per core) each test holds the run's lock: shared, or
exclusive for the tests marked `alone` (tests/alone.py), which also all go to one worker so that they
wait for the others once in a row rather than each on its own. Each worker compiles with TorchInductor
on its share of the cores: its default, a pool as large as the machine in every worker, would start
cores x workers processes.
"""

from __future__ import annotations

import os
import uuid

import pytest
import torch

from tests import alone

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

if os.environ.get("PYTEST_XDIST_WORKER"):
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
    # Not passed on to the pytest runs that tests start: pytest-benchmark turns itself off in any process
    # with PYTEST_XDIST_WORKER set, and those runs measure. This worker knows its role from its config.
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        os.environ.pop(name, None)


def pytest_configure(config: pytest.Config) -> None:
    # The controller of an xdist run names the run, so that it knows the lock files to remove at its end.
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        if config.getoption("numprocesses", None) and config.getoption("testrunuid", None) is None:
            config.option.testrunuid = uuid.uuid4().hex


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker(alone.MARK) is not None:
            item.add_marker(pytest.mark.xdist_group(alone.MARK))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    # Only the workers themselves: a pytest that a test starts inherits their environment, not their role.
    worker = getattr(item.config, "workerinput", None)
    if worker is None:
        return (yield)
    with alone.held(worker["testrunuid"], exclusive=item.get_closest_marker(alone.MARK) is not None):
        return (yield)


def pytest_unconfigure(config: pytest.Config) -> None:
    # The controller ends after its workers: the lock files go with the run.
    run_id = None if hasattr(config, "workerinput") else config.getoption("testrunuid", None)
    if run_id is not None:
        alone.remove(run_id)
