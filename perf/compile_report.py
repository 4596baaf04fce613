"""The end-of-run compile table: per step and model, eager against torch.compile, and the compile's cost."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from perf.report_format import fmt

# What every compile benchmark (perf/test_compile.py) passes to bench.run as `suite`.
SUITE = "compile"
VARIANTS = ("eager", "compiled")
# Keys of a compile result's extra_info besides the harness's figures.
COMPILE_KEYS = ("suite", "variant", "mode", "preset", "precision", "context", "compile_s")
TITLE = "torch.compile: median step, eager and compiled, speedup (eager / compiled, above 1: compiled faster)"


def is_compile_result(info: Mapping[str, Any]) -> bool:
    return (
        info.get("suite") == SUITE
        and all(key in info for key in COMPILE_KEYS)
        and info.get("median_ms") is not None
    )


def table(infos: Iterable[Mapping[str, Any]]) -> list[str]:
    """Lines of the table for the compile results among `infos` (benchmarks' extra_info); none if none.

    'compile s' is the compiled variant's first call; 'cached' says how many of the graphs it
    compiled came from Inductor's on-disk cache, which makes that call several times shorter.
    """
    cases: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    for info in filter(is_compile_result, infos):
        case = (info["mode"], info["preset"], info["precision"], info["context"])
        cases.setdefault(case, {})[info["variant"]] = info
    if not cases:
        return []
    lines = [
        f"{'mode':<11} {'preset':<7} {'prec':<5} {'ctx':>5} {'eager ms':>10} {'compiled ms':>11} "
        f"{'speedup':>8} {'compile s':>9} {'cached':>6}"
    ]
    for (mode, preset, precision, context), by_variant in cases.items():
        eager, compiled = by_variant.get("eager"), by_variant.get("compiled")
        speedup = eager["median_ms"] / compiled["median_ms"] if eager and compiled else None
        lines.append(
            f"{mode:<11} {preset:<7} {precision:<5} {context:>5} "
            f"{fmt(_get(eager, 'median_ms'), '.3f'):>10} {fmt(_get(compiled, 'median_ms'), '.3f'):>11} "
            f"{fmt(speedup, '.2f', 'x'):>8} {fmt(_get(compiled, 'compile_s'), '.1f'):>9} "
            f"{_cached(compiled):>6}"
        )
    return lines


def _get(info: Mapping[str, Any] | None, key: str) -> Any:
    return None if info is None else info[key]


def _cached(compiled: Mapping[str, Any] | None) -> str:
    """'hits/graphs' of Inductor's FX graph cache in the compiled variant's first call."""
    if compiled is None or compiled.get("graph_cache_hits") is None:
        return "-"
    hits, misses = compiled["graph_cache_hits"], compiled.get("graph_cache_misses") or 0
    return f"{hits}/{hits + misses}"
