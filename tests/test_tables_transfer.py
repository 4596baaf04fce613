"""The transfer suite's end-of-run tables (declared in perf/cases/transfer.py, and perf/tables/transfer.py),
on synthetic results."""

import functools

import pytest

from perf.cases.transfer import SUITES
from perf.tables import transfer
from perf.tables.declared import render
from perf.tables.format import titled
from perf.tables.transfer import OVERLAP_TITLE, overlap_table

(COPIES,) = SUITES[0].tables_of()
TRANSFER_TITLE = COPIES.title
transfer_table = functools.partial(render, COPIES)
TABLES = [(TRANSFER_TITLE, transfer_table), *transfer.TABLES]

GIB, MIB = 2**30, 2**20

OTHER_SUITES = [
    {"provider": "sdpa_flash", "mode": "forward", "median_ms": 1.0},  # an attention result
    {"suite": "precision", "median_ms": 2.0},
]


TRANSFERS = [
    {"suite": "transfer", "host_memory": memory, "transfer_bytes": size, "median_ms": 1.0, "gb_per_s": rate}
    for memory, size, rate in (
        ("pinned", GIB, 50.0),
        ("pageable", GIB, 12.5),
        ("pinned", MIB, 20.0),
        ("pageable", MIB, 8.0),
    )
]
OVERLAP = [
    {
        "suite": "overlap",
        "schedule": schedule,
        "copy_bytes": 256 * MIB,
        "matmul_n": 4096,
        "matmuls": 30,
        "median_ms": ms,
        "copy_ms": 5.0,
        "compute_ms": 4.0,
    }
    for schedule, ms in (("serial", 9.0), ("overlapped", 6.0))
]
ALL = [*OTHER_SUITES, *TRANSFERS, *OVERLAP]


@pytest.mark.parametrize("make", [fn for _, fn in TABLES] + [lambda infos: titled(TABLES, infos)])
def test_no_table_without_results_of_this_suite(make):
    assert make(OTHER_SUITES) == []
    assert make([]) == []


def test_transfers_per_size_ascending_with_pinned_over_pageable():
    header, small, large = transfer_table(ALL)
    assert header.split()[:5] == ["size", "pinned", "GB/s", "pageable", "GB/s"]
    assert small.split() == ["1MiB", "20.00", "8.00", "2.50x"]
    assert large.split() == ["1GiB", "50.00", "12.50", "4.00x"]


def test_overlap_saved_share_and_its_bound():
    _, row = overlap_table(ALL)
    # saved: 1 - 6 / 9; at best the longer of 5 and 4 ms instead of 9 ms: 1 - 5 / 9.
    assert row.split() == ["256MiB", "30", "x", "n4096", "9.000", "6.000", "5.000", "4.000", "33%", "44%"]


def test_untimed_results_show_dashes():
    untimed = [{k: v for k, v in x.items() if k not in ("median_ms", "gb_per_s")} for x in OVERLAP]
    _, row = overlap_table(untimed)
    assert row.split()[4:6] == ["-", "-"] and row.split()[-2:] == ["-", "44%"]


def test_tables_under_their_titles_rows_indented_and_empty_ones_left_out():
    lines = titled(TABLES, iter(ALL))  # a generator is read once
    assert [line for line in lines if not line.startswith("  ")] == [TRANSFER_TITLE, OVERLAP_TITLE]
    assert len(lines) == 2 + 3 + 2
    assert titled(TABLES, [*OTHER_SUITES, *TRANSFERS]) == [
        TRANSFER_TITLE,
        *("  " + r for r in transfer_table(TRANSFERS)),
    ]
