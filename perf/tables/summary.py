"""Every suite's end-of-run tables, in the order the end of a run (perf/plugin/summary.py) and a report
(perf/tools/report.py) show them: the tables suites declare as data (perf/cases/declare.py `Table`,
rendered by perf/tables/declared.py), and those a module of perf/tables/ writes as code where a table
truly differs (`TABLES`: title and table, placed by `ORDER`); `LAST_TABLE` where none is given."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterable

import perf.tables
from perf.cases.declare import LAST_TABLE, declared_suites
from perf.tables import declared
from perf.tables.format import Info


def _declared_tables() -> list[tuple[str, Callable[[Iterable[Info]], list[str]]]]:
    modules = [
        importlib.import_module(f"perf.tables.{m.name}") for m in pkgutil.iter_modules(perf.tables.__path__)
    ]
    placed = [
        (getattr(m, "ORDER", LAST_TABLE), m.__name__, entry)
        for m in modules
        if hasattr(m, "TABLES")
        for entry in m.TABLES
    ]
    placed += [
        (table.order, suite.name, (table.title, functools.partial(declared.render, table)))
        for suite in declared_suites()
        for table in suite.tables_of()
    ]
    return [entry for _, _, entry in sorted(placed, key=lambda p: (p[0], p[1]))]


# (title, table): a table turns the extra_info of a run's benchmarks into lines; none when it has no rows.
SUMMARY_TABLES: list[tuple[str, Callable[[Iterable[Info]], list[str]]]] = _declared_tables()
