"""The tier's axes as benchmark parameters: a benchmark names an axis's parameter as an argument
(perf/cases/declare.py: `Axis.param`) and is run once per value of the tier, with ids that its stored
baselines are keyed by.

Ids are part of what a baseline compares by (the node id): they list the parameters in the order the
suites declare them (the model's first), leave out the value every case had before an axis existed
(`unnamed`), and name byte counts as 1MiB, not 1048576 (`label`).
"""

from __future__ import annotations

import itertools

import pytest

from perf.cases.declare import NAMED, Axis, Derived
from perf.storage import PERF
from perf.tiers import PARAMETERS, Tier


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if PERF not in metafunc.definition.path.parents:
        return  # correctness tests under tests/ parametrize themselves
    axes = [axis for axis in PARAMETERS if axis.param in metafunc.fixturenames]
    if not axes:
        return
    tier: Tier = metafunc.config.perf_tier
    cases = list(itertools.product(*(getattr(tier, axis.name) for axis in axes)))
    ids = ["-".join(filter(None, map(case_id, axes, case))) for case in cases]
    metafunc.parametrize([axis.param for axis in axes], cases, ids=ids)


def case_id(axis: Axis | Derived, value: object) -> str:
    """One value's part of an id: its label, nothing for the unnamed value, else prefix and value."""
    if axis.unnamed is not NAMED and axis.unnamed == value:
        return ""
    if axis.label is not None:
        return axis.label(value)
    return f"{axis.id_prefix}{value}"
