"""End-of-run table of the CUDA graph suite: every step replayed from a captured graph beside the same step
launched eagerly (the CUDA graph suite's, and the end-to-end steps' under --launches)."""

from __future__ import annotations

from collections.abc import Iterable

from model.config import PRESETS
from model.precision import PRECISIONS
from perf.cases.model import LAUNCHES
from perf.tables.format import Info, fmt, grid, ratio, registry_order

GRAPH_TITLE = (
    "steps launched eagerly against a CUDA graph replay: median, speedup (above 1: graph faster), GPU busy "
    "ms and busy share (eager/graph)"
)


COLUMNS = ("<mode", "<impl", "<preset", "<prec", "ctx", "eager ms", "graph ms", "speedup")
COLUMNS += ("eager GPU", "graph GPU", "busy")


def graph_table(infos: Iterable[Info]) -> list[str]:
    """Every step measured replayed from a CUDA graph (extra_info launch "cuda_graph"), beside the same
    step launched eagerly: the CUDA graph suite's and the end-to-end benchmarks' under --launches."""
    cases: dict[tuple, dict[str, Info]] = {}
    for x in infos:
        if x.get("launch") in LAUNCHES and x.get("median_ms") is not None:
            key = (x["mode"], x["impl"], x["preset"], x["precision"], x["context"], x.get("warmup_steps"))
            cases.setdefault(key, {})[x["launch"]] = x
    cases = {key: by_launch for key, by_launch in cases.items() if "cuda_graph" in by_launch}
    rows = []

    def order(key: tuple) -> tuple:
        mode, impl, preset, precision, context, _ = key
        return mode, impl, registry_order(preset, PRESETS), registry_order(precision, PRECISIONS), context

    for key in sorted(cases, key=order):
        mode, impl, preset, precision, context, _ = key
        eager, graph = cases[key].get("eager", {}), cases[key]["cuda_graph"]
        speedup = ratio(eager.get("median_ms"), graph["median_ms"])
        busy = f"{fmt(eager.get('gpu_busy_share'), '.0%')}/{fmt(graph.get('gpu_busy_share'), '.0%')}"
        cells = [mode, impl, preset, precision, str(context), fmt(eager.get("median_ms"), ".3f")]
        cells += [fmt(graph["median_ms"], ".3f"), fmt(speedup, ".2f", "x"), fmt(eager.get("gpu_ms"), ".3f")]
        rows.append([*cells, fmt(graph.get("gpu_ms"), ".3f"), busy])
    return grid(COLUMNS, rows)


ORDER = 41  # perf/tables/summary.py: after the memory table
TABLES = [(GRAPH_TITLE, graph_table)]
