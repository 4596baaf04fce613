"""Peak GPU memory of the training forward and of the training step, what takes it, and what the CUDA
caching allocator reserves for it under each allocator setting.

Parametrized by the tier (perf/tiers.py): preset (by default the largest whose training state fits
the GPU), context length and precision; the mode and the allocator here (--allocators selects the
allocators). The allocator reads its setting once per process, so every case runs in a fresh process
with exactly its setting (perf/workloads/memory.py), and its rounds are recorded here. The peak is
torch.cuda.max_memory_allocated over the timed rounds after a reset; this module splits it into the
state that stays between steps and what one step adds on top of it.
"""

from __future__ import annotations

import pytest
import torch

from perf.cases.memory import ALLOCATORS
from perf.workloads.memory import MemoryCase, measure_in_fresh_process, memory_figures, setting_problem

MEMORY_MODES = ("forward", "train_step")
# Bytes per parameter: the weights stay fp32 under autocast (it casts per op), gradients take the
# weights' dtype, and AdamW keeps two fp32 moments. Together perf.cases.memory.TRAINING_BYTES_PER_PARAMETER.
WEIGHT_BYTES, GRADIENT_BYTES, ADAMW_STATE_BYTES = 4, 4, 8


# The allocator last in the ids (test_peak_memory[...-train_step-default]); --allocators deselects.
@pytest.mark.parametrize("allocator", ALLOCATORS)
@pytest.mark.parametrize("memory_mode", MEMORY_MODES)
def test_peak_memory(
    bench,
    tier,
    device: torch.device,
    memory_preset: str,
    memory_context: int,
    precision: str,
    memory_mode: str,
    allocator: str,
):
    """Peak memory of a step, with parameters, gradients, optimizer states and activations apart.

    "forward" is the training forward: autograd on, the activations that a backward would need kept
    until the loss is dropped at the end of the step. "train_step" adds the backward and AdamW.
    resident_bytes is what is allocated between steps (weights, and for a training step gradients
    and AdamW's moments); activation_peak_bytes is the peak less that: activations, autocast's
    low-precision weight copies, logits and temporaries. peak_reserved_bytes is what the allocator
    held from the GPU at most, fragmentation_bytes its excess over the peak allocated.
    """
    if device.type != "cuda":
        pytest.skip(
            f"needs a CUDA device: peak memory comes from the CUDA caching allocator's statistics; "
            f"running on {device}"
        )
    preset, context, mode = memory_preset, memory_context, memory_mode
    training = mode == "train_step"
    bench.benchmark.group = f"memory {preset} {precision} ctx{context}"
    run = measure_in_fresh_process(
        allocator,
        MemoryCase(mode, preset, precision, context, tier.optimizer),
        device=device,
        policy=None if bench.benchmark.disabled else bench.policy,
        snapshot=None if bench.snapshot_dir is None else (bench.snapshot_dir, bench.benchmark.name),
    )
    problem = setting_problem(allocator, run)
    if problem is not None:
        pytest.skip(problem)
    state = {
        "params_bytes": WEIGHT_BYTES * run.parameters,
        "grads_bytes": GRADIENT_BYTES * run.parameters if training else 0,
        "optimizer_state_bytes": ADAMW_STATE_BYTES * run.parameters if training else 0,
    }
    resident = run.figures.resident_bytes
    # Counted from the parameters, so the allocator must hold at least that much between steps.
    assert resident >= sum(state.values()), f"{resident} bytes allocated between steps, below {state}"
    info = bench.record_rounds(
        run.durations_s,
        work=run.work,
        gpu=run.gpu,
        iterations=run.iterations,
        suite="memory",
        preset=preset,
        precision=precision,
        context=context,
        batch=run.batch_size,
        mode=mode,
        optimizer=tier.optimizer if training else None,
        allocator=allocator,
        **memory_figures(run),
        **state,
    )
    assert info["activation_peak_bytes"] > 0, "a step allocates its activations on top of the resident state"
