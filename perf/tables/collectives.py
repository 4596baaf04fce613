"""The end-of-run collectives table: per backend and world size, a row per collective, dtype, placement
and size, with the time, both bandwidths and the wrong elements of the check."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from perf.cases.collectives import ALLREDUCE_BACKENDS, ALLREDUCE_SUITE, COLLECTIVES, DTYPES, PLACEMENTS, SUITE
from perf.cases.transfer import byte_size_label
from perf.tables.format import fmt, grid, registry_order

TITLE = (
    "collectives: median, algbw and busbw in GB/s (busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for "
    "all_gather, reduce_scatter and all_to_all, 1 for broadcast), wrong elements of the check"
)
# extra_info's dtype (torch's name) -> the short name of ids and options.
_SHORT_DTYPE = {str(dtype).removeprefix("torch."): name for name, dtype in DTYPES.items()}


def _case(x: Mapping[str, Any]) -> tuple[str, str, str]:
    """(collective, dtype, placement); results stored before these fields were fp32 in-place all-reduces."""
    dtype = x.get("dtype", "float32")
    return (
        x.get("collective", "all_reduce"),
        _SHORT_DTYPE.get(dtype, dtype),
        x.get("placement", "in_place"),
    )


# A collective's row starts two spaces in, under its backend and world size.
COLUMNS = ("<collective", "<dtype", "<placement", "<size", "ms", "algbw GB/s", "busbw GB/s", "#wrong")


def table(infos: Iterable[Mapping[str, Any]]) -> list[str]:
    """Lines of the table for the collective results among `infos` (benchmarks' extra_info); none if none."""
    results = [info for info in infos if info.get("suite") in (ALLREDUCE_SUITE, SUITE)]

    def order(x: Mapping[str, Any]) -> tuple:
        collective, dtype, placement = _case(x)
        return (
            registry_order(x["backend"], ALLREDUCE_BACKENDS),
            x["world_size"],
            registry_order(collective, COLLECTIVES),
            registry_order(dtype, DTYPES),
            registry_order(placement, PLACEMENTS),
            x["size_bytes"],
        )

    results.sort(key=order)
    rows: list[list[str] | str] = []
    configuration = None
    for x in results:
        if (x["backend"], x["world_size"]) != configuration:
            configuration = (x["backend"], x["world_size"])
            rows.append(f"{x['backend']} with {x['world_size']} ranks")
        collective, dtype, placement = _case(x)
        # 4 significant digits: from latency-bound 8 B messages (0.0004 GB/s) to NVLink (hundreds).
        cells = [f"  {collective}", dtype, placement, byte_size_label(x["size_bytes"])]
        cells += [
            fmt(x.get("median_ms"), ".3f"),
            fmt(x.get("algbw_gbps"), ".4g"),
            fmt(x.get("busbw_gbps"), ".4g"),
        ]
        rows.append([*cells, fmt(x.get("wrong_elements"), "d")])
    return grid(COLUMNS, rows)


ORDER = 50  # perf/tables/summary.py
TABLES = [(TITLE, table)]
