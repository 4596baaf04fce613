"""Every suite's end-of-run tables, in the order the end of a run (perf/plugin/summary.py) and a report
(perf/tools/report/) show them: each module of perf/tables/ lists its own (`TABLES`: title and table) and
says where they go (`ORDER`; a module without one comes last)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable

import perf.tables
from perf.tables.format import Info

LAST = 1000


def _declared_tables() -> list[tuple[str, Callable[[Iterable[Info]], list[str]]]]:
    modules = [
        importlib.import_module(f"perf.tables.{m.name}") for m in pkgutil.iter_modules(perf.tables.__path__)
    ]
    modules = [m for m in modules if hasattr(m, "TABLES")]
    modules.sort(key=lambda m: (getattr(m, "ORDER", LAST), m.__name__))
    return [entry for module in modules for entry in module.TABLES]


# (title, table): a table turns the extra_info of a run's benchmarks into lines; none when it has no rows.
SUMMARY_TABLES: list[tuple[str, Callable[[Iterable[Info]], list[str]]]] = _declared_tables()
