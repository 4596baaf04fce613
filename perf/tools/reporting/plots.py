"""The report's plots: one PNG per figure, each drawn only where the run has its data.

Each kind picks its results out of the benchmarks' extra_info the way the end-of-run tables do
(perf/tables/): by the keys the benchmarks record, or their `suite`. The figures are drawn with
perf/tools/reporting/figures.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.config import FLOP_MODES, PRESETS
from model.precision import PRECISIONS
from perf.cases.attention import ATTENTION_MODES, PROVIDER_NAMES, SCALING_SUITE, SWEEPS, AttentionShape
from perf.cases.collectives import ALLREDUCE_BACKENDS, ALLREDUCE_SUITE
from perf.cases.data_parallel import BUCKETED, VARIANTS
from perf.cases.data_parallel import SUITE as DP_SUITE
from perf.cases.model import MODEL_IMPLS
from perf.cases.transfer import byte_size_label
from perf.tables import data_parallel, precision
from perf.tables.attention import is_attention_result
from perf.tables.format import Info, registry_order
from perf.tools.reporting.figures import (
    Plot,
    finish_figure,
    grouped_bars,
    log_scale,
    measured_ticks,
    new_figure,
    no_data,
    plain_log_y,
    positive,
    slug,
)

# Colours that name the same thing in every figure: a provider, a precision.
PROVIDER_COLORS = {name: f"C{i}" for i, name in enumerate(PROVIDER_NAMES)}
PRECISION_COLORS = {name: f"C{i}" for i, name in enumerate(PRECISIONS)}


# --------------------------------------------------------------------------- attention
@dataclass(frozen=True)
class Metric:
    name: str  # in the file name
    key: str  # in extra_info
    label: str
    log_y: bool
    scale: float = 1.0
    caption: str = ""


ATTENTION_METRICS = (
    Metric("time", "median_ms", "median time (ms)", log_y=True),
    Metric(
        "memory",
        "peak_memory_bytes",
        "peak memory (GiB)",
        log_y=True,
        scale=2**-30,
        caption="Peak memory: the most allocated at once during the timed rounds (inputs included).",
    ),
    Metric(
        "tflops",
        "tflops",
        "TFLOP/s",
        log_y=False,
        caption="TFLOP/s: useful matmul work per second; a causal score matrix counts half, whatever a "
        "provider computes.",
    ),
)


@dataclass(frozen=True)
class AttentionPoint:
    family: str  # the sweep the shape belongs to: the shapes one line joins
    mode: str
    dtype: str
    provider: str
    shape: AttentionShape
    info: Info


def _shape(info: Info) -> AttentionShape:
    return AttentionShape(info["batch"], info["heads"], info["seq"], info["head_dim"], bool(info["causal"]))


def _families(shape: AttentionShape) -> list[str]:
    """The named sweeps holding the shape (a shape can sit in two); a shape of none gets its batch and heads.

    A line must join shapes that differ in their sequence length only as the sweep intends (fixed_tokens
    shrinks the batch as the sequence grows), never points of two sweeps.
    """
    names = [f"sweep {name}" for name, shapes in SWEEPS.items() if shape in shapes]
    return names or [f"shapes batch {shape.batch}, {shape.heads} heads"]


def _is_scaling_result(info: Info) -> bool:
    keys = ("provider", "batch", "heads", "seq", "head_dim", "causal", "dtype", "median_ms")
    return info.get("suite") == SCALING_SUITE and all(info.get(key) is not None for key in keys)


def attention_points(infos: Iterable[Info]) -> list[AttentionPoint]:
    points = []
    for info in infos:
        if is_attention_result(info):
            families, mode = _families(_shape(info)), info["mode"]
        elif _is_scaling_result(info):
            # Its own family: the same shape may also run in test_attention, measured differently.
            families, mode = [f"suite {SCALING_SUITE}"], "forward_backward"
        else:
            continue
        for family in families:
            points.append(AttentionPoint(family, mode, info["dtype"], info["provider"], _shape(info), info))
    return _without_covered_families(points)


def _without_covered_families(points: list[AttentionPoint]) -> list[AttentionPoint]:
    """Points less the families whose every shape another family shows too.

    The default tier runs fixed_tokens only, yet one of its shapes also belongs to the scaling sweep: a
    scaling figure of that one point would repeat it, and suggest that sweep ran.
    """
    shapes: dict[str, set[AttentionShape]] = {}
    for point in points:
        shapes.setdefault(point.family, set()).add(point.shape)
    covered = set()
    for family, own in shapes.items():
        others = set().union(*(s for f, s in shapes.items() if f != family and f not in covered))
        if own <= others:
            covered.add(family)
    return [point for point in points if point.family not in covered]


def _held(points: Sequence[AttentionPoint]) -> str:
    """What the shapes of a figure keep constant as the sequence grows, e.g. 'batch x seq = 16384'."""
    shapes = [p.shape for p in points]
    parts = []
    for name, values in (("batch", {s.batch for s in shapes}), ("heads", {s.heads for s in shapes})):
        if len(values) == 1:
            parts.append(f"{name} {values.pop()}")
    if len({s.batch * s.seq for s in shapes}) == 1 and len({s.batch for s in shapes}) > 1:
        parts.append(f"batch x seq = {shapes[0].batch * shapes[0].seq}")
    if len({s.heads * s.head_dim for s in shapes}) == 1 and len({s.heads for s in shapes}) > 1:
        parts.append(f"heads x head dim = {shapes[0].heads * shapes[0].head_dim}")
    return ", ".join(parts)


def _attention_cell(ax: Any, cell: Sequence[AttentionPoint], metric: Metric) -> None:
    """A line per provider through its points of one mode, head dim and masking."""
    for provider in sorted({p.provider for p in cell}, key=lambda x: registry_order(x, PROVIDER_NAMES)):
        line = sorted((p for p in cell if p.provider == provider), key=lambda p: p.shape.seq)
        values = [positive(p.info, metric.key, metric.scale) for p in line]
        color = PROVIDER_COLORS.get(provider)
        ax.plot([p.shape.seq for p in line], values, marker="o", label=provider, color=color)
    measured_ticks(ax, (p.shape.seq for p in cell))
    if metric.log_y:
        plain_log_y(ax)
    ax.set_xlabel("sequence length", fontsize=8)
    ax.set_ylabel(metric.label, fontsize=8)
    ax.grid(True, which="both", alpha=0.3)


def _attention_figure(points: Sequence[AttentionPoint], metric: Metric, out: Path) -> Plot | None:
    """Rows: modes; columns: head dim and masking; only for a metric that some point has."""
    drawn = [p for p in points if positive(p.info, metric.key, metric.scale) is not None]
    if not drawn:
        return None
    modes = sorted({p.mode for p in points}, key=lambda m: registry_order(m, ATTENTION_MODES))
    columns = sorted({(p.shape.head_dim, p.shape.causal) for p in points})
    figure, axes = new_figure(len(modes), len(columns))
    for row, mode in enumerate(modes):
        for col, (head_dim, causal) in enumerate(columns):
            ax = axes[row][col]
            ax.set_title(f"{mode}, head dim {head_dim}, {'causal' if causal else 'full'}", fontsize=9)
            cell = [
                p for p in drawn if (p.mode, p.shape.head_dim, p.shape.causal) == (mode, head_dim, causal)
            ]
            if cell:
                _attention_cell(ax, cell, metric)
            else:
                no_data(ax)
    family, dtype = points[0].family, points[0].dtype
    file = f"attention_{metric.name}_{slug(family.split(' ', 1)[1])}_{slug(dtype)}.png"
    title = f"attention: {metric.label} against sequence length"
    held = _held(points)
    subtitle = f"{family} ({held}), {dtype}" if held else f"{family}, {dtype}"
    caption = "One line per provider; rows: mode; columns: head dim and masking. " + metric.caption
    return finish_figure(figure, axes, out, file, title, subtitle, caption.strip())


def attention_plots(infos: Iterable[Info], out: Path) -> list[Plot]:
    """Per sweep and dtype: time, peak memory and TFLOP/s against the sequence length, per provider."""
    figures: dict[tuple[str, str], list[AttentionPoint]] = {}
    for point in attention_points(infos):
        figures.setdefault((point.family, point.dtype), []).append(point)
    plots = []
    for points in figures.values():
        for metric in ATTENTION_METRICS:
            plot = _attention_figure(points, metric, out)
            if plot is not None:
                plots.append(plot)
    return plots


# --------------------------------------------------------------------------- end to end
def _is_end_to_end(info: Info) -> bool:
    # perf/test_end_to_end.py's results record suite "end_to_end" (older ones none). Its interleaved
    # comparison with the reference model (baseline_median_ms) times a different thing: rounds alternating
    # with the reference's.
    return (
        info.get("suite") in (None, "end_to_end")
        and info.get("mode") in FLOP_MODES
        and all(key in info for key in ("preset", "impl", "context", "precision"))
        and "baseline_median_ms" not in info
        and positive(info, "median_ms") is not None
    )


def _steady(infos: Iterable[Info]) -> dict[tuple, Info]:
    """One result per (context, mode, impl, preset, precision): the one with the most warm-up steps.

    The full tier runs warm-ups 0, 1, 2, 5 to show what the first steps cost; the bars show the steady step.
    """
    chosen: dict[tuple, Info] = {}
    for info in filter(_is_end_to_end, infos):
        key = (info["context"], info["mode"], info["impl"], info["preset"], info["precision"])
        kept = chosen.get(key)
        if kept is None or (info.get("warmup_steps") or 0) > (kept.get("warmup_steps") or 0):
            chosen[key] = info
    return chosen


def _precision_bars(
    results: Iterable[Info], panel: Callable[[Info], Any]
) -> dict[Any, dict[str, dict[str, float]]]:
    """{panel: {precision: {preset: median ms}}}, the precisions (the bars) in the registry's order."""
    panels: dict[Any, dict[str, dict[str, float]]] = {}
    for x in sorted(results, key=lambda x: registry_order(x["precision"], PRECISIONS)):
        panels.setdefault(panel(x), {}).setdefault(x["precision"], {})[x["preset"]] = x["median_ms"]
    return panels


