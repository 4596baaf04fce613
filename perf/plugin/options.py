"""The suite's command-line options, and the tier they choose: `--tier` picks one of perf/tiers.py, and
every axis a suite declares with an option (perf/cases/declare.py) replaces the tier's values of that
axis and of the axes it sets; an axis that `filters` a benchmark's own parametrization keeps its cases
to its values instead.

Every value is checked before anything is measured: a bad or empty one stops the run with a UsageError
that names the option and the accepted values, so that a typo never runs (or stores) a different suite.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
import torch

from perf.cases.declare import Axis, DeclarationError, parse_byte_size
from perf.harness import gpu_time
from perf.storage import PERF

try:
    from perf.tiers import AXES, FLAGS, SUITES, TIERS, Tier
except DeclarationError as err:  # one suite's mistake: one line, not the plugin's import traceback
    print(f"perf: a suite declared under perf/cases/ cannot be used: {err}", file=sys.stderr)
    raise SystemExit(pytest.ExitCode.USAGE_ERROR) from None

# The axes with an option of their own, in the order --help lists them.
OPTION_AXES = tuple(axis for axis in AXES if axis.option)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perf", "LM training-stack benchmarks")
    group.addoption("--device", default="auto", help="auto (cuda when present), cpu, cuda, cuda:N")
    group.addoption(
        "--tier", default="auto", help=f"auto, {', '.join(TIERS)}; auto is 'default' on a GPU, 'cpu' without"
    )
    for axis in OPTION_AXES:
        names = [f"--{axis.option}", *(f"--{alias}" for alias in axis.aliases)]
        help = axis.help + (f" (also --{', --'.join(axis.aliases)}, its former name)" if axis.aliases else "")
        group.addoption(*names, dest=axis.name, help=help)
    for flag in FLAGS:
        group.addoption(f"--{flag.option}", action="store_true", help=flag.help)
    group.addoption(
        "--benchmark-tables",
        action="store_true",
        help="print pytest-benchmark's own tables (min, max, mean, stddev, ... of every group) on the CPU "
        "too; a GPU run prints them unless --benchmark-quiet",
    )
    group.addoption(
        "--gpu-time",
        metavar="METHOD",
        help="how GPU time is measured: steady (default; CUDA events around the timed rounds where the "
        "device was busy through them, else a burst of calls back to back after them), burst (a burst "
        "everywhere), isolated (each call alone, the method of results without gpu_method), both (steady, "
        "and isolated calls' median as gpu_isolated_ms); rank collectives and multi-stream calls are "
        "always isolated",
    )
    group.addoption(
        "--memory-snapshot",
        metavar="DIR",
        help="write a torch.cuda.memory snapshot (.pickle) and its HTML view per benchmark into DIR",
    )


# --------------------------------------------------------------------------- reading values
def _split(option: str, raw: str, accepted: tuple = ()) -> tuple[str, ...]:
    """A comma-separated value's items; an empty one ('tiny,,mini', 'tiny,') is refused, not skipped."""
    what = f"accepted: {', '.join(map(str, accepted))}" if accepted else "give at least one value"
    values = tuple(v.strip() for v in raw.split(","))
    if not any(values):
        raise pytest.UsageError(f"--{option}: empty; {what}")
    if not all(values):
        raise pytest.UsageError(f"--{option}: empty item in {raw!r}; separate values by one comma, {what}")
    return values


def _names(option: str, raw: str, accepted: tuple) -> tuple[str, ...]:
    values = _split(option, raw, accepted)
    for v in values:
        if v not in accepted:
            raise pytest.UsageError(f"--{option}: unknown value {v!r}; accepted: {', '.join(accepted)}")
    return values


def _ints(option: str, raw: str, minimum: int) -> tuple[int, ...]:
    values = []
    for v in _split(option, raw):
        try:
            n = int(v)
        except ValueError:
            n = minimum - 1
        if n < minimum:
            raise pytest.UsageError(f"--{option}: {v!r} is not an integer >= {minimum}")
        values.append(n)
    return tuple(values)


def _positive_floats(option: str, raw: str) -> tuple[float, ...]:
    values = []
    for v in _split(option, raw):
        try:
            x = float(v)
        except ValueError:
            x = 0.0
        if not x > 0 or x == float("inf"):
            raise pytest.UsageError(f"--{option}: {v!r} is not a positive number")
        values.append(x)
    return tuple(values)


def _sizes(option: str, raw: str) -> tuple[int, ...]:
    try:
        return tuple(parse_byte_size(v) for v in _split(option, raw))
    except ValueError as err:
        raise pytest.UsageError(f"--{option}: {err}") from None


def read(axis: Axis, raw: str) -> Any:
    """An option's text as the axis's values (`Axis.read`), or a UsageError naming what is accepted."""
    option = axis.option
    if axis.read == "names":
        return _names(option, raw, axis.choices)
    if axis.read == "name":
        if raw not in axis.choices:
            raise pytest.UsageError(f"--{option}: unknown value {raw!r}; accepted: {', '.join(axis.choices)}")
        return raw
    if axis.read == "ints":
        return _ints(option, raw, axis.minimum)
    if axis.read == "sizes":
        return _sizes(option, raw)
    return _positive_floats(option, raw)


