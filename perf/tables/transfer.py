"""End-of-run table of the transfer suite's copy overlapped with matmuls on two streams (results
recognized by their `suite` key); its copies' table is declared with the suite (perf/cases/transfer.py)."""

from __future__ import annotations

from collections.abc import Iterable

from perf.cases.transfer import byte_size_label
from perf.tables.format import Info, fmt, grid, of_suite

OVERLAP_TITLE = "host-to-device copy and matmuls: serial against overlapped on two streams"


OVERLAP_COLUMNS = ("<copy", "matmuls", "serial ms", "overlap ms", "copy ms", "compute ms", "saved", "at best")


def overlap_table(infos: Iterable[Info]) -> list[str]:
    cases: dict[tuple, dict[str, Info]] = {}
    for x in of_suite(infos, "overlap"):
        cases.setdefault((x["copy_bytes"], x["matmul_n"], x["matmuls"]), {})[x["schedule"]] = x
    rows = []
    for copy_bytes, n, matmuls in sorted(cases):
        by_schedule = cases[copy_bytes, n, matmuls]
        serial = by_schedule.get("serial", {}).get("median_ms")
        overlapped = by_schedule.get("overlapped", {}).get("median_ms")
        # Both cases measure copy and compute alone; the serial case's figures where it ran.
        alone = by_schedule.get("serial") or next(iter(by_schedule.values()))
        copy_ms, compute_ms = alone.get("copy_ms"), alone.get("compute_ms")
        saved = None if serial is None or overlapped is None else 1 - overlapped / serial
        # Overlapped at best takes the longer of the two instead of their sum.
        best = (
            None
            if copy_ms is None or compute_ms is None
            else 1 - max(copy_ms, compute_ms) / (copy_ms + compute_ms)
        )
        cells = [byte_size_label(copy_bytes), f"{matmuls} x n{n}", fmt(serial, ".3f"), fmt(overlapped, ".3f")]
        cells += [fmt(copy_ms, ".3f"), fmt(compute_ms, ".3f"), fmt(saved, ".0%"), fmt(best, ".0%")]
        rows.append(cells)
    return grid(OVERLAP_COLUMNS, rows)


ORDER = 42  # perf/tables/summary.py: after the CUDA graph table, beside the copies' table
TABLES = [(OVERLAP_TITLE, overlap_table)]