def _presets(results: Iterable[Info]) -> list[str]:
    return sorted({x["preset"] for x in results}, key=lambda p: registry_order(p, PRESETS))


def _end_to_end_figure(context: int, results: Sequence[Info], out: Path) -> Plot:
    modes = sorted({x["mode"] for x in results}, key=lambda m: registry_order(m, FLOP_MODES))
    impls = sorted({x["impl"] for x in results}, key=lambda i: registry_order(i, MODEL_IMPLS))
    presets = _presets(results)
    panels = _precision_bars(results, lambda x: (x["mode"], x["impl"]))
    log = log_scale(panels.values())
    # One y axis per row: the implementations of a mode side by side, comparable by eye.
    figure, axes = new_figure(len(modes), len(impls), width=max(4.4, 1.4 * len(presets)), sharey="row")
    for row, mode in enumerate(modes):
        for col, impl in enumerate(impls):
            ax = axes[row][col]
            ax.set_title(f"{mode}, {impl}", fontsize=9)
            if (mode, impl) in panels:
                grouped_bars(ax, presets, panels[mode, impl], PRECISION_COLORS, log)
            else:
                no_data(ax)
            if col == 0:
                ax.set_ylabel("median ms", fontsize=8)
            else:  # the row's axis is labelled once, on its left
                ax.tick_params(axis="y", which="both", labelleft=False)
    warmups = sorted({x.get("warmup_steps") for x in results} - {None})
    caption = (
        "Rows: mode (forward; forward and backward; training step); columns: model implementation; "
        "groups: preset; bars: precision. Each case with the most warm-up steps it ran with"
        + (f" ({', '.join(map(str, warmups))})." if warmups else ".")
    )
    title = "end to end: median step per preset and precision"
    file = f"end_to_end_ctx{context}.png"
    return finish_figure(figure, axes, out, file, title, f"context {context}", caption)


