"""The transfer suite's cases: host-to-device copies by size and host memory, and a copy overlapped with
matmuls. Sizes read as byte counts (`1MiB`: declare.byte_size_label, kept here for its readers)."""

from __future__ import annotations

from perf.cases.declare import Axis, Figure, Key, Suite, Table, byte_size_label, cell, parse_byte_size

# Host memory a host-to-device copy reads from: page-locked, or the ordinary pageable kind.
HOST_MEMORY = ("pinned", "pageable")
__all__ = ["HOST_MEMORY", "SUITES", "byte_size_label", "parse_byte_size"]

SUITES = (
    # Host-to-device copies and copy/compute overlap (perf/test_transfer.py): bytes per copy.
    Suite(
        "transfer",
        axes=(
            Axis(
                "transfer_sizes",
                label=byte_size_label,
                values={"cpu": (2**20,), "pr": (2**26,), "full": (2**16, 2**20, 2**24, 2**26, 2**28, 2**30)},
                default=(2**20, 2**26, 2**30),
                help="comma-separated bytes per host-to-device copy, with K, M or G (binary), e.g. 1M,1G",
                read="sizes",
            ),
        ),
        cells={
            "pr": (
                cell("test_transfer.py::test_host_to_device", transfer_size=2**26, host_memory="pinned"),
                cell("test_transfer.py::test_copy_compute_overlap"),
            )
        },
        records=(
            "host_memory",
            "transfer_bytes",
            "schedule",
            "copy_bytes",
            "matmul_n",
            "matmuls",
            "copy_ms",
            "compute_ms",
        ),
        tables=(
            Table(
                "host-to-device copies: GB/s from pinned and pageable memory",
                keys=(Key("transfer_bytes", "size", label=byte_size_label),),
                figures=(Figure("gb_per_s", "GB/s", ".2f"),),
                across=("host_memory", HOST_MEMORY),
                ratios=(("pinned", "pageable"),),
                order=42,
            ),
        ),
    ),
)
