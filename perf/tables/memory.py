"""End-of-run tables of the memory, CUDA graph and host-to-device suites.

Each table reads the results of its suite among all benchmarks' extra_info, recognized by their
`suite` key; `TABLES` lists them with their titles, `table` gives them all under one title.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from model.config import PRESETS
from model.precision import PRECISIONS
from perf.cases.memory import ALLOCATORS
from perf.cases.model import LAUNCHES
from perf.cases.transfer import HOST_MEMORY, byte_size_label
from perf.tables.format import Info, fmt, gib, of_suite, registry_order, titled

MEMORY_TITLE = (
    "peak memory per step (GiB): the state resident between steps and what a step adds, and what the "
    "allocator reserved"
)
GRAPH_TITLE = (
    "steps launched eagerly against a CUDA graph replay: median, speedup (above 1: graph faster), GPU busy "
    "ms and busy share (eager/graph)"
)
TRANSFER_TITLE = "host-to-device copies: GB/s from pinned and pageable memory"
OVERLAP_TITLE = "host-to-device copy and matmuls: serial against overlapped on two streams"
TITLE = "memory, CUDA graphs and host-to-device copies"


def results_of(suite: str, infos: Iterable[Info]) -> list[Info]:
    return of_suite(infos, suite)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


def _allocator_order(allocator: str | None) -> tuple[int, tuple[int, str]]:
    """Results from before the allocator axis first, then the allocators in perf/cases/memory.py's order."""
    return (0, (0, "")) if allocator is None else (1, registry_order(allocator, ALLOCATORS))


def memory_table(infos: Iterable[Info]) -> list[str]:
    """One row per case: both allocators of a mode side by side, the default first; reserved is the
    allocator's peak reservation, frag its excess over the peak allocated. Results stored before the
    allocator axis show '-' there."""
    results = results_of("memory", infos)
    if not results:
        return []
    results.sort(
        key=lambda x: (
            registry_order(x["preset"], PRESETS),
            x["context"],
            registry_order(x["precision"], PRECISIONS),
            x["mode"] != "forward",
            _allocator_order(x.get("allocator")),
        )
    )
    lines = [
        f"{'preset':<8} {'ctx':>5} {'precision':<9} {'mode':<10} {'allocator':<19} {'peak':>8} "
        f"{'reserved':>8} {'frag':>8} {'resident':>8} {'params':>8} {'grads':>8} {'optim':>8} {'activ':>8}"
    ]
    for x in results:
        lines.append(
            f"{x['preset']:<8} {x['context']:>5} {x['precision']:<9} {x['mode']:<10} "
            f"{x.get('allocator') or '-':<19} {gib(x.get('peak_memory_bytes')):>8} "
            f"{gib(x.get('peak_reserved_bytes')):>8} {gib(x.get('fragmentation_bytes')):>8} "
            f"{gib(x.get('resident_bytes')):>8} {gib(x.get('params_bytes')):>8} "
            f"{gib(x.get('grads_bytes')):>8} {gib(x.get('optimizer_state_bytes')):>8} "
            f"{gib(x.get('activation_peak_bytes')):>8}"
        )
    return lines


def graph_table(infos: Iterable[Info]) -> list[str]:
    """Every step measured replayed from a CUDA graph (extra_info launch "cuda_graph"), beside the same
    step launched eagerly: the CUDA graph suite's and the end-to-end benchmarks' under --launches."""
    cases: dict[tuple, dict[str, Info]] = {}
    for x in infos:
        if x.get("launch") in LAUNCHES and x.get("median_ms") is not None:
            key = (x["mode"], x["impl"], x["preset"], x["precision"], x["context"], x.get("warmup_steps"))
            cases.setdefault(key, {})[x["launch"]] = x
    cases = {key: by_launch for key, by_launch in cases.items() if "cuda_graph" in by_launch}
    if not cases:
        return []
    lines = [
        f"{'mode':<17} {'impl':<9} {'preset':<6} {'prec':<5} {'ctx':>5} {'eager ms':>9} {'graph ms':>9} "
        f"{'speedup':>7} {'eager GPU':>9} {'graph GPU':>9} {'busy':>9}"
    ]

    def order(key: tuple) -> tuple:
        mode, impl, preset, precision, context, _ = key
        return mode, impl, registry_order(preset, PRESETS), registry_order(precision, PRECISIONS), context

    for key in sorted(cases, key=order):
        mode, impl, preset, precision, context, _ = key
        eager, graph = cases[key].get("eager", {}), cases[key]["cuda_graph"]
        speedup = _ratio(eager.get("median_ms"), graph["median_ms"])
        busy = f"{fmt(eager.get('gpu_busy_share'), '.0%')}/{fmt(graph.get('gpu_busy_share'), '.0%')}"
        lines.append(
            f"{mode:<17} {impl:<9} {preset:<6} {precision:<5} {context:>5} "
            f"{fmt(eager.get('median_ms'), '.3f'):>9} {fmt(graph['median_ms'], '.3f'):>9} "
            f"{fmt(speedup, '.2f', 'x'):>7} {fmt(eager.get('gpu_ms'), '.3f'):>9} "
            f"{fmt(graph.get('gpu_ms'), '.3f'):>9} {busy:>9}"
        )
    return lines


