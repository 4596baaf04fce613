"""End-of-run tables of the data-parallel suites: the step time, peak memory and training state per rank
of each variant, and the optimizer memory per rank with AdamW's state whole and sharded.

Each table picks its suite's results out of all benchmarks' extra_info by their `suite` key.
`TABLES` lists the tables with their titles; `table` gives all of them under one title.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from model.config import PRESETS
from perf.cases.data_parallel import BUCKETED, OPTIMIZER_KINDS, SHARDED_SUITE, SUITE, VARIANTS
from perf.tables.format import Info, fmt, gib, grid, of_suite, registry_order, titled

STEP_TITLE = (
    "data-parallel training step per variant: overhead and share over one GPU alone ('single'), "
    "speed against torch DDP (below 1: faster), the largest rank's peak and held training state"
)
MEMORY_TITLE = "optimizer memory per rank (GiB; the largest rank's): AdamW's state whole and sharded"
TITLE = "data parallel: training step per variant, sharded optimizer memory"

# Every result of a suite carries these; one that lacks any is not shown.
_KEYS = {
    SUITE: ("variant", "preset", "backend", "world_size", "batch_per_rank", "context"),
    SHARDED_SUITE: ("optimizer_kind", "preset", "backend", "world_size", "batch_per_rank", "context"),
}


def results_of(suite: str, infos: Iterable[Info]) -> list[Info]:
    """The suite's results that carry every figure its table reads."""
    return of_suite(infos, suite, _KEYS[suite])


def setup_key(x: Info) -> tuple:
    return (x["preset"], x["backend"], x["world_size"], x["batch_per_rank"], x["context"])


def setup_order(x: Info) -> tuple:
    return (registry_order(x["preset"], PRESETS), *setup_key(x)[1:])


def setup_line(x: Info) -> str:
    return (
        f"{x['preset']} fp32, {x['backend']} with {x['world_size']} ranks, batch {x['batch_per_rank']} "
        f"per rank, ctx {x['context']}"
    )


def variant_label(x: Info) -> str:
    if x["variant"] == BUCKETED:
        return f"{BUCKETED} {x['bucket_size_mb']:g}MiB"
    return x["variant"]


def overhead(x: Info) -> float | None:
    """What the variant adds to the single step, in ms; None where it took less: noise, not a saving."""
    added = x.get("comm_overhead_ms")
    return added if added is not None and added >= 0 else None


def held_mib(x: Info) -> str:
    """The largest rank's parameters, gradients and optimizer state after a step, in MiB; '-' for
    results recorded before the figure was."""
    per_rank = x.get("state_bytes_per_rank")
    return fmt(max(per_rank) / 2**20 if per_rank else None, ".1f")


# A variant's row starts two spaces in, under its setup's line.
STEP_COLUMNS = ("<variant", "ms", "tokens/s", "sync ms", "overhead ms", "share", "vs DDP", "peak GiB")
STEP_COLUMNS += ("held MiB",)
MEMORY_COLUMNS = ("<optimizer", "built", "pre-step", "stepped", "peak", "state MiB", "vs adamw", "held MiB")
MEMORY_COLUMNS += ("ms",)


def _setup_rows(results: list[Info], row) -> list[list[str] | str]:
    """Each result's row (row(x)), under a line naming its setup where the setup changes."""
    rows: list[list[str] | str] = []
    setup = None
    for x in results:
        if setup_key(x) != setup:
            setup = setup_key(x)
            rows.append(setup_line(x))
        rows.append(row(x))
    return rows


def step_table(infos: Iterable[Info]) -> list[str]:
    results = results_of(SUITE, infos)
    if not results:
        return []
    results.sort(
        key=lambda x: (
            setup_order(x),
            registry_order(x["variant"], (*VARIANTS, BUCKETED)),
            x.get("bucket_size_mb") or 0.0,
        )
    )
    lines = grid(STEP_COLUMNS, _setup_rows(results, _step_row))
    if any(x.get("comm_overhead_ms") is not None and overhead(x) is None for x in results):
        lines.append(
            "overhead ms, share: '-' where the step took less than 'single' alone: noise, not a saving"
        )
    if any(x["variant"] in ("torch_ddp", "fsdp2") for x in results):
        lines.append(
            "sync ms: time in finish_gradient_synchronization; torch_ddp's all-reduces and fsdp2's "
            "reduce-scatters run in backward"
        )
    return lines


def memory_table(infos: Iterable[Info]) -> list[str]:
    results = results_of(SHARDED_SUITE, infos)
    if not results:
        return []
    results.sort(key=lambda x: (setup_order(x), registry_order(x["optimizer_kind"], OPTIMIZER_KINDS)))
    return grid(MEMORY_COLUMNS, _setup_rows(results, _memory_row))


def _step_row(x: Info) -> list[str]:
    share = x.get("comm_share") if overhead(x) is not None else None
    cells = [f"  {variant_label(x)}", fmt(x.get("median_ms"), ".3f"), fmt(x.get("tokens_per_s"), ".0f")]
    cells += [fmt(x.get("sync_wait_ms"), ".3f"), fmt(overhead(x), ".3f"), fmt(share, ".0%")]
    return [*cells, fmt(x.get("vs_torch_ddp"), ".2f", "x"), gib(x.get("peak_memory_bytes")), held_mib(x)]


def _memory_row(x: Info) -> list[str]:
    state = x.get("optimizer_state_bytes")
    cells = [f"  {x['optimizer_kind']}"]
    cells += [
        gib(x.get(key))
        for key in ("after_build_bytes", "before_step_bytes", "after_step_bytes", "peak_bytes")
    ]
    cells += [fmt(None if state is None else state / 2**20, ".1f"), fmt(x.get("state_vs_adamw"), ".3f")]
    return [*cells, held_mib(x), fmt(x.get("median_ms"), ".3f")]


ORDER = 60  # perf/tables/summary.py
TABLES: list[tuple[str, Callable[[Iterable[Info]], list[str]]]] = [
    (STEP_TITLE, step_table),
    (MEMORY_TITLE, memory_table),
]


def table(infos: Iterable[Info]) -> list[str]:
    """Every non-empty table of TABLES under its title; none if no result is of these suites."""
    return titled(TABLES, infos)
