"""The tier's axes as benchmark parameters: a benchmark names an axis's parameter as an argument
(perf/cases/declare.py: `Axis.param`) and is run once per value of the tier, with ids that its stored
baselines are keyed by.

Ids are part of what a baseline compares by (the node id): they list the parameters in the order the
suites declare them (the model's first), leave out the value every case had before an axis existed
(`unnamed`), and name byte counts as 1MiB, not 1048576 (`label`).
"""

from __future__ import annotations

import difflib
import itertools

import pytest

from perf.cases.declare import NAMED, Axis, Derived
from perf.storage import PERF
from perf.tiers import PARAMETERS, Tier


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if PERF not in metafunc.definition.path.parents:
        return  # correctness tests under tests/ parametrize themselves
    _refuse_unknown_arguments(metafunc)
    axes = [axis for axis in PARAMETERS if axis.param in metafunc.fixturenames]
    if not axes:
        return
    tier: Tier = metafunc.config.perf_tier
    cases = list(itertools.product(*(getattr(tier, axis.name) for axis in axes)))
    ids = ["-".join(filter(None, map(case_id, axes, case))) for case in cases]
    metafunc.parametrize([axis.param for axis in axes], cases, ids=ids)


def _refuse_unknown_arguments(metafunc: pytest.Metafunc) -> None:
    """A benchmark argument that is neither a fixture nor an axis's argument (a misspelt `norm_widht`): a
    collection error naming it and the nearest arguments the axes give, instead of "fixture not found"."""
    fixtures = metafunc.definition._fixtureinfo.name2fixturedefs  # pytest's own record of the defined ones
    params = [axis.param for axis in PARAMETERS]
    marked = {"request"}  # pytest's own, and the arguments a parametrize mark gives
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        marked.update(n.strip() for n in names.split(",")) if isinstance(names, str) else marked.update(names)
    for name in metafunc.definition._fixtureinfo.argnames:
        if name in fixtures or name in params or name in marked:
            continue
        near = difflib.get_close_matches(name, params, n=3)
        hint = f"did you mean {' or '.join(near)}? " if near else ""
        pytest.fail(
            f"{metafunc.function.__name__}: argument {name!r} is no fixture and no axis's argument; {hint}an "
            "axis named in the plural gives its singular (norm_widths: norm_width; docs/adding-a-suite.md)",
            pytrace=False,
        )


def case_id(axis: Axis | Derived, value: object) -> str:
    """One value's part of an id: its label, nothing for the unnamed value, else prefix and value."""
    if axis.unnamed is not NAMED and axis.unnamed == value:
        return ""
    if axis.label is not None:
        return axis.label(value)
    return f"{axis.id_prefix}{value}"
