"""The fixtures benchmarks take (device, tier, timing_policy, bench), and an out-of-memory inside a
benchmark turned into a skip that names it, with the memory it held given back."""

from __future__ import annotations

import os
import shlex
import sys

import pytest
import torch

from perf import harness
from perf.tiers import SUITES, Tier

SUITES_BY_NAME = {suite.name: suite for suite in SUITES}


@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> torch.device:
    return pytestconfig.perf_device


@pytest.fixture(scope="session")
def tier(pytestconfig: pytest.Config) -> Tier:
    return pytestconfig.perf_tier


# Tiers that check that every suite runs, not measure: (budget s, min rounds) in place of pytest-benchmark's
# unless either option is given (NOTES.md: The CPU tier in five minutes).
CHECK_TIMING = {"cpu": (0.1, 3)}
BUDGET_OPTIONS = ("--benchmark-max-time", "--benchmark-min-rounds")


def _given(config: pytest.Config, options: tuple[str, ...]) -> bool:
    """Whether any of `options` is on the command line, in PYTEST_ADDOPTS or in the ini file's addopts."""
    args = [
        *map(str, config.invocation_params.args),
        *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
        *config.getini("addopts"),
    ]
    return any(arg == option or arg.startswith(f"{option}=") for arg in args for option in options)


@pytest.fixture(scope="session")
def timing_policy(pytestconfig: pytest.Config, device: torch.device, tier: Tier) -> harness.TimingPolicy:
    # pytest-benchmark's own options set the budget; the floor on a round's length is ours:
    # 20 ms keeps a CUDA synchronize and launch (~10-50 us) under 0.25% of a round.
    floor = 0.02 if device.type == "cuda" else 0.005
    budget_s = float(pytestconfig.getoption("benchmark_max_time"))
    min_rounds = int(pytestconfig.getoption("benchmark_min_rounds"))
    if tier.name in CHECK_TIMING and not _given(pytestconfig, BUDGET_OPTIONS):
        budget_s, min_rounds = CHECK_TIMING[tier.name]
    return harness.TimingPolicy(
        min_round_s=max(floor, float(pytestconfig.getoption("benchmark_min_time"))),
        budget_s=budget_s,
        min_rounds=min_rounds,
    )


@pytest.fixture
def bench(
    request, benchmark, pytestconfig: pytest.Config, device: torch.device, timing_policy: harness.TimingPolicy
):
    # The suite of perf/test_<name>.py is the one declared as <name>: its results record it as `suite`.
    suite = SUITES_BY_NAME.get(request.path.stem.removeprefix("test_"))
    yield harness.Bench(
        benchmark,
        device,
        timing_policy,
        snapshot_dir=pytestconfig.perf_snapshot_dir,
        suite=suite.name if suite else None,
        records=suite.records if suite else (),
    )
    # The next benchmark starts with the memory this one used given back.
    harness.release_cached_memory()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """An out-of-memory in a benchmark becomes a skip naming the configuration, and memory is freed.

    Also when torch.compile wrapped it in an error of its own; notes added to the error
    (harness.oom_note) go into the message.
    """
    message = None
    try:
        return (yield)
    except Exception as err:
        message = _out_of_memory_message(item, err)  # no local here may keep the error alive
        if message is None:
            raise
    # pytest keeps the error for post-mortem debugging in sys.last_* until the next test's call, and
    # with it the tensors its frames held: that test's peak memory would count them. A skip needs none.
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    item.config.perf_out_of_memory.append(message)
    pytest.skip(message)  # the bench fixture's teardown then collects what the failed call held


def _out_of_memory_message(item: pytest.Item, err: BaseException) -> str | None:
    """The skip message for `err` if it is, or was raised from, an out-of-memory; else None."""
    oom = harness.out_of_memory_in(err)
    if oom is None:
        return None
    first_line = str(oom).strip().splitlines()[0] if str(oom).strip() else "out of memory"
    notes = dict.fromkeys([*getattr(oom, "__notes__", ()), *getattr(err, "__notes__", ())])
    return f"out of memory in {item.name}: {first_line[:200]}" + "".join(f"; {n}" for n in notes)
