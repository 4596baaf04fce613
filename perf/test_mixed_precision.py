"""Mixed precision: what autocast does to each tensor, and what it buys a training step.

Parametrized by the tier (perf/tiers.py): step precision, and for the training step preset and
context length. The toy model's precisions share one group; the training step's precisions of one
preset and context share one, fp32 beside bf16 and fp16. The end of the run tabulates both
(perf/tables/precision.py).
"""

from __future__ import annotations

import torch

from model.loss import cross_entropy
from model.precision import autocast, parse_dtype
from model.toy import HIDDEN, ToyModel, autocast_dtypes
from perf.harness import Work
from perf.workloads.lm import lm_workload

# (B, T) positions with F features in and F classes out. The toy is there for its dtypes; its step
# is launch-bound on a GPU at any size that keeps the CPU run short (3 to 12 ms a step on two cores).
TOY_BATCH, TOY_SEQ, TOY_FEATURES = 8, 64, 256
WARMUP_STEPS = 2


def test_toy_autocast(bench, device: torch.device, step_precision: str):
    g = torch.Generator(device="cpu").manual_seed(0)
    model = ToyModel(TOY_FEATURES, TOY_FEATURES).to(device)
    x = torch.randn(TOY_BATCH, TOY_SEQ, TOY_FEATURES, generator=g).to(device)  # (B, T, F)
    targets = torch.randint(0, TOY_FEATURES, (TOY_BATCH, TOY_SEQ), generator=g).to(device)  # (B, T)
    dtypes = autocast_dtypes(model, x, step_precision, device)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        with autocast(step_precision, device.type):
            logits = model(x)  # (B, T, F)
            loss = cross_entropy(logits, targets)
        loss.backward()  # outside autocast, as autocast_dtypes runs it

    # Matmuls only: fc1 forward and weight gradient (x needs none), fc2 forward, input and weight
    # gradients; 2 flops per multiply-add.
    tokens = TOY_BATCH * TOY_SEQ
    flops = 2 * tokens * HIDDEN * TOY_FEATURES * (2 + 3)
    bench.benchmark.group = "toy autocast"
    bench.run(
        step,
        work=Work(flops=flops, tokens=tokens, precision=step_precision),
        warmup_steps=WARMUP_STEPS,
        suite="toy_autocast",
        precision=step_precision,
        dtypes={stage: str(dtype).removeprefix("torch.") for stage, dtype in dtypes.items()},
    )
    # Both linears run in the step's precision; the parameters stay fp32, and so do their gradients
    # and the loss (model.loss upcasts the logits).
    assert dtypes["fc1"] == dtypes["logits"] == parse_dtype(step_precision)
    assert (dtypes["params"], dtypes["grads"], dtypes["loss"]) == (torch.float32,) * 3


def test_train_step_precision(
    bench, tier, device: torch.device, preset: str, context: int, step_precision: str
):
    workload = lm_workload("train_step", "sdpa", preset, step_precision, context, device, tier.optimizer)
    bench.benchmark.group = f"train_step precision {preset} ctx{context}"
    bench.run(
        workload,
        warmup_steps=max(tier.warmups),
        suite="step_precision",
        **workload.fields,
    )
