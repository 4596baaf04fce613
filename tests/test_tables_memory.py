"""The memory suite's end-of-run table (perf/tables/memory.py), on synthetic results."""

import pytest

from perf.tables.format import titled
from perf.tables.memory import TABLES, memory_table

GIB = 2**30

OTHER_SUITES = [
    {"provider": "sdpa_flash", "mode": "forward", "median_ms": 1.0},  # an attention result
    {"suite": "precision", "median_ms": 2.0},
]


def memory_info(mode, peak, resident, allocator="default", reserved=None, **state):
    info = {
        "suite": "memory",
        "preset": "small",
        "context": 512,
        "precision": "bf16",
        "mode": mode,
        "median_ms": 10.0,
        "peak_memory_bytes": peak,
        "resident_bytes": resident,
        "activation_peak_bytes": peak - resident,
        **state,
    }
    if allocator is not None:  # results stored before the allocator axis have none of these
        info.update(allocator=allocator, peak_reserved_bytes=reserved, fragmentation_bytes=reserved - peak)
    return info


TRAIN_STATE = {"params_bytes": GIB, "grads_bytes": GIB, "optimizer_state_bytes": 2 * GIB}
FORWARD_STATE = {"params_bytes": GIB, "grads_bytes": 0, "optimizer_state_bytes": 0}
# Listed out of order: the table puts forward first, and the default allocator before the other.
MEMORY = [
    memory_info("train_step", peak=6 * GIB, resident=4 * GIB, reserved=8 * GIB, **TRAIN_STATE),
    memory_info("forward", 3 * GIB, GIB, "expandable_segments", reserved=3.25 * GIB, **FORWARD_STATE),
    memory_info("forward", peak=3 * GIB, resident=GIB, reserved=4 * GIB, **FORWARD_STATE),
    memory_info("train_step", 6 * GIB, 4 * GIB, "expandable_segments", reserved=6.5 * GIB, **TRAIN_STATE),
]
ALL = [*OTHER_SUITES, *MEMORY]


@pytest.mark.parametrize("make", [fn for _, fn in TABLES] + [lambda infos: titled(TABLES, infos)])
def test_no_table_without_results_of_this_suite(make):
    assert make(OTHER_SUITES) == []
    assert make([]) == []


def test_memory_rows_forward_first_default_allocator_first_in_gib():
    header, *rows = memory_table(ALL)
    assert header.split() == [
        "preset", "ctx", "precision", "mode", "allocator", "peak", "reserved", "frag", "resident", "params",
        "grads", "optim", "activ",
    ]  # fmt: skip
    assert [row.split() for row in rows] == [
        ["small", "512", "bf16", "forward", "default", "3.00", "4.00", "1.00", "1.00", "1.00", "0.00", "0.00",
         "2.00"],
        ["small", "512", "bf16", "forward", "expandable_segments", "3.00", "3.25", "0.25", "1.00", "1.00",
         "0.00", "0.00", "2.00"],
        ["small", "512", "bf16", "train_step", "default", "6.00", "8.00", "2.00", "4.00", "1.00", "1.00",
         "2.00", "2.00"],
        ["small", "512", "bf16", "train_step", "expandable_segments", "6.00", "6.50", "0.50", "4.00", "1.00",
         "1.00", "2.00", "2.00"],
    ]  # fmt: skip


def test_memory_results_from_before_the_allocator_axis_show_dashes_and_come_first():
    older = memory_info("forward", peak=3 * GIB, resident=GIB, allocator=None, **FORWARD_STATE)
    _, first, second = memory_table([MEMORY[1], older])
    assert first.split() == [
        "small", "512", "bf16", "forward", "-", "3.00", "-", "-", "1.00", "1.00", "0.00", "0.00", "2.00",
    ]  # fmt: skip
    assert second.split()[4] == "expandable_segments"
