"""The tier's axes as benchmark parameters: a benchmark names an axis as an argument and is run once
per value of the tier, with ids that its stored baselines are keyed by.

Ids are part of what a baseline compares by (the node id), so an axis added later leaves the value
every case had before it out of the id (UNNAMED), and byte counts read as 1MiB, not 1048576.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from perf.cases.transfer import byte_size_label
from perf.tiers import Tier

PERF = Path(__file__).resolve().parents[1]  # the benchmarks' folder; tests/ parametrize themselves

# Benchmark argument name -> (tier attribute, id prefix): the axes pytest_generate_tests fills.
AXES = {
    "impl": ("impls", ""),
    "compared_impl": ("compared_impls", ""),
    "preset": ("presets", ""),
    "precision": ("precisions", ""),
    "context": ("contexts", "ctx"),
    "warmup": ("warmups", "warm"),
    "launch": ("launches", ""),
    # Providers last: the providers of one shape run one after another, side by side in one table.
    "attention_mode": ("attention_modes", ""),
    "attention_shape": ("attention_shapes", ""),
    "attention_provider": ("attention_providers", ""),
    # Measurement suites, each on axes of its own (perf/tiers.py says which values per tier).
    "scaling_precision": ("scaling_precisions", ""),
    "scaling_shape": ("scaling_shapes", ""),
    # Before the presets: the compile suite's ids begin with the context, as its baselines' names do.
    "compile_context": ("compile_contexts", "ctx"),
    "compile_preset": ("compile_presets", ""),
    "compile_precision": ("compile_precisions", ""),
    "compile_attention": ("compile_attentions", ""),
    "step_precision": ("step_precisions", ""),
    "matmul_size": ("matmul_sizes", "n"),
    "memory_preset": ("memory_presets", ""),
    "memory_context": ("memory_contexts", "ctx"),
    "graph_preset": ("graph_presets", ""),
    "transfer_size": ("transfer_sizes", ""),
    "allreduce_dtype": ("allreduce_dtypes", ""),
    "collective_case": ("collective_cases", ""),
    "allreduce_backend": ("allreduce_backends", ""),
    "world_size": ("world_sizes", "world"),
    "allreduce_size": ("allreduce_sizes", ""),
    "dp_preset": ("dp_presets", ""),
    "bucket_size_mb": ("bucket_sizes_mb", "bucket"),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if PERF not in metafunc.definition.path.parents:
        return  # correctness tests under tests/ parametrize themselves
    axes = [name for name in AXES if name in metafunc.fixturenames]
    if not axes:
        return
    tier: Tier = metafunc.config.perf_tier
    values = [getattr(tier, AXES[name][0]) for name in axes]
    cases = list(itertools.product(*values))
    ids = ["-".join(filter(None, map(_case_id, axes, case))) for case in cases]
    metafunc.parametrize(axes, cases, ids=ids)


# The value an axis leaves out of ids: the one every case had before the axis existed, so that those
# cases keep the names their baselines have.
UNNAMED = {"launch": "eager", "compile_attention": "sdpa", "allreduce_dtype": "fp32"}


def _case_id(axis: str, value: object) -> str:
    """Byte counts read as 1MiB or 1GiB, not 1048576; an eager launch and the compile suite's sdpa
    attention as nothing (UNNAMED); other axes as their prefix and value."""
    if axis in ("transfer_size", "allreduce_size"):
        return byte_size_label(value)
    if UNNAMED.get(axis) == value:
        return ""
    return f"{AXES[axis][1]}{value}"
