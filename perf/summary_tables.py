"""The suites' text tables, in the order a run's end and a report (perf/report.py) show them."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from perf import (
    attention_report,
    collectives_report,
    compile_report,
    dp_report,
    memory_report,
    precision_report,
)
from perf.report_format import Info

# (title, table): a table turns the extra_info of a run's benchmarks into lines; none when it has no rows.
SUMMARY_TABLES: list[tuple[str, Callable[[Iterable[Info]], list[str]]]] = [
    (attention_report.TITLE, attention_report.attention_table),
    (attention_report.DTYPE_COST_TITLE, attention_report.dtype_cost_table),
    (attention_report.SCALING_TITLE, attention_report.scaling_table),
    (compile_report.TITLE, compile_report.table),
    (compile_report.ATTENTION_TITLE, compile_report.attention_table),
    *precision_report.TABLES,
    *memory_report.TABLES,
    (collectives_report.TITLE, collectives_report.table),
    *dp_report.TABLES,
]
