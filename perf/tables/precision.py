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
from perf.tables.format import Column, Info, fmt, header, line, of_suite, registry_order, titled

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


TOY_COLUMNS = (
    Column("precision", 9, "<"),
    *(Column(stage, 9, "<") for stage in TOY_STAGES),
    Column("ms", 9),
)


def toy_table(infos: Iterable[Info]) -> list[str]:
    results = sorted(
        results_of("toy_autocast", infos), key=lambda x: registry_order(x["precision"], PRECISIONS)
    )
    if not results:
        return []
    lines = [header(TOY_COLUMNS)]
    for x in results:
        dtypes = [x["dtypes"].get(stage, "-") for stage in TOY_STAGES]
        lines.append(line(TOY_COLUMNS, [x["precision"], *dtypes, fmt(x.get("median_ms"), ".3f")]))
    return lines


MATMUL_COLUMNS = (
    Column("mode", 13, "<"),
    Column("n", 6),
    Column("ms", 10),
    Column("TFLOP/s", 8),
    Column("MFU", 6),
    Column("rel error", 9),
)
STEP_COLUMNS = (
    Column("preset", 8, "<"),
    Column("ctx", 5),
    Column("precision", 9, "<"),
    Column("ms", 10),
    Column("tokens/s", 11),
    Column("vs fp32", 8),
)


def matmul_table(infos: Iterable[Info]) -> list[str]:
    results = sorted(
        results_of("matmul", infos), key=lambda x: (x["n"], registry_order(x["mode"], MATH_MODES))
    )
    if not results:
        return []
    lines = [header(MATMUL_COLUMNS)]
    for x in results:
        cells = [
            x["mode"],
            str(x["n"]),
            fmt(x.get("median_ms"), ".3f"),
            fmt(x.get("tflops"), ".4g"),
            fmt(x.get("mfu"), ".1%"),
            f"{x['rel_error']:.2e}",
        ]
        lines.append(line(MATMUL_COLUMNS, cells))
    return lines


def step_table(infos: Iterable[Info]) -> list[str]:
    cases: dict[tuple[str, int], dict[str, Info]] = {}
    for x in results_of("step_precision", infos):
        cases.setdefault((x["preset"], x["context"]), {})[x["precision"]] = x
    if not cases:
        return []
    lines = [header(STEP_COLUMNS)]
    for preset, context in sorted(cases, key=lambda case: (registry_order(case[0], PRESETS), case[1])):
        by_precision = cases[preset, context]
        fp32_ms = by_precision.get("fp32", {}).get("median_ms")
        for precision in sorted(by_precision, key=lambda p: registry_order(p, PRECISIONS)):
            x = by_precision[precision]
            ms = x.get("median_ms")
            speedup = fp32_ms / ms if fp32_ms is not None and ms else None
            cells = [preset, str(context), precision, fmt(ms, ".3f"), fmt(x.get("tokens_per_s"), ".0f")]
            lines.append(line(STEP_COLUMNS, [*cells, fmt(speedup, ".2f", "x")]))
    return lines


ORDER = 30  # perf/tables/summary.py
TABLES: list[tuple[str, Callable[[Iterable[Info]], list[str]]]] = [
    (TOY_TITLE, toy_table),
    (MATMUL_TITLE, matmul_table),
    (STEP_TITLE, step_table),
]


def table(infos: Iterable[Info]) -> list[str]:
    """Every non-empty table of TABLES under its title; none if no result is of these suites."""
    return titled(TABLES, infos)
