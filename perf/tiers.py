"""The tiers, built from the suites' declarations: the one place benchmarks draw their axes from.

Every module of perf/cases/ may declare suites (`SUITES`, perf/cases/declare.py): each suite's axes say
their values per tier, the option that replaces them and the ids they give. A tier is those values, plus
the cells it keeps (`pr`: a few of every suite). Options replace a tier's values axis by axis
(perf/plugin/options.py); benchmarks take the axes they name as parameters (perf/plugin/parametrize.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from perf.cases.declare import TIER_NAMES, Axis, Cell, Derived, Flag, declared_suites

SUITES = declared_suites()
AXES: tuple[Axis, ...] = tuple(a for s in SUITES for a in s.axes if isinstance(a, Axis))
DERIVED: dict[str, Derived] = {d.name: d for s in SUITES for d in s.axes if isinstance(d, Derived)}
# The benchmark arguments the tier fills, in the order ids list them.
PARAMETERS: tuple[Axis | Derived, ...] = tuple(a for s in SUITES for a in s.axes if a.param)
FLAGS: tuple[Flag, ...] = tuple(f for s in SUITES for f in s.flags)


@dataclass(frozen=True)
class Tier:
    """A tier's value of every axis (tier.presets, tier.matmul_sizes, ...) and of every computed argument
    (tier.attention_shapes), and the cells it keeps."""

    name: str
    values: Mapping[str, Any] = field(repr=False)
    # The cells it keeps, each with the suite that declares it; None keeps every cell. A benchmark that no
    # cell keeps does not run.
    cells: tuple[tuple[str, Cell], ...] | None = None

    def __getattr__(self, name: str) -> Any:
        """An axis's values or a computed argument by name; tests/test_tier_lookups.py checks every name
        the code reads against the declarations."""
        values = self.__dict__.get("values", {})
        if name in values:
            return values[name]
        if name in DERIVED:
            return DERIVED[name].compute(self)
        known = ", ".join(sorted({*values, *DERIVED}))
        raise AttributeError(f"tier {self.__dict__.get('name')!r} has no axis {name!r}; it has {known}")

    def keeps(self, node_id: str, params: Mapping[str, Any]) -> bool:
        """Whether the tier runs the benchmark of this node id ('perf/test_x.py::test_y[ids]') with these
        arguments (its parametrization's)."""
        return self.cells is None or any(cell.keeps(node_id, params) for _, cell in self.cells)

    def with_overrides(self, **axes: Any) -> Tier:
        """The tier with some axes' values replaced; None leaves an axis as it is."""
        unknown = set(axes) - set(self.values)
        if unknown:
            raise TypeError(f"with_overrides: unknown axes {sorted(unknown)}")
        given = {k: v for k, v in axes.items() if v is not None}
        return replace(self, values={**self.values, **given})


def _tier(name: str) -> Tier:
    cells = tuple((s.name, cell) for s in SUITES for cell in s.cells.get(name, ()))
    return Tier(name, {a.name: a.value(name) for a in AXES}, cells or None)


TIERS: dict[str, Tier] = {name: _tier(name) for name in TIER_NAMES}