def select_gpu_time(config: pytest.Config) -> str:
    """--gpu-time (or PERF_GPU_TIME): the GPU-time method, exported for the processes the run starts."""
    raw = config.getoption("gpu_time")
    if raw is None:
        try:
            return gpu_time.configured_method()
        except ValueError as err:
            raise pytest.UsageError(str(err)) from None
    if raw not in gpu_time.METHODS:
        raise pytest.UsageError(f"--gpu-time {raw}: unknown method; accepted: {', '.join(gpu_time.METHODS)}")
    os.environ[gpu_time.METHOD_VARIABLE] = raw
    return raw


def pytest_configure(config: pytest.Config) -> None:
    config.perf_gpu_time = select_gpu_time(config)


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect: the cells are checked against all collected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Benchmarks deselected: cells the tier does not keep (Tier.cells), and cases of a benchmark's own
    parametrization that an axis filtering it leaves out (`Axis.filters`: --allocators)."""
    kept, left_out = [], []
    tier: Tier = config.perf_tier
    benchmarks = [item for item in items if PERF in item.path.parents]  # tests/ parametrize themselves
    filters = {axis.filters: getattr(tier, axis.name) for axis in AXES if axis.filters}
    for item in items:
        params = _params(item)
        dropped = item in benchmarks and (
            any(name in params and params[name] not in values for name, values in filters.items())
            or not tier.keeps(item.nodeid, params)
        )
        (left_out if dropped else kept).append(item)
    if not any("[" in str(arg) for arg in config.args):  # cells named one by one: a cell may be left out
        _check_cells(tier, benchmarks)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


def _params(item: pytest.Item) -> dict:
    return getattr(getattr(item, "callspec", None), "params", {})


def _function(item: pytest.Item) -> str:
    """'test_x.py::test_y' of 'perf/test_x.py::test_y[ids]'."""
    return item.nodeid.removeprefix("perf/").split("[")[0]


def _check_cells(tier: Tier, benchmarks: list[pytest.Item]) -> None:
    """A declared cell of a collected benchmark that keeps none of its cells, or names an argument the
    benchmark does not take, stops the run naming the suite and the cell."""
    for suite, cell in tier.cells or ():
        of_benchmark = [
            i for i in benchmarks if i.nodeid.removeprefix("perf/").split("[")[0] == cell.benchmark
        ]
        if not of_benchmark:
            continue
        params = getattr(getattr(of_benchmark[0], "callspec", None), "params", {})
        unknown = sorted(set(cell.where) - set(params))
        if unknown:
            raise pytest.UsageError(
                f"suite {suite!r}: tier {tier.name!r} cell {cell} names {', '.join(unknown)}, which "
                f"{cell.benchmark} does not take; it takes {', '.join(params) or 'no arguments'}"
            )
        if not any(
            cell.keeps(i.nodeid, getattr(getattr(i, "callspec", None), "params", {})) for i in of_benchmark
        ):
            raise pytest.UsageError(
                f"suite {suite!r}: tier {tier.name!r} cell {cell} keeps none of the {len(of_benchmark)} "
                f"collected cells of {cell.benchmark}"
            )


# --------------------------------------------------------------------------- the tier
def given_values(config: pytest.Config) -> dict[str, Any]:
    """The axes the options set: each option's axis and the axes it sets too (`Axis.set_by`), then the
    flags. An empty value is given (and refused), never the tier's own."""
    given: dict[str, Any] = {}
    for axis in OPTION_AXES:
        raw = config.getoption(axis.name)
        if raw is not None:
            given[axis.name] = read(axis, raw)
    for axis in AXES:
        if axis.set_by in given:
            given[axis.name] = given[axis.set_by]
    for flag in FLAGS:
        if config.getoption(flag.option.replace("-", "_")):
            given[flag.sets] = flag.value
    return given


def former_names_used(config: pytest.Config) -> list[str]:
    """Notes for options given by a former name: which name replaces it."""
    args = [str(a) for a in config.invocation_params.args]
    return [
        f"--{alias} is now --{axis.option}; the former name still works"
        for axis in OPTION_AXES
        for alias in axis.aliases
        if any(a == f"--{alias}" or a.startswith(f"--{alias}=") for a in args)
    ]


def select_tier(config: pytest.Config, device: torch.device) -> Tier:
    name = config.getoption("tier")
    if name == "auto":
        name = "default" if device.type == "cuda" else "cpu"
    if name not in TIERS:
        raise pytest.UsageError(f"--tier: unknown tier {name!r}; accepted: auto, {', '.join(TIERS)}")
    given = given_values(config)
    tier = TIERS[name].with_overrides(**given)
    total = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else 0
    for suite in SUITES:  # what the suites leave to the device, then their checks of the options
        if suite.fit is not None:
            tier = tier.with_overrides(**suite.fit(tier, total))
    for suite in SUITES:
        problem = suite.check(tier, set(given)) if suite.check is not None else None
        if problem:
            raise pytest.UsageError(problem)
    return tier
