"""The inference forward launched eagerly against the replay of its captured CUDA graph.

Parametrized by the tier (conftest.py): preset, context length and precision; the variant here.
Both variants of one case share a pytest-benchmark group; the end of the run sets them side by
side with the graph's speedup (perf/memory_report.py).
"""

from __future__ import annotations

import pytest
import torch

from perf.graph_workloads import GRAPH_VARIANTS, forward_workload

# Untimed calls after building (and for the graph, capturing) the forward.
WARMUP_STEPS = 2


@pytest.mark.parametrize("variant", GRAPH_VARIANTS)
def test_forward_cuda_graph(
    bench, device: torch.device, graph_preset: str, context: int, precision: str, variant: str
):
    if device.type != "cuda":
        pytest.skip(f"needs a CUDA device: CUDA graphs capture and replay CUDA kernels; running on {device}")
    workload = forward_workload(variant, graph_preset, precision, context, device)
    bench.benchmark.group = f"cuda graph forward {graph_preset} {precision} ctx{context}"
    bench.run(
        workload.step,
        work=workload.work,
        warmup_steps=WARMUP_STEPS,
        suite="cuda_graph",
        variant=variant,
        preset=graph_preset,
        precision=precision,
        context=context,
        batch=workload.config.batch_size,
    )
