"""perf.tools.nccl_tests: nccl-tests' logs read, and their bus bandwidth set beside the suite's."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf.tools import nccl_tests
from perf.tools.reading.errors import GateError
from perf.tools.reading.nccl_logs import parse_log
from tests.gate_files import stats, write_results

# The shape of nccl-tests' output (its header, two ranks, rows of both placements), with made-up figures.
LOG = """\
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 1048576 maxBytes 1073741824 step: 1024(factor) warmup iters: 5 iters: 20
#
# Using devices
#  Rank  0 Group  0 Pid  11 on host device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  11 on host device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
#
#                                                  out-of-place                    in-place
#      size       count      type  redop  root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#       (B)  (elements)                            (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
    1048576      524288  bfloat16    sum    -1    20.00   52.43   52.43      0    19.00   55.19   55.19     0
  1073741824   536870912  bfloat16    sum    -1  3000.00  357.91  357.91      0  2990.00  359.11  359.11   N/A
# Out of bounds values : 0 OK
"""


def _log(tmp_path: Path, text: str = LOG, name: str = "all_reduce_bf16.log") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _results(tmp_path: Path, busbw: dict[tuple[str, int], float], world: int = 2) -> Path:
    """A suite result file of bf16 NCCL all-reduces: busbw by (placement, size)."""
    names, extra = {}, {}
    for (placement, size), gbps in busbw.items():
        name = (
            f"perf/test_collectives.py::test_collective[all_reduce-bf16-{placement}-nccl-world{world}-{size}]"
        )
        names[name] = stats(size / gbps / 1e9)
        extra[name] = dict(
            backend="nccl", collective="all_reduce", dtype="bfloat16", placement=placement,
            world_size=world, size_bytes=size, busbw_gbps=gbps, wrong_elements=0,
        )  # fmt: skip
    return write_results(tmp_path / "results.json", names, extra=extra, gpus=world)


def test_a_log_gives_both_placements_of_each_size_with_its_world_size(tmp_path):
    rows = parse_log(_log(tmp_path))
    assert [(r.placement, r.size_bytes, r.busbw_gbps, r.wrong) for r in rows] == [
        ("out_of_place", 2**20, 52.43, 0),
        ("in_place", 2**20, 55.19, 0),
        ("out_of_place", 2**30, 357.91, 0),
        ("in_place", 2**30, 359.11, None),
    ]
    assert {(r.collective, r.dtype, r.world_size) for r in rows} == {("all_reduce", "bfloat16", 2)}


def test_the_suite_beside_nccl_tests_at_the_sizes_both_measured(tmp_path, capsys):
    results = _results(tmp_path, {("out_of_place", 2**20): 40.0, ("out_of_place", 2**30): 322.12})
    assert nccl_tests.main(["--results", str(results), str(_log(tmp_path))]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [row.split() for row in lines[1:]]
    assert rows == [
        ["all_reduce", "bfloat16", "out_of_place", "2", "1048576", "40.00", "52.43", "0.76", "0/0"],
        ["all_reduce", "bfloat16", "out_of_place", "2", "1073741824", "322.12", "357.91", "0.90", "0/0"],
        ["all_reduce", "bfloat16", "out_of_place", "2", "peak", "322.12", "357.91", "0.90"],
    ]


def test_the_collective_comes_from_the_file_name_where_the_log_does_not_say(tmp_path):
    text = LOG.replace("# Collective test starting: all_reduce_perf\n", "")
    rows = parse_log(_log(tmp_path, text, name="alltoall_bf16.log"))
    assert {r.collective for r in rows} == {"all_to_all"}
    with pytest.raises(GateError, match="which collective it measured is not said"):
        parse_log(_log(tmp_path, text, name="mystery.log"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (LOG.replace("#  Rank", "#  Host"), "no '#  Rank N ...' lines"),
        ("# Collective test starting: all_reduce_perf\n#  Rank  0 Group  0\n", "no rows of sizes"),
        (LOG.replace("357.91      0", "357.91    abc"), "cannot read the row"),
    ],
)
def test_a_log_that_is_not_nccl_tests_output_is_refused_saying_why(tmp_path, text, message):
    with pytest.raises(GateError, match=message):
        parse_log(_log(tmp_path, text))


def test_nothing_in_common_is_refused_naming_both_sides(tmp_path, capsys):
    results = _results(tmp_path, {("out_of_place", 2**20): 40.0}, world=4)
    assert nccl_tests.main(["--results", str(results), str(_log(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert "no size measured by both" in err and "'out_of_place', 4)" in err and "'out_of_place', 2)" in err
    missing = tmp_path / "absent.log"
    assert nccl_tests.main(["--results", str(results), str(missing)]) == 2
    assert "absent.log: cannot be read" in capsys.readouterr().err
