"""The end-of-run compile tables: per step, model and attention, eager against torch.compile and the
compile's cost; and the attention implementations side by side in the same steps."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from perf.tables.format import fmt, grid

# What every compile benchmark (perf/test_compile.py) passes to bench.run as `suite`.
SUITE = "compile"
VARIANTS = ("eager", "compiled")
# Keys of a compile result's extra_info besides the harness's figures; `impl` (the model's attention)
# is read where present.
COMPILE_KEYS = ("suite", "variant", "mode", "preset", "precision", "context", "compile_s")
TITLE = "torch.compile: median step, eager and compiled, speedup (eager / compiled, above 1: compiled faster)"

# The attention table: the project's Triton kernel held against PyTorch's fused attention.
BASELINE_ATTENTION = "sdpa"
CONTENDER_ATTENTION = "flash_triton"
ATTENTION_TITLE = (
    f"attention in the model's step: {CONTENDER_ATTENTION} against {BASELINE_ATTENTION}, eager and compiled "
    f"(ratio {CONTENDER_ATTENTION} / {BASELINE_ATTENTION}, below 1: {CONTENDER_ATTENTION} faster)"
)


def is_compile_result(info: Mapping[str, Any]) -> bool:
    return (
        info.get("suite") == SUITE
        and all(key in info for key in COMPILE_KEYS)
        and info.get("median_ms") is not None
    )


def _case(info: Mapping[str, Any]) -> tuple:
    return info["mode"], info["preset"], info["precision"], info["context"]


CASE_COLUMNS = ("<mode", "<preset", "<prec", "ctx")
COLUMNS = (*CASE_COLUMNS, "<attention", "eager ms", "compiled ms", "speedup", "compile s", "cached")
# Per attention implementation its median, GPU time and MFU, then the contender's over the baseline's.
ATTENTION_COLUMNS = (
    *CASE_COLUMNS,
    "<variant",
    *(
        title
        for name in (BASELINE_ATTENTION, CONTENDER_ATTENTION)
        for title in (f"{name} ms", "GPU ms", "MFU")
    ),
    *("ratio", "GPU ratio"),
)


def table(infos: Iterable[Mapping[str, Any]]) -> list[str]:
    """Lines of the table for the compile results among `infos` (benchmarks' extra_info); none if none.

    'compile s' is the compiled variant's first call; 'cached' says how many of the graphs it
    compiled came from Inductor's on-disk cache, which makes that call several times shorter.
    """
    cases: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    for info in filter(is_compile_result, infos):
        cases.setdefault((*_case(info), info.get("impl") or "-"), {})[info["variant"]] = info
    rows = []
    for (mode, preset, precision, context, attention), by_variant in cases.items():
        eager, compiled = by_variant.get("eager"), by_variant.get("compiled")
        speedup = eager["median_ms"] / compiled["median_ms"] if eager and compiled else None
        cells = [mode, preset, precision, str(context), attention, fmt(_get(eager, "median_ms"), ".3f")]
        cells += [fmt(_get(compiled, "median_ms"), ".3f"), fmt(speedup, ".2f", "x")]
        rows.append([*cells, fmt(_get(compiled, "compile_s"), ".1f"), _cached(compiled)])
    return grid(COLUMNS, rows)


def attention_table(infos: Iterable[Mapping[str, Any]]) -> list[str]:
    """Per step, model, precision and context, a row per variant with each attention implementation's
    median, GPU busy time and MFU, and the contender's median (and GPU time) over the baseline's.

    A figure that is missing (an implementation that did not run, GPU time or MFU not measured) reads
    '-'. None if no compile result ran the contender: there is nothing to set beside the baseline.
    """
    cases: dict[tuple, dict[tuple[str, str], Mapping[str, Any]]] = {}
    for info in filter(is_compile_result, infos):
        if info.get("impl") in (BASELINE_ATTENTION, CONTENDER_ATTENTION):
            cases.setdefault(_case(info), {})[info["variant"], info["impl"]] = info
    if not any(impl == CONTENDER_ATTENTION for by_run in cases.values() for _, impl in by_run):
        return []
    rows = []
    for (mode, preset, precision, context), by_run in cases.items():
        for variant in VARIANTS:
            base = by_run.get((variant, BASELINE_ATTENTION))
            contender = by_run.get((variant, CONTENDER_ATTENTION))
            if base is None and contender is None:
                continue
            cells = [mode, preset, precision, str(context), variant]
            for info in (base, contender):
                cells += [fmt(_get(info, "median_ms"), ".3f"), fmt(_opt(info, "gpu_ms"), ".3f")]
                cells.append(fmt(_opt(info, "mfu"), ".1%"))
            cells += [
                fmt(_ratio(contender, base, "median_ms"), ".2f"),
                fmt(_ratio(contender, base, "gpu_ms"), ".2f"),
            ]
            rows.append(cells)
    return grid(ATTENTION_COLUMNS, rows)


def _get(info: Mapping[str, Any] | None, key: str) -> Any:
    return None if info is None else info[key]


def _opt(info: Mapping[str, Any] | None, key: str) -> Any:
    """A figure that may be absent from a result (GPU time on the CPU, MFU on a GPU without a peak)."""
    return None if info is None else info.get(key)


def _ratio(top: Mapping[str, Any] | None, bottom: Mapping[str, Any] | None, key: str) -> float | None:
    """top's figure over bottom's, where both have it."""
    top, bottom = _opt(top, key), _opt(bottom, key)
    return top / bottom if top is not None and bottom else None


def _cached(compiled: Mapping[str, Any] | None) -> str:
    """'hits/graphs' of Inductor's FX graph cache in the compiled variant's first call."""
    if compiled is None or compiled.get("graph_cache_hits") is None:
        return "-"
    hits, misses = compiled["graph_cache_hits"], compiled.get("graph_cache_misses") or 0
    return f"{hits}/{hits + misses}"


ORDER = 20  # perf/tables/summary.py
TABLES = [(TITLE, table), (ATTENTION_TITLE, attention_table)]
