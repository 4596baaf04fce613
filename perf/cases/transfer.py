"""Byte counts as benchmark ids and options write them (`1MiB`, `64K`), and the host memory of copies.

The transfer and collective suites name their sizes with byte_size_label, so that an id reads
`test_allreduce[nccl-world2-1MiB]` rather than a count of bytes; --transfer-sizes and
--allreduce-sizes take the same units back through parse_byte_size.
"""

from __future__ import annotations

from perf.cases.declare import Axis, Suite

# Host memory a host-to-device copy reads from: page-locked, or the ordinary pageable kind.
HOST_MEMORY = ("pinned", "pageable")

_BINARY_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def byte_size_label(size: int) -> str:
    """'64KiB', '1MiB', '1GiB' for whole multiples of a binary unit, else the count with 'B'."""
    for unit, scale in _BINARY_UNITS:
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


_SIZE_SUFFIXES = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_byte_size(text: str) -> int:
    """'4096', '64K', '1M', '1GiB' (binary units, any case) -> bytes; the inverse of byte_size_label."""
    body = text.strip().upper().removesuffix("IB").removesuffix("B")
    digits, suffix = (body[:-1], body[-1]) if body[-1:] in ("K", "M", "G") else (body, "")
    if not digits.isdigit() or int(digits) == 0:
        raise ValueError(f"{text!r} is not a positive byte count; give an integer, optionally with K, M or G")
    return int(digits) * _SIZE_SUFFIXES[suffix]


SUITES = (
    # Host-to-device copies and copy/compute overlap (perf/test_transfer.py): bytes per copy.
    Suite(
        "transfer",
        axes=(
            Axis(
                "transfer_sizes",
                param="transfer_size",
                label=byte_size_label,
                values={"cpu": (2**20,), "pr": (2**26,), "full": (2**16, 2**20, 2**24, 2**26, 2**28, 2**30)},
                default=(2**20, 2**26, 2**30),
                option="transfer-sizes",
                help="comma-separated bytes per host-to-device copy, with K, M or G (binary), e.g. 1M,1G",
                read="sizes",
            ),
        ),
        cells={
            "pr": (
                "test_transfer.py::test_host_to_device[64MiB-pinned]",
                "test_transfer.py::test_copy_compute_overlap[*]",
            )
        },
    ),
)
