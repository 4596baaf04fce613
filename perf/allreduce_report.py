"""The end-of-run all-reduce table: per backend and world size, a row per message size."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from perf.allreduce_workloads import SUITE
from perf.report_format import fmt, registry_order
from perf.tiers import ALLREDUCE_BACKENDS
from perf.transfer_workloads import byte_size_label

TITLE = "all-reduce (fp32): median, algorithm and bus bandwidth in GB/s (busbw = algbw * 2 (n-1) / n)"


def table(infos: Iterable[Mapping[str, Any]]) -> list[str]:
    """Lines of the table for the all-reduce results among `infos` (benchmarks' extra_info); none if none."""
    results = [info for info in infos if info.get("suite") == SUITE]
    if not results:
        return []
    results.sort(
        key=lambda x: (registry_order(x["backend"], ALLREDUCE_BACKENDS), x["world_size"], x["size_bytes"])
    )
    lines = [f"{'size':<10} {'ms':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}"]
    configuration = None
    for x in results:
        if (x["backend"], x["world_size"]) != configuration:
            configuration = (x["backend"], x["world_size"])
            lines.append(f"{x['backend']} with {x['world_size']} ranks")
        # 4 significant digits: from latency-bound 8 B messages (0.0004 GB/s) to NVLink (hundreds).
        lines.append(
            f"  {byte_size_label(x['size_bytes']):<8} {fmt(x.get('median_ms'), '.3f'):>10} "
            f"{fmt(x.get('algbw_gbps'), '.4g'):>11} {fmt(x.get('busbw_gbps'), '.4g'):>11}"
        )
    return lines
