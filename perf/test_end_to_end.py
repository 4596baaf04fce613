"""End-to-end step time of the language model: forward, forward+backward, full training step.

Parametrized by the tier (perf/tiers.py): model implementation (flash_triton, the model with the
project's Triton kernel, runs on a CUDA GPU only and skips elsewhere), preset, precision, context
length, warm-up steps and launch (eager, or the whole step captured into a CUDA graph and replayed:
`--launches eager,cuda_graph`). `-k forward` selects forward benchmarks, `-k train_step` the
training steps, `-k cuda_graph` the graphed ones.
"""

from __future__ import annotations

import pytest
import torch

from perf.cases.memory import TRAINING_BYTES_PER_PARAMETER
from perf.workloads.capture import NotCapturable
from perf.workloads.lm import ImplUnavailable, lm_workload


def _run(bench, tier, device, mode, impl, preset, precision, context, warmup, launch):
    try:
        workload = lm_workload(
            mode, impl, preset, precision, context, device, optimizer=tier.optimizer, launch=launch
        )
    except NotCapturable as err:
        pytest.skip(f"{launch}: {err}")
    except ImplUnavailable as err:
        pytest.skip(str(err))
    # One table per shape, with the implementations and launches side by side.
    bench.benchmark.group = f"{mode} {preset} {precision} ctx{context} warm{warmup}"
    bench.run(
        workload,
        warmup_steps=warmup,
        **workload.fields,
        launch=launch,
    )


def test_forward(bench, tier, device, impl, preset, precision, context, warmup, launch):
    _run(bench, tier, device, "forward", impl, preset, precision, context, warmup, launch)


def test_forward_backward(bench, tier, device, impl, preset, precision, context, warmup, launch):
    _run(bench, tier, device, "forward_backward", impl, preset, precision, context, warmup, launch)


def test_train_step(bench, tier, device, impl, preset, precision, context, warmup, launch):
    _run(bench, tier, device, "train_step", impl, preset, precision, context, warmup, launch)


def test_train_step_vs_reference(bench, tier, device, compared_impl, preset, precision, context):
    """The project's model (with SDPA, or with the Triton kernel on a GPU) against the plain-PyTorch
    reference, steps interleaved round by round.

    Sequential medians of steps bound by host time (small presets in bf16) move between runs with the
    host (NOTES.md: Measurements behind comments in the code); interleaved, both see the same drift and
    the ratio holds.
    """
    try:
        workload = lm_workload(
            "train_step", compared_impl, preset, precision, context, device, tier.optimizer
        )
    except ImplUnavailable as err:
        pytest.skip(str(err))
    needed = 2 * TRAINING_BYTES_PER_PARAMETER * workload.config.num_parameters()
    if device.type == "cuda" and needed > 0.9 * torch.cuda.get_device_properties(device).total_memory:
        pytest.skip(
            f"two {preset} models with AdamW states need {needed / 2**30:.0f} GiB before activations; "
            f"compare the sequential test_train_step results instead"
        )
    reference = lm_workload("train_step", "reference", preset, precision, context, device, tier.optimizer)
    bench.benchmark.group = f"vs reference: train_step {preset} {precision} ctx{context}"
    bench.run_interleaved(workload, reference.step, warmup_steps=max(tier.warmups), **workload.fields)
