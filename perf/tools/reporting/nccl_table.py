"""The suite's NCCL bus bandwidth beside nccl-tests' at the same sizes, as a table: a row per size both
measured (collective, dtype, placement, world size and bytes alike), then each case's peak on both sides,
with the ratio, the share of NCCL's ceiling the suite reaches."""

from __future__ import annotations

from collections.abc import Iterable

from perf.tables.format import fmt, grid
from perf.tools.reading.nccl_logs import Row, case_key

COLUMNS = ("<collective", "<dtype", "<placement", "world", "size", "suite GB/s", "nccl-tests GB/s")
COLUMNS += ("suite/nccl", "#wrong")


def table(suite: Iterable[Row], nccl: Iterable[Row]) -> list[str]:
    """Every size both measured, then each case's peak on both sides; none if nothing matches."""
    theirs = {(*case_key(r), r.size_bytes): r for r in nccl}
    pairs = [
        (r, theirs[(*case_key(r), r.size_bytes)]) for r in suite if (*case_key(r), r.size_bytes) in theirs
    ]
    rows = []
    peaks: dict[tuple, tuple[float, float]] = {}
    for ours, ref in sorted(pairs, key=lambda pair: (*case_key(pair[0]), pair[0].size_bytes)):
        wrong = f"{fmt(ours.wrong, 'd')}/{fmt(ref.wrong, 'd')}"
        cells = [
            *map(str, case_key(ours)),
            str(ours.size_bytes),
            f"{ours.busbw_gbps:.2f}",
            f"{ref.busbw_gbps:.2f}",
        ]
        rows.append([*cells, fmt(_ratio(ours.busbw_gbps, ref.busbw_gbps), ".2f"), wrong])
        best = peaks.get(case_key(ours), (0.0, 0.0))
        peaks[case_key(ours)] = (max(best[0], ours.busbw_gbps), max(best[1], ref.busbw_gbps))
    for key, (ours, ref) in peaks.items():
        rows.append([*map(str, key), "peak", f"{ours:.2f}", f"{ref:.2f}", fmt(_ratio(ours, ref), ".2f"), ""])
    return grid(COLUMNS, rows)


def _ratio(ours: float, ref: float) -> float | None:
    return ours / ref if ref else None
