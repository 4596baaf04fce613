"""The CUDA graph suite's end-of-run table (perf/tables/cuda_graphs.py), on synthetic results."""

import pytest

from perf.tables.cuda_graphs import TABLES, graph_table
from perf.tables.format import titled

OTHER_SUITES = [
    {"provider": "sdpa_flash", "mode": "forward", "median_ms": 1.0},  # an attention result
    {"suite": "precision", "median_ms": 2.0},
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
ALL = [*OTHER_SUITES, *GRAPHS]


@pytest.mark.parametrize("make", [fn for _, fn in TABLES] + [lambda infos: titled(TABLES, infos)])
def test_no_table_without_results_of_this_suite(make):
    assert make(OTHER_SUITES) == []
    assert make([]) == []


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
