"""End-of-run tables of the precision suites: autocast's dtypes, matmuls per math mode, the training
step per precision.

Each table picks its suite's results out of all benchmarks' extra_info by their `suite` key.
`TABLES` lists the tables with their titles; `table` gives all of them under one title.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from model.config import PRESETS
from model.precision import PRECISIONS
from perf.cases.matmul import MATH_MODES
from perf.tables.format import Info, fmt, of_suite, registry_order, titled

TOY_TITLE = "autocast on the toy model: dtype of each stage per precision"
MATMUL_TITLE = "n x n matmuls per math mode: time, TFLOP/s, relative error against fp64"
STEP_TITLE = "training step per precision (speedup above 1: faster than fp32)"
TITLE = "mixed precision: autocast dtypes, matmul math modes, training step"

# The stages model.toy.autocast_dtypes reports, in the order a step reaches them.
TOY_STAGES = ("params", "fc1", "ln", "logits", "loss", "grads")
# Every result of a suite carries these; one that lacks any is not shown.
_KEYS = {
    "toy_autocast": ("precision", "dtypes"),
    "matmul": ("mode", "n", "rel_error"),
    "step_precision": ("precision", "preset", "context"),
}


def results_of(suite: str, infos: Iterable[Info]) -> list[Info]:
    """The suite's results that carry every figure its table reads."""
    return of_suite(infos, suite, _KEYS[suite])


def toy_table(infos: Iterable[Info]) -> list[str]:
    results = sorted(
        results_of("toy_autocast", infos), key=lambda x: registry_order(x["precision"], PRECISIONS)
    )
    if not results:
        return []
    stages = "".join(f" {stage:<9}" for stage in TOY_STAGES)
    lines = [f"{'precision':<9}{stages} {'ms':>9}"]
    for x in results:
        dtypes = "".join(f" {x['dtypes'].get(stage, '-'):<9}" for stage in TOY_STAGES)
        lines.append(f"{x['precision']:<9}{dtypes} {fmt(x.get('median_ms'), '.3f'):>9}")
    return lines


def matmul_table(infos: Iterable[Info]) -> list[str]:
    results = sorted(
        results_of("matmul", infos), key=lambda x: (x["n"], registry_order(x["mode"], MATH_MODES))
    )
    if not results:
        return []
    lines = [f"{'mode':<13} {'n':>6} {'ms':>10} {'TFLOP/s':>8} {'MFU':>6} {'rel error':>9}"]
    for x in results:
        lines.append(
            f"{x['mode']:<13} {x['n']:>6} {fmt(x.get('median_ms'), '.3f'):>10} "
            f"{fmt(x.get('tflops'), '.4g'):>8} {fmt(x.get('mfu'), '.1%'):>6} {x['rel_error']:>9.2e}"
        )
    return lines


def step_table(infos: Iterable[Info]) -> list[str]:
    cases: dict[tuple[str, int], dict[str, Info]] = {}
    for x in results_of("step_precision", infos):
        cases.setdefault((x["preset"], x["context"]), {})[x["precision"]] = x
    if not cases:
        return []
    lines = [f"{'preset':<8} {'ctx':>5} {'precision':<9} {'ms':>10} {'tokens/s':>11} {'vs fp32':>8}"]
    for preset, context in sorted(cases, key=lambda case: (registry_order(case[0], PRESETS), case[1])):
        by_precision = cases[preset, context]
        fp32_ms = by_precision.get("fp32", {}).get("median_ms")
        for precision in sorted(by_precision, key=lambda p: registry_order(p, PRECISIONS)):
            x = by_precision[precision]
            ms = x.get("median_ms")
            speedup = fp32_ms / ms if fp32_ms is not None and ms else None
            lines.append(
                f"{preset:<8} {context:>5} {precision:<9} {fmt(ms, '.3f'):>10} "
                f"{fmt(x.get('tokens_per_s'), '.0f'):>11} {fmt(speedup, '.2f', 'x'):>8}"
            )
    return lines


TABLES: list[tuple[str, Callable[[Iterable[Info]], list[str]]]] = [
    (TOY_TITLE, toy_table),
    (MATMUL_TITLE, matmul_table),
    (STEP_TITLE, step_table),
]


def table(infos: Iterable[Info]) -> list[str]:
    """Every non-empty table of TABLES under its title; none if no result is of these suites."""
    return titled(TABLES, infos)
