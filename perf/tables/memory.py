"""End-of-run table of the memory suite: peak memory per step, what stays between steps and what a step
adds, and what the allocator reserved (results recognized by their `suite` key)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from model.config import PRESETS
from model.precision import PRECISIONS
from perf.cases.memory import ALLOCATORS
from perf.tables.format import Info, gib, grid, of_suite, registry_order

MEMORY_TITLE = (
    "peak memory per step (GiB): the state resident between steps and what a step adds, and what the "
    "allocator reserved"
)


def results_of(suite: str, infos: Iterable[Info]) -> list[Info]:
    return of_suite(infos, suite)


def _allocator_order(allocator: str | None) -> tuple[int, tuple[int, str]]:
    """Results from before the allocator axis first, then the allocators in perf/cases/memory.py's order."""
    return (0, (0, "")) if allocator is None else (1, registry_order(allocator, ALLOCATORS))


# Each figure's column title and its extra_info key (bytes, shown in GiB).
FIGURES = {
    "peak": "peak_memory_bytes",
    "reserved": "peak_reserved_bytes",
    "frag": "fragmentation_bytes",
    "resident": "resident_bytes",
    "params": "params_bytes",
    "grads": "grads_bytes",
    "optim": "optimizer_state_bytes",
    "activ": "activation_peak_bytes",
}
COLUMNS = ("<preset", "ctx", "<precision", "<mode", "<allocator", *FIGURES)


def memory_table(infos: Iterable[Info]) -> list[str]:
    """One row per case: both allocators of a mode side by side, the default first; reserved is the
    allocator's peak reservation, frag its excess over the peak allocated. Results stored before the
    allocator axis show '-' there."""
    results = results_of("memory", infos)
    results.sort(
        key=lambda x: (
            registry_order(x["preset"], PRESETS),
            x["context"],
            registry_order(x["precision"], PRECISIONS),
            x["mode"] != "forward",
            _allocator_order(x.get("allocator")),
        )
    )
    return grid(
        COLUMNS,
        (
            [x["preset"], str(x["context"]), x["precision"], x["mode"], x.get("allocator") or "-"]
            + [gib(x.get(key)) for key in FIGURES.values()]
            for x in results
        ),
    )


ORDER = 40  # perf/tables/summary.py
TABLES: list[tuple[str, Callable[[Iterable[Info]], list[str]]]] = [
    (MEMORY_TITLE, memory_table),
]
