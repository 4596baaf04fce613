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
from perf.tables.format import Info, fmt, grid, of_suite, registry_order, titled

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


TOY_COLUMNS = ("<precision", *(f"<{stage}" for stage in TOY_STAGES), "ms")


def toy_table(infos: Iterable[Info]) -> list[str]:
    results = sorted(
        results_of("toy_autocast", infos), key=lambda x: registry_order(x["precision"], PRECISIONS)
    )
    return grid(
        TOY_COLUMNS,
        (
            [x["precision"], *(x["dtypes"].get(s, "-") for s in TOY_STAGES), fmt(x.get("median_ms"), ".3f")]
            for x in results
        ),
    )


MATMUL_COLUMNS = ("<mode", "n", "ms", "TFLOP/s", "MFU", "rel error")
STEP_COLUMNS = ("<preset", "ctx", "<precision", "ms", "tokens/s", "vs fp32")


def matmul_table(infos: Iterable[Info]) -> list[str]:
    results = sorted(
        results_of("matmul", infos), key=lambda x: (x["n"], registry_order(x["mode"], MATH_MODES))
    )
    return grid(MATMUL_COLUMNS, map(_matmul_row, results))


def _matmul_row(x: Info) -> list[str]:
    cells = [x["mode"], str(x["n"]), fmt(x.get("median_ms"), ".3f"), fmt(x.get("tflops"), ".4g")]
    return [*cells, fmt(x.get("mfu"), ".1%"), f"{x['rel_error']:.2e}"]


def step_table(infos: Iterable[Info]) -> list[str]:
    cases: dict[tuple[str, int], dict[str, Info]] = {}
    for x in results_of("step_precision", infos):
        cases.setdefault((x["preset"], x["context"]), {})[x["precision"]] = x
    rows = []
    for preset, context in sorted(cases, key=lambda case: (registry_order(case[0], PRESETS), case[1])):
        by_precision = cases[preset, context]
        fp32_ms = by_precision.get("fp32", {}).get("median_ms")
        for precision in sorted(by_precision, key=lambda p: registry_order(p, PRECISIONS)):
            x = by_precision[precision]
            ms = x.get("median_ms")
            speedup = fp32_ms / ms if fp32_ms is not None and ms else None
            cells = [preset, str(context), precision, fmt(ms, ".3f"), fmt(x.get("tokens_per_s"), ".0f")]
            rows.append([*cells, fmt(speedup, ".2f", "x")])
    return grid(STEP_COLUMNS, rows)


ORDER = 30  # perf/tables/summary.py
TABLES: list[tuple[str, Callable[[Iterable[Info]], list[str]]]] = [
    (TOY_TITLE, toy_table),
    (MATMUL_TITLE, matmul_table),
    (STEP_TITLE, step_table),
]


def table(infos: Iterable[Info]) -> list[str]:
    """Every non-empty table of TABLES under its title; none if no result is of these suites."""
    return titled(TABLES, infos)
