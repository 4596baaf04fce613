"""Peak GPU memory of the training forward and of the training step, and what takes it.

Parametrized by the tier (perf/tiers.py): preset (by default the largest whose training state fits
the GPU), context length and precision; the mode here. The harness records the peak over the timed
rounds (torch.cuda.max_memory_allocated after a reset); this module splits it into the state that
stays between steps and what one step adds on top of it.
"""

from __future__ import annotations

import pytest
import torch

from perf.harness import synchronize
from perf.workloads.lm import lm_workload

MEMORY_MODES = ("forward", "train_step")
# Untimed steps inside the harness, after the one that sets up the resident state.
WARMUP_STEPS = 1
# Bytes per parameter: the weights stay fp32 under autocast (it casts per op), gradients take the
# weights' dtype, and AdamW keeps two fp32 moments. Together perf.tiers.TRAINING_BYTES_PER_PARAMETER.
WEIGHT_BYTES, GRADIENT_BYTES, ADAMW_STATE_BYTES = 4, 4, 8


@pytest.mark.parametrize("memory_mode", MEMORY_MODES)
def test_peak_memory(
    bench,
    tier,
    device: torch.device,
    memory_preset: str,
    memory_context: int,
    precision: str,
    memory_mode: str,
):
    """Peak memory of a step, with parameters, gradients, optimizer states and activations apart.

    "forward" is the training forward: autograd on, the activations that a backward would need kept
    until the loss is dropped at the end of the step. "train_step" adds the backward and AdamW.
    resident_bytes is what is allocated between steps (weights, and for a training step gradients
    and AdamW's moments); activation_peak_bytes is the peak less that: activations, autocast's
    low-precision weight copies, logits and temporaries.
    """
    if device.type != "cuda":
        pytest.skip(
            f"needs a CUDA device: peak memory comes from the CUDA caching allocator's statistics; "
            f"running on {device}"
        )
    preset, context, mode = memory_preset, memory_context, memory_mode
    workload = lm_workload(mode, "sdpa", preset, precision, context, device, optimizer=tier.optimizer)
    # The first step creates the state that stays: gradients and, lazily, AdamW's moments.
    workload.step()
    synchronize(device)
    resident = torch.cuda.memory_allocated(device)
    parameters = workload.config.num_parameters()
    training = mode == "train_step"
    state = {
        "params_bytes": WEIGHT_BYTES * parameters,
        "grads_bytes": GRADIENT_BYTES * parameters if training else 0,
        "optimizer_state_bytes": ADAMW_STATE_BYTES * parameters if training else 0,
    }
    # Counted from the parameters, so the allocator must hold at least that much between steps.
    assert resident >= sum(state.values()), f"{resident} bytes allocated between steps, below {state}"
    bench.benchmark.group = f"memory {preset} {precision} ctx{context}"
    info = bench.run(
        workload.step,
        work=workload.work,
        warmup_steps=WARMUP_STEPS,
        suite="memory",
        preset=preset,
        precision=precision,
        context=context,
        batch=workload.config.batch_size,
        mode=mode,
        optimizer=tier.optimizer if training else None,
        resident_bytes=resident,
        **state,
    )
    info["activation_peak_bytes"] = info["peak_memory_bytes"] - resident
    assert info["activation_peak_bytes"] > 0, "a step allocates its activations on top of the resident state"