def end_to_end_plots(infos: Iterable[Info], out: Path) -> list[Plot]:
    """Per context length: step time per preset (groups) and precision (bars), a subplot per mode and impl."""
    chosen = list(_steady(infos).values())
    contexts = sorted({x["context"] for x in chosen})
    return [_end_to_end_figure(c, [x for x in chosen if x["context"] == c], out) for c in contexts]


def step_precision_plots(infos: Iterable[Info], out: Path) -> list[Plot]:
    """perf/test_mixed_precision.py's training step per preset and precision, a subplot per context."""
    results = precision.results_of("step_precision", infos)
    results = [x for x in results if positive(x, "median_ms") is not None]
    if not results:
        return []
    contexts = sorted({x["context"] for x in results})
    presets = _presets(results)
    panels = _precision_bars(results, lambda x: x["context"])
    log = log_scale(panels.values())
    figure, axes = new_figure(1, len(contexts), width=max(4.4, 1.4 * len(presets)))
    for col, context in enumerate(contexts):
        ax = axes[0][col]
        grouped_bars(ax, presets, panels[context], PRECISION_COLORS, log)
        ax.set_title(f"context {context}", fontsize=9)
        ax.set_ylabel("median ms", fontsize=8)
    title = "mixed precision: training step per preset and precision"
    caption = "Bars: precision (autocast with fp32 weights); groups: preset."
    return [finish_figure(figure, axes, out, "step_precision.png", title, "", caption)]


# --------------------------------------------------------------------------- all-reduce
def _is_allreduce_result(x: Info) -> bool:
    return (
        x.get("suite") == ALLREDUCE_SUITE
        and all(key in x for key in ("backend", "world_size", "size_bytes"))
        and positive(x, "busbw_gbps") is not None
        and positive(x, "median_ms") is not None
    )


