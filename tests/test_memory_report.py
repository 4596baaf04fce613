"""The end-of-run tables of the memory, CUDA graph and transfer suites, on synthetic results."""

import pytest

from perf.tables import memory as memory_report
from perf.tables.memory import graph_table, memory_table, overlap_table, table, transfer_table

GIB, MIB = 2**30, 2**20

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
GRAPHS = [
    {
        "suite": "cuda_graph",
        "variant": v,
        "launch": v,
        "mode": "inference_forward",
        "impl": "sdpa",
        "preset": "small",
        "precision": "bf16",
        "context": 512,
        "median_ms": ms,
        "gpu_ms": gpu_ms,
        "gpu_busy_share": gpu_ms / ms,
    }
    for v, ms, gpu_ms in (("eager", 6.0, 3.0), ("cuda_graph", 4.0, 3.2))
]
# End-to-end training steps under --launches: no suite, a launch each.
GRAPHED_STEPS = [
    {
        "launch": launch,
        "mode": "train_step",
        "impl": "naive",
        "preset": "large",
        "precision": "fp32",
        "context": 512,
        "warmup_steps": 2,
        "median_ms": ms,
    }
    for launch, ms in (("eager", 30.0), ("cuda_graph", 25.0))
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
ALL = [*OTHER_SUITES, *MEMORY, *GRAPHS, *TRANSFERS, *OVERLAP]


@pytest.mark.parametrize("make", [fn for _, fn in memory_report.TABLES] + [table])
def test_no_table_without_results_of_these_suites(make):
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


def test_graph_speedup_is_eager_over_graph_with_gpu_time_and_busy_share():
    header, row = graph_table(ALL)
    assert header.split()[:7] == ["mode", "impl", "preset", "prec", "ctx", "eager", "ms"]
    assert row.split() == [
        "inference_forward", "sdpa", "small", "bf16", "512", "6.000", "4.000", "1.50x", "3.000", "3.200",
        "50%/80%",
    ]  # fmt: skip


def test_graphed_end_to_end_steps_are_set_beside_their_eager_ones():
    _, row = graph_table(GRAPHED_STEPS + OTHER_SUITES)
    assert row.split()[:8] == ["train_step", "naive", "large", "fp32", "512", "30.000", "25.000", "1.20x"]
    assert row.split()[8:] == ["-", "-", "-/-"]  # no GPU time recorded


def test_graph_case_without_its_eager_result_shows_a_dash_and_eager_alone_shows_nothing():
    _, row = graph_table(GRAPHS[1:])
    assert row.split()[5:8] == ["-", "4.000", "-"]
    assert graph_table(GRAPHS[:1] + GRAPHED_STEPS[:1]) == []


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


def test_table_has_every_title_once_and_rows_indented():
    lines = table(iter(ALL))  # a generator is read once
    titles = [title for title, _ in memory_report.TABLES]
    assert [line for line in lines if not line.startswith("  ")] == titles
    assert len(lines) == len(titles) + 5 + 2 + 3 + 2
    assert len(memory_report.TITLE.splitlines()) == 1


def test_table_leaves_out_suites_without_results():
    lines = table([*OTHER_SUITES, *TRANSFERS])
    assert lines[0] == memory_report.TRANSFER_TITLE
    assert len(lines) == 1 + 3
