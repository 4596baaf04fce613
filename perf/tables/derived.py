"""The end-of-run tables of every benchmark by name: its derived figures (median, GPU busy time,
tokens/s, TFLOP/s, GB/s, MFU, peak memory, host time), and the project model against the reference in
interleaved rounds.

Names are whole (perf/tables/format.py: named_table); a column with no figure in any row is left out.
"""

from __future__ import annotations

from collections.abc import Sequence

from perf.tables.format import WIDTH, Column, Info, fmt, named_table

DERIVED_TITLE = "derived figures (median)"
INTERLEAVED_TITLE = "project model / plain PyTorch reference, interleaved rounds"

COLUMNS = (
    Column("ms", 10),
    Column("GPU ms", 10),
    Column("busy", 5),
    Column("tokens/s", 11),
    Column("TFLOP/s", 8),
    Column("GB/s", 8),
    Column("MFU", 6),
    Column("peak GiB", 9),
    Column("host ms", 8),
)
INTERLEAVED_COLUMNS = (Column("ms", 10), Column("ref ms", 10), Column("ratio", 6))


def on_gpu(x: Info) -> bool:
    return str(x.get("device", "")).startswith("cuda")


def derived_cells(x: Info) -> list[str]:
    """The figures of one benchmark, '-' where there is none."""
    peak = x.get("peak_memory_bytes")
    return [
        fmt(x.get("median_ms"), ".3f"),
        fmt(x.get("gpu_ms"), ".3f"),
        fmt(x.get("gpu_busy_share"), ".0%"),
        fmt(x.get("tokens_per_s"), ".0f"),
        # A GPU's only: a CPU's throughput has no peak to be read against (MFU is None there too).
        fmt(x.get("tflops") if on_gpu(x) else None, ".3g"),
        fmt(x.get("gb_per_s"), ".4g"),  # bytes a call moves (Work.bytes_moved) per second
        fmt(x.get("mfu"), ".1%"),
        fmt(peak / 2**30 if peak else None, ".2f"),
        fmt(x.get("host_ms"), ".1f"),
    ]


def derived_table(results: Sequence[tuple[str, Info]], width: int = WIDTH) -> list[str]:
    """One row per (name, extra_info); the median always, other columns only where some row has a figure
    (on the CPU: none of the GPU's). None without results."""
    rows = [(name, derived_cells(x)) for name, x in results]
    if not rows:
        return []
    kept = [i for i in range(len(COLUMNS)) if i == 0 or any(cells[i] != "-" for _, cells in rows)]
    return named_table(
        [(name, [cells[i] for i in kept]) for name, cells in rows], [COLUMNS[i] for i in kept], width
    )


def interleaved_table(results: Sequence[tuple[str, Info]], width: int = WIDTH) -> list[str]:
    """The results timed against a baseline call round by round (Bench.run_interleaved); none if none."""
    rows = [
        (
            name,
            [
                f"{x['median_ms']:.3f}",
                f"{x['baseline_median_ms']:.3f}",
                f"{x['ratio_to_baseline']:.3f}",
            ],
        )
        for name, x in results
        if x.get("ratio_to_baseline")
    ]
    return named_table(rows, INTERLEAVED_COLUMNS, width) if rows else []
