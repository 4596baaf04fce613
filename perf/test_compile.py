"""What torch.compile gains for the model: eager against compiled, forward and full training step.

Parametrized by the tier (perf/tiers.py): the compile suite's presets, precisions, attention
implementations and context lengths; here: the step and the variant, so that eager and compiled of
one case run one after the other and share a pytest-benchmark group with the other attention
implementation's. The compiled variant compiles in its first call, timed apart as compile_s; the
timed rounds run what that call compiled. The end of the run sets the two variants side by side,
and the attention implementations too (perf/tables/compiled.py).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from perf.tables.compiled import SUITE, VARIANTS
from perf.workloads.compiling import compiled, graph_cache_lookups
from perf.workloads.lm import ImplUnavailable, check_runnable, lm_workload

COMPILE_MODES = ("forward", "train_step")
# Untimed calls after the first one, as in the end-to-end benchmarks.
WARMUP_STEPS = 2


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("compile_mode", COMPILE_MODES)
def test_compile_gain(
    bench,
    tier,
    device: torch.device,
    compile_preset: str,
    compile_precision: str,
    compile_attention: str,
    compile_context: int,
    compile_mode: str,
    variant: str,
):
    """The model with `compile_attention` as its attention in both variants. Attention is one fused
    kernel either way (SDPA's, or the Triton kernel's registered operators, an opaque node in the
    compiled graph): the gain measured is the compile of everything around it (norms, RoPE, SwiGLU,
    residuals, the loss); attention alone is the attention suite's."""
    preset, precision, attention = compile_preset, compile_precision, compile_attention
    mode, context = compile_mode, compile_context
    try:
        check_runnable(attention, device)
    except ImplUnavailable as err:
        pytest.skip(str(err))
    bench.benchmark.group = f"compile {mode} {preset} {precision} ctx{context}"
    with contextlib.ExitStack() as compile_state:

        def compile_model(model: nn.Module) -> nn.Module:
            return compile_state.enter_context(compiled(model))

        workload = lm_workload(
            mode,
            attention,
            preset,
            precision,
            context,
            device,
            tier.optimizer,
            compile_model=compile_model if variant == "compiled" else None,
        )
        # The compiled variant compiles here (forward and, for the training step, backward); the
        # eager one's first call pays only for lazy initialization (cuBLAS handles, the allocator)
        # and, for flash_triton, the Triton kernels' JIT and autotuning.
        with graph_cache_lookups() as lookups:
            compile_s = bench.first_call(workload.step)
        # A recompile from here on would be timed as a step: make it an error instead.
        with torch._dynamo.config.patch(error_on_recompile=True):
            bench.run(
                workload,
                warmup_steps=WARMUP_STEPS,
                suite=SUITE,
                variant=variant,
                **workload.fields,
                compile_s=compile_s,
                graph_cache_hits=lookups["hits"],
                graph_cache_misses=lookups["misses"],
            )
