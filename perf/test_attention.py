"""Attention alone: every provider on the tier's shapes, forward, backward and forward+backward.

Parametrized by the tier (perf/tiers.py): precision, mode, shape (perf/cases/attention.py) and
provider (perf/workloads/attention.py). The providers of one shape, precision and mode share a
pytest-benchmark group; the end of the run sets them against sdpa_flash (perf/tables/attention.py).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from model.precision import parse_dtype
from perf.cases.attention import AttentionShape
from perf.harness import oom_note
from perf.workloads.attention import (
    MATERIALIZING_PROVIDERS,
    WARMUP_STEPS,
    ProviderUnavailable,
    attention_workload,
    open_provider,
    score_matrix_note,
)


def test_attention(
    bench,
    device: torch.device,
    precision: str,
    attention_mode: str,
    attention_shape: AttentionShape,
    attention_provider: str,
):
    shape, mode, provider = attention_shape, attention_mode, attention_provider
    dtype = parse_dtype(precision)
    bench.benchmark.group = f"attention {mode} {shape} {precision}"
    materializing = provider in MATERIALIZING_PROVIDERS
    note = oom_note(score_matrix_note(provider, shape, dtype)) if materializing else contextlib.nullcontext()
    with note, contextlib.ExitStack() as provider_state:
        try:
            opened = open_provider(provider, shape, dtype, device, needs_grad=mode != "forward")
            attention = provider_state.enter_context(opened)
        except ProviderUnavailable as err:
            pytest.skip(f"{provider}: {err}")
        workload = attention_workload(attention, mode, shape, precision, device)
        # The first call compiles where a provider compiles; backward's first call includes the forward.
        first_call_s = bench.first_call(workload.step, setup=workload.setup)
        bench.run(
            workload,
            warmup_steps=WARMUP_STEPS,
            provider=provider,
            mode=mode,
            **shape.as_extra_info(dtype),
            compile_s=first_call_s,
            **_kernel_configs(provider, mode),
        )


def _kernel_configs(provider: str, mode: str) -> dict[str, object]:
    """The tile configurations the Triton kernels ran with, so that a change of them shows in results."""
    if provider != "flash_triton":
        return {}
    from kernels.flash_attention_triton import chosen_configs

    ran = ("forward",) if mode == "forward" else ("forward", "backward")
    configs = chosen_configs()
    return {"triton_configs": {kernel: configs[kernel] for kernel in ran}}
