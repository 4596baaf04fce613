"""The end-of-run attention table: per shape, precision and mode, every provider beside sdpa_flash."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from perf.cases.attention import HOST_BOUND, PROVIDER_NAMES, SWEEPS, AttentionShape
from perf.tables.format import fmt, grid, ratio

BASELINE_PROVIDER = "sdpa_flash"
# What the attention benchmarks put in extra_info besides the harness's figures.
ATTENTION_KEYS = ("provider", "mode", "batch", "heads", "seq", "head_dim", "causal", "dtype")
TITLE = (
    f"attention: median, GPU busy time and share, TFLOP/s, speed relative to {BASELINE_PROVIDER} (above 1: "
    "faster)"
)


def is_attention_result(info: Mapping[str, Any]) -> bool:
    return all(key in info for key in ATTENTION_KEYS) and info.get("median_ms") is not None


def shape_of(info: Mapping[str, Any]) -> AttentionShape:
    return AttentionShape(info["batch"], info["heads"], info["seq"], info["head_dim"], info["causal"])


# A provider's row starts two spaces in, under its mode, shape and dtype.
ATTENTION_COLUMNS = (
    "<provider",
    "ms",
    "GPU ms",
    "busy",
    "TFLOP/s",
    f"vs {BASELINE_PROVIDER}",
    "first call s",
)


def _groups(infos: Iterable[Mapping[str, Any]], host_bound: bool | None = None) -> dict[tuple, list]:
    """The attention results by (mode, shape, dtype), each group's providers in the registry's order as
    (provider, info) pairs; host_bound True or False keeps only the host_bound sweep's shapes or the
    others."""
    groups: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    for info in filter(is_attention_result, infos):
        shape = shape_of(info)
        if host_bound is None or (shape in HOST_BOUND) == host_bound:
            groups.setdefault((info["mode"], str(shape), info["dtype"]), {})[info["provider"]] = info
    order = {name: i for i, name in enumerate(PROVIDER_NAMES)}
    return {
        key: sorted(by_provider.items(), key=lambda item: order.get(item[0], len(order)))
        for key, by_provider in groups.items()
    }


def attention_table(infos: Iterable[Mapping[str, Any]]) -> list[str]:
    """Lines of the table for the attention results among `infos` (benchmarks' extra_info); none if none."""
    rows: list[list[str] | str] = []
    for (mode, shape, dtype), providers in _groups(infos).items():
        rows.append(f"{mode} {shape} {dtype}")
        baseline = dict(providers).get(BASELINE_PROVIDER)
        for provider, info in providers:
            relative = baseline["median_ms"] / info["median_ms"] if baseline else None
            cells = [f"  {provider}", f"{info['median_ms']:.3f}", fmt(info.get("gpu_ms"), ".3f")]
            cells += [fmt(info.get("gpu_busy_share"), ".0%"), fmt(info.get("tflops"), ".3g")]
            rows.append([*cells, fmt(relative, ".2f", "x"), fmt(info.get("compile_s"), ".2f")])
    return grid(ATTENTION_COLUMNS, rows)


DTYPE_COST_TITLE = "attention in fp32 against bf16: medians and their ratio (above 1: fp32 slower)"


DTYPE_COST_COLUMNS = ("<mode", "<shape", "<provider", "bf16 ms", "fp32 ms", "fp32/bf16")


def dtype_cost_table(infos: Iterable[Mapping[str, Any]]) -> list[str]:
    """fp32's median over bf16's for each provider, mode and shape measured in both; none if none."""
    medians: dict[tuple[str, str, str], dict[str, float]] = {}
    for info in filter(is_attention_result, infos):
        key = (info["mode"], str(shape_of(info)), info["provider"])
        medians.setdefault(key, {})[info["dtype"]] = info["median_ms"]
    rows = []
    for (mode, shape, provider), ms in medians.items():
        if "float32" in ms and "bfloat16" in ms:
            slower = ms["float32"] / ms["bfloat16"]
            rows.append(
                [mode, shape, provider, f"{ms['bfloat16']:.3f}", f"{ms['float32']:.3f}", f"{slower:.2f}x"]
            )
    return grid(DTYPE_COST_COLUMNS, rows)


SCALING_TITLE = "naive attention scaling: forward and backward apart, memory kept for backward"


SCALING_COLUMNS = ("<shape", "<dtype", "<provider", "fwd ms", "bwd ms", "fwd+bwd ms", "GiB before bwd")
SCALING_COLUMNS += ("first call s",)


def scaling_table(infos: Iterable[Mapping[str, Any]]) -> list[str]:
    """Lines for perf/test_attention_scaling.py's results (eager and compiled per shape); none if none."""
    rows = []
    for info in infos:
        if info.get("suite") == "attention_scaling" and info.get("median_ms") is not None:
            held = info.get("memory_before_backward_bytes")
            cells = [str(shape_of(info)), info["dtype"], info["provider"], fmt(info.get("forward_ms"), ".3f")]
            cells += [fmt(info.get("backward_ms"), ".3f"), f"{info['median_ms']:.3f}"]
            rows.append(
                [*cells, fmt(held / 2**30 if held else None, ".2f"), fmt(info.get("compile_s"), ".2f")]
            )
    return grid(SCALING_COLUMNS, rows)


HOST_TITLE = (
    "attention host cost: microseconds per call where the GPU waits on the host (the host_bound sweep), "
    "against sdpa_cudnn's (above 1: more host time)"
)
HOST_REFERENCE = "sdpa_cudnn"

HOST_COLUMNS = ("<mode", "<shape", "<provider", "us/call", "GPU us", "busy", f"vs {HOST_REFERENCE}")


def host_cost_table(infos: Iterable[Mapping[str, Any]]) -> list[str]:
    """Per mode and dtype at the host-bound shapes, each provider's time per call against cuDNN's."""
    rows = []
    for (mode, shape, dtype), providers in _groups(infos, host_bound=True).items():
        reference = dict(providers).get(HOST_REFERENCE)
        for provider, info in providers:
            relative = info["median_ms"] / reference["median_ms"] if reference else None
            gpu_us = info.get("gpu_ms") and info["gpu_ms"] * 1e3
            cells = [mode, f"{shape} {dtype}", provider, f"{info['median_ms'] * 1e3:.1f}", fmt(gpu_us, ".1f")]
            rows.append([*cells, fmt(info.get("gpu_busy_share"), ".0%"), fmt(relative, ".2f", "x")])
    return grid(HOST_COLUMNS, rows)


KERNEL = "flash_triton"
CUDNN_TITLE = (
    f"{KERNEL} against {HOST_REFERENCE} at the fixed_tokens shapes, per sequence length: cuDNN's time over "
    f"{KERNEL}'s by GPU time / by the wall clock (above 1: faster than cuDNN)"
)


def cudnn_table(infos: Iterable[Mapping[str, Any]]) -> list[str]:
    """One row per mode, dtype, head dim and masking, one column per sequence length, where the fixed_tokens
    sweep measured both the project's kernel and cuDNN; then the lowest GPU-time ratio. None if no pair."""
    fixed = set(SWEEPS["fixed_tokens"])
    cells: dict[tuple, dict[int, str]] = {}
    lowest: tuple[float, str] | None = None
    for (mode, shape, dtype), providers in _groups(infos).items():
        by_provider = dict(providers)
        ours, cudnn = by_provider.get(KERNEL), by_provider.get(HOST_REFERENCE)
        if ours is None or cudnn is None or shape_of(ours) not in fixed:
            continue
        gpu = ratio(cudnn.get("gpu_ms"), ours.get("gpu_ms"))
        wall = cudnn["median_ms"] / ours["median_ms"]
        row = (mode, dtype, str(ours["head_dim"]), shape_of(ours).masking)
        cells.setdefault(row, {})[ours["seq"]] = f"{fmt(gpu, '.2f')} / {wall:.2f}"
        if gpu is not None and (lowest is None or gpu < lowest[0]):
            lowest = (gpu, f"{mode} {shape} {dtype}")
    seqs = sorted({seq for by_seq in cells.values() for seq in by_seq})
    rows: list[list[str] | str] = [
        [*row, *(by_seq.get(seq, "-") for seq in seqs)] for row, by_seq in cells.items()
    ]
    if lowest is not None:
        rows.append(f"lowest by GPU time: {lowest[0]:.2f} at {lowest[1]}")
    return grid(("<mode", "<dtype", "d", "<mask", *(str(seq) for seq in seqs)), rows)


# The end of a run and the report show the suites' tables in ORDER (perf/tables/summary.py).
ORDER = 10
TABLES = [
    (TITLE, attention_table),
    (HOST_TITLE, host_cost_table),
    (CUDNN_TITLE, cudnn_table),
    (DTYPE_COST_TITLE, dtype_cost_table),
    (SCALING_TITLE, scaling_table),
]
