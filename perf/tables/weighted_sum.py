"""End-of-run table of the weighted-sum suite: the Triton kernel's bandwidth beside its PyTorch
reference's, per mode, rows and precision (results recognized by their `suite` key)."""

from __future__ import annotations

from collections.abc import Iterable

from perf.cases.weighted_sum import PROVIDERS, SUITE
from perf.tables.format import Column, Info, fmt, header, line, of_suite, ratio

TITLE = "weighted sum: GB/s of the Triton kernel and of the PyTorch reference (ratio above 1: Triton faster)"


COLUMNS = (
    Column("mode", 17, "<"),
    Column("rows", 8),
    Column("prec", 5, "<"),
    *(Column(f"{provider} GB/s", 12) for provider in PROVIDERS),
    Column("triton/torch", 12),
)


def table(infos: Iterable[Info]) -> list[str]:
    cases: dict[tuple, dict[str, Info]] = {}
    for x in of_suite(infos, SUITE, required=("mode", "rows", "precision", "provider")):
        cases.setdefault((x["mode"], x["rows"], x["precision"]), {})[x["provider"]] = x
    if not cases:
        return []
    lines = [header(COLUMNS)]
    for mode, rows, precision in sorted(cases):
        by_provider = cases[mode, rows, precision]
        rates = {p: by_provider.get(p, {}).get("gb_per_s") for p in PROVIDERS}
        cells = [mode, str(rows), precision, *(fmt(rates[p], ".1f") for p in PROVIDERS)]
        lines.append(line(COLUMNS, [*cells, fmt(ratio(rates["triton"], rates["torch"]), ".2f", "x")]))
    return lines


ORDER = 70  # perf/tables/summary.py: after the data-parallel tables
TABLES = [(TITLE, table)]
