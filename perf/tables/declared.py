"""The tables suites declare as data (perf/cases/declare.py `Table`), rendered one way: a row per value of
the keys, the figures in columns (once per value of `across`), and ratios of the first figure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from perf.cases.declare import Table
from perf.tables.format import Info, fmt, grid, ratio


def _titles(table: Table, values: tuple[Any, ...]) -> tuple[str, ...]:
    keys = [f"<{k.title or k.field}" for k in table.keys]
    figures = [f"{value} {f.title}".strip() for value in values for f in table.figures]
    return (*keys, *figures, *(f"{a}/{b}" for a, b in table.ratios))


def _sort_key(values: tuple) -> tuple:
    """Rows in the order of their keys, numbers by value, whatever mix of types a column holds."""
    return tuple((0, v, "") if isinstance(v, int | float) else (1, 0, str(v)) for v in values)


def render(table: Table, infos: Iterable[Info]) -> list[str]:
    """The table's lines from a run's results (their extra_info); none where the suite has no results."""
    field, values = table.across if table.across else (None, ("",))
    needed = [k.field for k in table.keys] + ([field] if field else [])
    rows: dict[tuple, dict[Any, Info]] = {}
    for x in infos:
        if x.get("suite") == table.suite and all(name in x for name in needed):
            rows.setdefault(tuple(x[k.field] for k in table.keys), {})[x[field] if field else ""] = x
    lines: list[list[str]] = []
    for key in sorted(rows, key=_sort_key):
        by_value = rows[key]
        cells = [k.label(v) for k, v in zip(table.keys, key, strict=True)]
        for value in values:
            x = by_value.get(value, {})
            cells += [fmt(x.get(f.field), f.spec, f.suffix) for f in table.figures]
        first = table.figures[0].field
        for a, b in table.ratios:
            cells.append(
                fmt(ratio(by_value.get(a, {}).get(first), by_value.get(b, {}).get(first)), ".2f", "x")
            )
        lines.append(cells)
    return grid(_titles(table, values), lines)
