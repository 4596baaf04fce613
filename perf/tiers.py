"""The tiers, built from the suites' declarations: the one place benchmarks draw their axes from.

Every module of perf/cases/ may declare suites (`SUITES`, perf/cases/declare.py): each suite's axes say
their values per tier, the option that replaces them and the ids they give. A tier is those values, plus
the cells it keeps (`pr`: a few of every suite). Options replace a tier's values axis by axis
(perf/plugin/options.py); benchmarks take the axes they name as parameters (perf/plugin/parametrize.py).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import perf.cases
from model.config import PRESETS
from perf.cases.attention import SWEEPS
from perf.cases.declare import TIER_NAMES, Axis, Derived, Flag, Suite


def _declared_suites() -> tuple[Suite, ...]:
    """Every suite perf/cases/ declares, the shared ones (the model's axes) first: their axes come first
    in every id."""
    found = []
    for module in pkgutil.iter_modules(perf.cases.__path__):
        found += getattr(importlib.import_module(f"perf.cases.{module.name}"), "SUITES", ())
    return tuple(sorted(found, key=lambda suite: not suite.shared))


SUITES = _declared_suites()
AXES: tuple[Axis, ...] = tuple(a for s in SUITES for a in s.axes if isinstance(a, Axis))
DERIVED: dict[str, Derived] = {d.name: d for s in SUITES for d in s.axes if isinstance(d, Derived)}
# The benchmark arguments the tier fills, in the order ids list them.
PARAMETERS: tuple[Axis | Derived, ...] = tuple(a for s in SUITES for a in s.axes if a.param)
FLAGS: tuple[Flag, ...] = tuple(f for s in SUITES for f in s.flags)


@functools.cache
def cell_pattern(pattern: str) -> re.Pattern[str]:
    """A cells pattern as a regular expression: `*` is any text, every other character itself."""
    return re.compile(".*".join(map(re.escape, pattern.split("*"))))


@dataclass(frozen=True)
class Tier:
    """A tier's value of every axis (tier.presets, tier.matmul_sizes, ...) and of every computed argument
    (tier.attention_shapes), and the cells it keeps."""

    name: str
    values: Mapping[str, Any] = field(repr=False)
    # Patterns of node ids under perf/ in which `*` stands for any text and brackets are plain
    # ("test_matmul.py::test_matmul[*]"); None keeps every cell. A benchmark none matches does not run.
    cells: tuple[str, ...] | None = None

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("values", {})
        if name in values:
            return values[name]
        if name in DERIVED:
            return DERIVED[name].compute(self)
        raise AttributeError(f"tier {self.__dict__.get('name')!r} has no axis {name!r}")

    def keeps(self, node_id: str) -> bool:
        """Whether the tier runs the benchmark of this node id ('perf/test_x.py::test_y[ids]')."""
        if self.cells is None:
            return True
        relative = node_id.removeprefix("perf/")
        return any(cell_pattern(pattern).fullmatch(relative) for pattern in self.cells)

    def with_overrides(self, **axes: Any) -> Tier:
        """The tier with some axes' values replaced; None leaves an axis as it is."""
        unknown = set(axes) - set(self.values)
        if unknown:
            raise TypeError(f"with_overrides: unknown axes {sorted(unknown)}")
        given = {k: v for k, v in axes.items() if v is not None}
        return replace(self, values={**self.values, **given})


def _tier(name: str) -> Tier:
    patterns = tuple(p for s in SUITES for p in s.cells.get(name, ()))
    return Tier(name, {a.name: a.value(name) for a in AXES}, patterns or None)


TIERS: dict[str, Tier] = {name: _tier(name) for name in TIER_NAMES}


def shape_filter_problem(tier: Tier, given: dict[str, bool]) -> str | None:
    """Why the tier's seq and head-dim filters keep no shape of its sweeps, naming where each filter
    came from (`given`: whether --seqs, --head-dims set it), or None where some shape is kept."""
    if tier.attention_shapes or tier.scaling_shapes:
        return None
    shapes = [s for name in (*tier.attention_sweeps, "naive_scaling") for s in SWEEPS[name]]

    def source(option: str) -> str:
        return f"--{option}" if given[option] else f"tier {tier.name!r}"

    wanted = [
        f"{axis} in {', '.join(map(str, values))} ({source(option)})"
        for axis, option, values in (("seq", "seqs", tier.seqs), ("head dim", "head-dims", tier.head_dims))
        if values is not None
    ]
    return (
        f"--seqs/--head-dims: sweeps {', '.join(tier.attention_sweeps)}, naive_scaling have no shape with "
        f"{' and '.join(wanted)}; their seqs: {', '.join(map(str, sorted({s.seq for s in shapes})))}; "
        f"head dims: {', '.join(map(str, sorted({s.head_dim for s in shapes})))}"
    )


# fp32 weights, gradients and two AdamW states: bytes per parameter a training step keeps.
TRAINING_BYTES_PER_PARAMETER = 16
# Share of device memory the training state may take, leaving the rest to activations at context 512.
TRAINING_STATE_SHARE = 0.7


def largest_fitting_preset(device_bytes: int) -> str:
    """The largest preset whose training state (weights, gradients, AdamW) fits the device."""
    fitting = [
        name
        for name, config in PRESETS.items()
        if TRAINING_BYTES_PER_PARAMETER * config.num_parameters() <= TRAINING_STATE_SHARE * device_bytes
    ]
    if not fitting:
        return min(PRESETS, key=lambda name: PRESETS[name].num_parameters())
    return max(fitting, key=lambda name: PRESETS[name].num_parameters())
