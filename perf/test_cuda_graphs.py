"""What CUDA graphs buy: the inference forward and the training step launched eagerly against the
replay of their captured graph.

Parametrized by the tier (perf/tiers.py): preset, context length and precision; the variant here.
Both variants of one case share a pytest-benchmark group; the end of the run sets them side by
side with the graph's speedup, GPU time and busy share (perf/tables/memory.py). The training step
is the end-to-end one (perf/workloads/lm.py): `--launches eager,cuda_graph` graphs every end-to-end
benchmark the same way.
"""

from __future__ import annotations

import pytest
import torch

from perf.workloads.capture import NotCapturable
from perf.workloads.graphs import GRAPH_VARIANTS, forward_workload
from perf.workloads.lm import lm_workload

# Untimed calls after building (and for the graph, capturing) the forward.
WARMUP_STEPS = 2


def _needs_cuda(device: torch.device) -> None:
    if device.type != "cuda":
        pytest.skip(f"needs a CUDA device: CUDA graphs capture and replay CUDA kernels; running on {device}")


def _measure(bench, workload, mode: str, variant: str, preset: str, precision: str, context: int, **extra):
    """Time one variant; both variants of a case share a group, and the end-of-run table pairs them."""
    bench.benchmark.group = f"cuda graph {mode} {preset} {precision} ctx{context}"
    bench.run(
        workload,
        warmup_steps=WARMUP_STEPS,
        suite="cuda_graph",
        variant=variant,
        launch=variant,
        mode=mode,
        impl="sdpa",
        preset=preset,
        precision=precision,
        context=context,
        batch=workload.config.batch_size,
        **extra,
    )


@pytest.mark.parametrize("variant", GRAPH_VARIANTS)
def test_forward_cuda_graph(
    bench, device: torch.device, graph_preset: str, context: int, precision: str, variant: str
):
    _needs_cuda(device)
    workload = forward_workload(variant, graph_preset, precision, context, device)
    _measure(bench, workload, "inference_forward", variant, graph_preset, precision, context)


@pytest.mark.parametrize("variant", GRAPH_VARIANTS)
def test_train_step_cuda_graph(
    bench, tier, device: torch.device, graph_preset: str, context: int, precision: str, variant: str
):
    """Forward, backward and AdamW as one captured graph, against the same step launched op by op."""
    _needs_cuda(device)
    try:
        workload = lm_workload(
            "train_step", "sdpa", graph_preset, precision, context, device, tier.optimizer, launch=variant
        )
    except NotCapturable as err:
        pytest.skip(f"{variant}: {err}")
    optimizer = tier.optimizer
    _measure(bench, workload, "train_step", variant, graph_preset, precision, context, optimizer=optimizer)
