"""The tables of benchmarks by name (perf/tables/derived.py, format.named_table): names whole and unique at
any length, lines within the width where the names allow, and figures with no meaning on a CPU left out."""

from __future__ import annotations

import pytest

from perf.tables.derived import derived_table, interleaved_table
from perf.tables.format import WIDTH, Column, display_names, named_table

# Two attention benchmarks of the CPU tier: alike in their first 64 characters and more.
NAIVE = "test_attention[fp32-forward_backward-b1-h16-s128-d32-causal-naive]"
COMPILED = "test_attention[fp32-forward_backward-b1-h16-s128-d32-causal-naive_compiled]"
CPU = {"device": "cpu", "median_ms": 7.986, "tokens_per_s": 16027.0, "tflops": 0.0021, "mfu": None}
GPU = {
    "device": "cuda:0",
    "median_ms": 1.25,
    "gpu_ms": 1.2,
    "gpu_busy_share": 0.96,
    "tokens_per_s": 3.2e6,
    "tflops": 0.0412,
    "mfu": 0.2,
    "peak_memory_bytes": 3 * 2**30,
    "host_ms": 0.4,
}


def test_names_alike_in_their_first_64_characters_stay_two():
    assert NAIVE[:64] == COMPILED[:64]
    for width in (WIDTH, 80):
        lines = derived_table([(NAIVE, CPU), (COMPILED, CPU)], width)
        assert sum(NAIVE.removeprefix("test_") in line.split() for line in lines) == 1
        assert sum(COMPILED.removeprefix("test_") in line.split() for line in lines) == 1


@pytest.mark.parametrize("info", [CPU, GPU], ids=["cpu", "gpu"])
def test_a_name_too_long_for_its_row_goes_on_a_line_of_its_own(info):
    long = "test_attention[" + "x" * 100 + "]"
    short = "test_forward[sdpa-tiny-fp32-ctx128-warm1]"
    header, *rows = derived_table([(short, info), (long, info)])
    assert all(len(line) <= WIDTH for line in [header, *rows] if line != long.removeprefix("test_"))
    assert rows[0].startswith("forward[sdpa-tiny-fp32-ctx128-warm1] ")
    assert rows[1] == long.removeprefix("test_")
    assert (
        rows[2].startswith(" " * header.index("benchmark") + " ") and rows[2].split() == rows[0].split()[1:]
    )


def test_every_cell_lines_up_under_its_header():
    header, *rows = derived_table([(NAIVE, GPU), ("test_x", GPU)])  # NAIVE on a line of its own
    assert rows[0] == NAIVE.removeprefix("test_")
    assert {len(row) for row in rows[1:]} == {len(header)} and len(header) <= WIDTH


def test_cpu_rows_leave_out_the_gpu_figures_and_show_no_throughput_against_no_peak():
    header, row = derived_table([("test_forward[sdpa-tiny]", CPU)])
    assert header.split() == ["benchmark", "ms", "tokens/s"]
    assert row.split() == ["forward[sdpa-tiny]", "7.986", "16027"]
    assert "0.0" not in row.split()


def test_gpu_rows_show_every_figure_and_small_throughputs_in_significant_digits():
    header, row = derived_table([("test_x", GPU)])
    assert header.split()[1:] == [
        "ms",
        "GPU",
        "ms",
        "busy",
        "tokens/s",
        "TFLOP/s",
        "MFU",
        "peak",
        "GiB",
        "host",
        "ms",
    ]
    assert row.split()[1:] == ["1.250", "1.200", "96%", "3200000", "0.0412", "20.0%", "3.00", "0.4"]
    # A column some row has a figure in stays, '-' in the rows without one.
    *_, cpu = derived_table([("test_x", GPU), ("test_y", CPU)])
    assert cpu.split()[1:] == ["7.986", "-", "-", "16027", "-", "-", "-", "-"]


def test_the_test_prefix_goes_unless_two_names_would_then_read_alike():
    assert display_names(["test_a[1]", "test_b"]) == ["a[1]", "b"]
    assert display_names(["test_a", "a"]) == ["test_a", "a"]


def test_named_table_keeps_the_header_name_room_for_short_names():
    lines = named_table([("a", ["1"])], [Column("ms", 4)])
    assert lines == ["benchmark   ms", "a            1"]


def test_interleaved_rows_are_the_results_with_a_ratio():
    timed = {**CPU, "baseline_median_ms": 6.0, "ratio_to_baseline": 7.986 / 6.0}
    header, row = interleaved_table([(NAIVE, timed), (COMPILED, CPU)])
    assert header.split() == ["benchmark", "ms", "ref", "ms", "ratio"]
    assert row.split() == [NAIVE.removeprefix("test_"), "7.986", "6.000", "1.331"]
    assert interleaved_table([(COMPILED, CPU)]) == []


def test_a_bandwidth_result_shows_its_gb_per_s_on_the_cpu_and_the_gpu():
    for info in (CPU, GPU):
        header, moves, computes = derived_table([("test_copy", {**info, "gb_per_s": 12.5}), ("test_x", info)])
        end = header.index("GB/s") + len("GB/s")  # figures right-aligned under their title
        assert moves[end - 8 : end].strip() == "12.5" and computes[end - 8 : end].strip() == "-"