def transfer_table(infos: Iterable[Info]) -> list[str]:
    sizes: dict[int, dict[str, Info]] = {}
    for x in results_of("transfer", infos):
        sizes.setdefault(x["transfer_bytes"], {})[x["host_memory"]] = x
    if not sizes:
        return []
    header = "".join(f" {memory + ' GB/s':>14}" for memory in HOST_MEMORY)
    lines = [f"{'size':<10}{header} {'pinned/pageable':>16}"]
    for size in sorted(sizes):
        rates = {memory: sizes[size].get(memory, {}).get("gb_per_s") for memory in HOST_MEMORY}
        cells = "".join(f" {fmt(rates[memory], '.2f'):>14}" for memory in HOST_MEMORY)
        ratio = _ratio(rates["pinned"], rates["pageable"])
        lines.append(f"{byte_size_label(size):<10}{cells} {fmt(ratio, '.2f', 'x'):>16}")
    return lines


def overlap_table(infos: Iterable[Info]) -> list[str]:
    cases: dict[tuple, dict[str, Info]] = {}
    for x in results_of("overlap", infos):
        cases.setdefault((x["copy_bytes"], x["matmul_n"], x["matmuls"]), {})[x["schedule"]] = x
    if not cases:
        return []
    lines = [
        f"{'copy':<8} {'matmuls':>12} {'serial ms':>10} {'overlap ms':>10} {'copy ms':>9} "
        f"{'compute ms':>10} {'saved':>6} {'at best':>7}"
    ]
    for copy_bytes, n, matmuls in sorted(cases):
        by_schedule = cases[copy_bytes, n, matmuls]
        serial = by_schedule.get("serial", {}).get("median_ms")
        overlapped = by_schedule.get("overlapped", {}).get("median_ms")
        # Both cases measure copy and compute alone; the serial case's figures where it ran.
        alone = by_schedule.get("serial") or next(iter(by_schedule.values()))
        copy_ms, compute_ms = alone.get("copy_ms"), alone.get("compute_ms")
        saved = None if serial is None or overlapped is None else 1 - overlapped / serial
        # Overlapped at best takes the longer of the two instead of their sum.
        best = (
            None
            if copy_ms is None or compute_ms is None
            else 1 - max(copy_ms, compute_ms) / (copy_ms + compute_ms)
        )
        lines.append(
            f"{byte_size_label(copy_bytes):<8} {f'{matmuls} x n{n}':>12} {fmt(serial, '.3f'):>10} "
            f"{fmt(overlapped, '.3f'):>10} {fmt(copy_ms, '.3f'):>9} {fmt(compute_ms, '.3f'):>10} "
            f"{fmt(saved, '.0%'):>6} {fmt(best, '.0%'):>7}"
        )
    return lines


TABLES: list[tuple[str, Callable[[Iterable[Info]], list[str]]]] = [
    (MEMORY_TITLE, memory_table),
    (GRAPH_TITLE, graph_table),
    (TRANSFER_TITLE, transfer_table),
    (OVERLAP_TITLE, overlap_table),
]


def table(infos: Iterable[Info]) -> list[str]:
    """Every non-empty table of TABLES under its title; none if no result is of these suites."""
    return titled(TABLES, infos)
