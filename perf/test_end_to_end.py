"""End-to-end step time of the language model: forward, forward+backward, full training step.

Parametrized by the tier (conftest.py): model implementation, preset, precision, context length
and warm-up steps. `-k forward` selects forward benchmarks, `-k train_step` the training steps.
"""

from __future__ import annotations

from perf.workloads import lm_workload


def _run(bench, tier, device, mode, impl, preset, precision, context, warmup):
    workload = lm_workload(mode, impl, preset, precision, context, device, optimizer=tier.optimizer)
    # One table per shape, with the implementations side by side.
    bench.benchmark.group = f"{mode} {preset} {precision} ctx{context} warm{warmup}"
    bench.run(
        workload.step,
        work=workload.work,
        warmup_steps=warmup,
        preset=preset,
        impl=impl,
        context=context,
        batch=workload.config.batch_size,
        mode=mode,
        optimizer=tier.optimizer if mode == "train_step" else None,
    )


def test_forward(bench, tier, device, impl, preset, precision, context, warmup):
    _run(bench, tier, device, "forward", impl, preset, precision, context, warmup)


def test_forward_backward(bench, tier, device, impl, preset, precision, context, warmup):
    _run(bench, tier, device, "forward_backward", impl, preset, precision, context, warmup)


def test_train_step(bench, tier, device, impl, preset, precision, context, warmup):
    _run(bench, tier, device, "train_step", impl, preset, precision, context, warmup)
