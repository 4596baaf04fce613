"""The end-of-run attention table: per shape, precision and mode, every provider beside sdpa_flash."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from perf.cases.attention import PROVIDER_NAMES, AttentionShape
from perf.tables.format import fmt

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


def attention_table(infos: Iterable[Mapping[str, Any]]) -> list[str]:
    """Lines of the table for the attention results among `infos` (benchmarks' extra_info); none if none."""
    groups: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    for info in filter(is_attention_result, infos):
        shape = shape_of(info)
        groups.setdefault((info["mode"], str(shape), info["dtype"]), {})[info["provider"]] = info
    if not groups:
        return []
    lines = [
        f"{'provider':<24} {'ms':>10} {'GPU ms':>10} {'busy':>5} {'TFLOP/s':>8} "
        f"{'vs ' + BASELINE_PROVIDER:>14} {'first call s':>12}"
    ]
    order = {name: i for i, name in enumerate(PROVIDER_NAMES)}
    for (mode, shape, dtype), by_provider in groups.items():
        lines.append(f"{mode} {shape} {dtype}")
        baseline = by_provider.get(BASELINE_PROVIDER)
        for provider in sorted(by_provider, key=lambda p: order.get(p, len(order))):
            info = by_provider[provider]
            relative = baseline["median_ms"] / info["median_ms"] if baseline else None
            lines.append(
                f"  {provider:<22} {info['median_ms']:>10.3f} {fmt(info.get('gpu_ms'), '.3f'):>10} "
                f"{fmt(info.get('gpu_busy_share'), '.0%'):>5} {fmt(info.get('tflops'), '.3g'):>8} "
                f"{fmt(relative, '.2f', 'x'):>14} {fmt(info.get('compile_s'), '.2f'):>12}"
            )
    return lines


DTYPE_COST_TITLE = "attention in fp32 against bf16: medians and their ratio (above 1: fp32 slower)"


def dtype_cost_table(infos: Iterable[Mapping[str, Any]]) -> list[str]:
    """fp32's median over bf16's for each provider, mode and shape measured in both; none if none."""
    medians: dict[tuple[str, str, str], dict[str, float]] = {}
    for info in filter(is_attention_result, infos):
        key = (info["mode"], str(shape_of(info)), info["provider"])
        medians.setdefault(key, {})[info["dtype"]] = info["median_ms"]
    pairs = [(key, ms) for key, ms in medians.items() if "float32" in ms and "bfloat16" in ms]
    if not pairs:
        return []
    lines = [f"{'mode':<17} {'shape':<34} {'provider':<22} {'bf16 ms':>9} {'fp32 ms':>9} {'fp32/bf16':>9}"]
    for (mode, shape, provider), ms in pairs:
        lines.append(
            f"{mode:<17} {shape:<34} {provider:<22} {ms['bfloat16']:>9.3f} {ms['float32']:>9.3f} "
            f"{ms['float32'] / ms['bfloat16']:>8.2f}x"
        )
    return lines


SCALING_TITLE = "naive attention scaling: forward and backward apart, memory kept for backward"


def scaling_table(infos: Iterable[Mapping[str, Any]]) -> list[str]:
    """Lines for perf/test_attention_scaling.py's results (eager and compiled per shape); none if none."""
    rows = [i for i in infos if i.get("suite") == "attention_scaling" and i.get("median_ms") is not None]
    if not rows:
        return []
    lines = [
        f"{'shape':<26} {'dtype':<8} {'provider':<15} {'fwd ms':>9} {'bwd ms':>9} {'fwd+bwd ms':>11} "
        f"{'GiB before bwd':>14} {'first call s':>12}"
    ]
    for info in rows:
        shape = shape_of(info)
        held = info.get("memory_before_backward_bytes")
        lines.append(
            f"{shape!s:<26} {info['dtype']:<8} {info['provider']:<15} "
            f"{fmt(info.get('forward_ms'), '.3f'):>9} {fmt(info.get('backward_ms'), '.3f'):>9} "
            f"{info['median_ms']:>11.3f} {fmt(held / 2**30 if held else None, '.2f'):>14} "
            f"{fmt(info.get('compile_s'), '.2f'):>12}"
        )
    return lines