def allreduce_plots(infos: Iterable[Info], out: Path) -> list[Plot]:
    """Bus bandwidth and time against the message size, a line per backend and world size."""
    results = sorted(
        filter(_is_allreduce_result, infos),
        key=lambda x: (registry_order(x["backend"], ALLREDUCE_BACKENDS), x["world_size"], x["size_bytes"]),
    )
    if not results:
        return []
    lines: dict[tuple[str, int], list[Info]] = {}
    for x in results:
        lines.setdefault((x["backend"], x["world_size"]), []).append(x)
    figure, axes = new_figure(1, 2, width=5.2, height=3.8)
    bandwidth, time = axes[0]
    for (backend, world_size), line in lines.items():
        sizes = [x["size_bytes"] for x in line]
        label = f"{backend}, {world_size} ranks"
        bandwidth.plot(sizes, [x["busbw_gbps"] for x in line], marker="o", label=label)
        time.plot(sizes, [x["median_ms"] for x in line], marker="o", label=label)
    for ax in (bandwidth, time):
        measured_ticks(ax, (x["size_bytes"] for x in results), byte_size_label)
        ax.set_xlabel("message size (fp32)", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    bandwidth.set_ylabel("bus bandwidth (GB/s)", fontsize=8)
    bandwidth.set_title("busbw = algbw * 2 (n-1) / n", fontsize=9)
    plain_log_y(time)
    time.set_ylabel("median ms", fontsize=8)
    time.set_title("time per all-reduce", fontsize=9)
    title = "all-reduce: bus bandwidth against message size"
    caption = (
        "A line per backend and world size. Bus bandwidth is comparable across world sizes (as nccl-tests "
        "reports it); small messages are bound by latency, large ones by the links."
    )
    return [finish_figure(figure, axes, out, "allreduce_busbw.png", title, "", caption)]


# --------------------------------------------------------------------------- data parallel
def _dp_order(x: Info) -> tuple:
    return (registry_order(x["variant"], (*VARIANTS, BUCKETED)), x.get("bucket_size_mb") or 0.0)


def data_parallel_plots(infos: Iterable[Info], out: Path) -> list[Plot]:
    """Per setup: the step of each variant, split into one GPU's step and what data parallelism adds."""
    results = [x for x in data_parallel.results_of(DP_SUITE, infos) if positive(x, "median_ms") is not None]
    if not results:
        return []
    setups: dict[tuple, list[Info]] = {}
    for x in sorted(results, key=lambda x: (data_parallel.setup_order(x), _dp_order(x))):
        setups.setdefault(data_parallel.setup_key(x), []).append(x)
    columns = min(2, len(setups))
    rows = math.ceil(len(setups) / columns)
    widest = max(map(len, setups.values()))
    figure, axes = new_figure(rows, columns, width=max(5.0, 0.9 * widest), height=3.8)
    for ax in list(axes.flat)[len(setups) :]:
        ax.set_visible(False)
    for ax, variants in zip(axes.flat, setups.values(), strict=False):
        _data_parallel_bars(ax, variants)
        ax.set_title(data_parallel.setup_line(variants[0]), fontsize=8)
    title = "data parallel: training step per variant and bucket size, communication's share"
    caption = (
        "Each bar is a variant's median step; its upper part is what it takes beyond one GPU alone "
        "('single'), labelled with that share of the step. bucketed: DDPBucketed with the bucket size shown."
    )
    return [finish_figure(figure, axes, out, "data_parallel.png", title, "", caption)]


def _data_parallel_bars(ax: Any, variants: Sequence[Info]) -> None:
    labels = [data_parallel.variant_label(x) for x in variants]
    medians = [x["median_ms"] for x in variants]
    overheads = [x.get("comm_overhead_ms") for x in variants]
    # An overhead below 0 (a variant as fast as one GPU, within noise) draws no upper part.
    added = [max(0.0, o) if isinstance(o, int | float) else 0.0 for o in overheads]
    base = [m - a for m, a in zip(medians, added, strict=True)]
    positions = range(len(variants))
    ax.bar(positions, base, 0.7, color="C0", label="one GPU's step (single)")
    bars = ax.bar(positions, added, 0.7, bottom=base, color="C3", label="added by data parallelism")
    shares = [x.get("comm_share") for x in variants]
    ax.bar_label(bars, [f"{s:.0%}" if isinstance(s, int | float) else "" for s in shares], fontsize=7)
    ax.set_xticks(positions, labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("median step ms", fontsize=8)
    ax.margins(y=0.12)


# --------------------------------------------------------------------------- all of them
PLOT_KINDS = (
    attention_plots,
    end_to_end_plots,
    step_precision_plots,
    allreduce_plots,
    data_parallel_plots,
)


def make_plots(infos: Sequence[Info], out: Path) -> list[Plot]:
    """Every plot the results have data for, written into `out`; in the order the report shows them."""
    return [plot for kind in PLOT_KINDS for plot in kind(infos, out)]
