"""The end-of-run collectives table, on synthetic results."""

from perf.tables.collectives import TITLE, table

MIB, GIB = 2**20, 2**30

OTHER_SUITES = [
    {"provider": "sdpa_flash", "mode": "forward", "median_ms": 1.0},  # an attention result
    {"suite": "transfer", "transfer_bytes": MIB, "median_ms": 2.0},
]


def allreduce_info(backend, world_size, size, median_ms, algbw):
    """An fp32 all-reduce result as stored before the other collectives: no collective or placement."""
    return {
        "suite": "allreduce",
        "backend": backend,
        "world_size": world_size,
        "size_bytes": size,
        "dtype": "float32",
        "median_ms": median_ms,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * 2 * (world_size - 1) / world_size,
    }


def collective_info(collective, dtype, placement, backend, world_size, size, median_ms, algbw, wrong=0):
    return {
        "suite": "collectives",
        "collective": collective,
        "dtype": dtype,
        "placement": placement,
        "backend": backend,
        "world_size": world_size,
        "size_bytes": size,
        "median_ms": median_ms,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * (world_size - 1) / world_size,
        "wrong_elements": wrong,
    }


# Out of order, as a run with -k or xdist may finish them.
RESULTS = [
    collective_info("all_to_all", "bfloat16", "out_of_place", "nccl", 8, GIB, 9.0, 119.3),
    allreduce_info("nccl", 8, GIB, 5.0, 214.7),
    {**allreduce_info("gloo", 2, MIB, 2.0, 0.5243), "collective": "all_reduce", "wrong_elements": 0},
    collective_info("all_gather", "float32", "out_of_place", "gloo", 2, MIB, 0.66, 1.587),
    collective_info("all_gather", "float32", "in_place", "gloo", 2, MIB, 0.68, 1.535, wrong=7),
    allreduce_info("gloo", 2, 100 * MIB, 90.0, 1.165),
    collective_info("all_gather", "bfloat16", "in_place", "gloo", 2, MIB, 0.67, 1.552),
    allreduce_info("nccl", 8, 8, 0.02, 0.0004),
]


def test_no_table_without_collective_results():
    assert table(OTHER_SUITES) == []
    assert table([]) == []


def test_rows_per_backend_and_world_size_by_collective_dtype_placement_and_size():
    lines = table(iter([*OTHER_SUITES, *RESULTS]))  # a generator is read once
    assert [line.split() for line in lines] == [
        ["collective", "dtype", "placement", "size", "ms", "algbw", "GB/s", "busbw", "GB/s", "#wrong"],
        ["gloo", "with", "2", "ranks"],
        ["all_reduce", "fp32", "in_place", "1MiB", "2.000", "0.5243", "0.5243", "0"],
        ["all_reduce", "fp32", "in_place", "100MiB", "90.000", "1.165", "1.165", "-"],
        ["all_gather", "fp32", "in_place", "1MiB", "0.680", "1.535", "0.7675", "7"],
        ["all_gather", "fp32", "out_of_place", "1MiB", "0.660", "1.587", "0.7935", "0"],
        ["all_gather", "bf16", "in_place", "1MiB", "0.670", "1.552", "0.776", "0"],
        ["nccl", "with", "8", "ranks"],
        ["all_reduce", "fp32", "in_place", "8B", "0.020", "0.0004", "0.0007", "-"],
        ["all_reduce", "fp32", "in_place", "1GiB", "5.000", "214.7", "375.7", "-"],
        ["all_to_all", "bf16", "out_of_place", "1GiB", "9.000", "119.3", "104.4", "0"],
    ]
    assert len(TITLE.splitlines()) == 1


def test_rows_line_up_under_the_header():
    header, _, row = table(RESULTS)[:3]
    assert len(row) == len(header)


def test_untimed_results_show_dashes():
    untimed = [{k: v for k, v in x.items() if k != "median_ms"} for x in RESULTS[5:6]]
    _, _, row = table(untimed)
    assert row.split() == ["all_reduce", "fp32", "in_place", "100MiB", "-", "1.165", "1.165", "-"]
