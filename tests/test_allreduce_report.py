"""The end-of-run all-reduce table, on synthetic results."""

from perf.allreduce_report import TITLE, table

MIB, GIB = 2**20, 2**30

OTHER_SUITES = [
    {"provider": "sdpa_flash", "mode": "forward", "median_ms": 1.0},  # an attention result
    {"suite": "transfer", "transfer_bytes": MIB, "median_ms": 2.0},
]


def allreduce_info(backend, world_size, size, median_ms, algbw):
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


# Out of order, as a run with -k or xdist may finish them.
RESULTS = [
    allreduce_info("nccl", 8, GIB, 5.0, 214.7),
    allreduce_info("gloo", 4, 100 * MIB, 220.0, 0.4766),
    allreduce_info("gloo", 2, 100 * MIB, 90.0, 1.165),
    allreduce_info("gloo", 2, MIB, 2.0, 0.5243),
    allreduce_info("nccl", 8, 8, 0.02, 0.0004),
]


def test_no_table_without_allreduce_results():
    assert table(OTHER_SUITES) == []
    assert table([]) == []


def test_rows_per_backend_and_world_size_by_ascending_size():
    lines = table(iter([*OTHER_SUITES, *RESULTS]))  # a generator is read once
    assert [line.split() for line in lines] == [
        ["size", "ms", "algbw", "GB/s", "busbw", "GB/s"],
        ["gloo", "with", "2", "ranks"],
        ["1MiB", "2.000", "0.5243", "0.5243"],
        ["100MiB", "90.000", "1.165", "1.165"],
        ["gloo", "with", "4", "ranks"],
        ["100MiB", "220.000", "0.4766", "0.7149"],
        ["nccl", "with", "8", "ranks"],
        ["8B", "0.020", "0.0004", "0.0007"],
        ["1GiB", "5.000", "214.7", "375.7"],
    ]
    assert len(TITLE.splitlines()) == 1


def test_rows_line_up_under_the_header():
    header, _, row = table(RESULTS)[:3]
    assert len(row) == len(header)


def test_untimed_results_show_dashes():
    untimed = [{k: v for k, v in x.items() if k != "median_ms"} for x in RESULTS[2:3]]
    _, _, row = table(untimed)
    assert row.split() == ["100MiB", "-", "1.165", "1.165"]
