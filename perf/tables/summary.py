"""Every suite's end-of-run table, in the order the end of a run (perf/plugin/summary.py) and a report
(perf/tools/report/) show them."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from perf.tables import attention, collectives, compiled, data_parallel, memory, precision
from perf.tables.format import Info

# (title, table): a table turns the extra_info of a run's benchmarks into lines; none when it has no rows.
SUMMARY_TABLES: list[tuple[str, Callable[[Iterable[Info]], list[str]]]] = [
    (attention.TITLE, attention.attention_table),
    (attention.DTYPE_COST_TITLE, attention.dtype_cost_table),
    (attention.SCALING_TITLE, attention.scaling_table),
    (compiled.TITLE, compiled.table),
    (compiled.ATTENTION_TITLE, compiled.attention_table),
    *precision.TABLES,
    *memory.TABLES,
    (collectives.TITLE, collectives.table),
    *data_parallel.TABLES,
]
