"""The report's plots (perf/report.py): one PNG per figure, each drawn only where the run has its data.

Each kind picks its results out of the benchmarks' extra_info the way the end-of-run tables do
(perf/*_report.py): by the keys the benchmarks record, or their `suite`. matplotlib is imported on
first use, with the Agg backend: files only, no display needed.
"""

from __future__ import annotations

import importlib.util
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.config import FLOP_MODES, PRESETS
from model.precision import PRECISIONS
from perf import dp_report, precision_report
from perf.attention_report import is_attention_result
from perf.attention_shapes import ATTENTION_MODES, SWEEPS, AttentionShape
from perf.attention_workloads import PROVIDERS
from perf.collective_specs import ALLREDUCE_SUITE
from perf.dp_workloads import BUCKETED, VARIANTS
from perf.dp_workloads import SUITE as DP_SUITE
from perf.report_format import Info, registry_order
from perf.tiers import ALLREDUCE_BACKENDS, MODEL_IMPLS
from perf.transfer_workloads import byte_size_label

DPI = 100
MIN_WIDTH = 7.0  # inches: room for the title and legend of a figure of one narrow subplot
# What perf/test_attention_scaling.py passes as `suite`: naive attention, forward and backward timed together.
SCALING_SUITE = "attention_scaling"
# Bars grouped per preset switch to a log axis beyond this spread: 2.7b's step is 50x a small one's.
LOG_SPREAD = 20.0
# Colours that name the same thing in every figure: a provider, a precision.
PROVIDER_COLORS = {name: f"C{i}" for i, name in enumerate(PROVIDERS)}
PRECISION_COLORS = {name: f"C{i}" for i, name in enumerate(PRECISIONS)}


@dataclass(frozen=True)
class Plot:
    file: str  # the PNG's name in the report's folder
    title: str
    caption: str


# --------------------------------------------------------------------------- drawing
def matplotlib_missing() -> str | None:
    """Why nothing can be drawn here, or None. Checked before any file is written: an environment made
    before matplotlib became a dependency lacks it."""
    if importlib.util.find_spec("matplotlib") is None:
        return "matplotlib is not installed: `make env` installs it with the suite's dependencies"
    return None


def new_figure(
    rows: int, cols: int, width: float = 4.4, height: float = 3.2, sharey: bool | str = False
) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    # A Figure of its own, not pyplot's: nothing global to close, nothing kept between reports.
    figure = Figure(figsize=(max(MIN_WIDTH, width * cols), height * rows + 0.6), layout="constrained")
    return figure, figure.subplots(rows, cols, squeeze=False, sharey=sharey)


def _legend(figure: Any, axes: Any) -> None:
    """One legend for the figure, each label once, below the subplots instead of over a line."""
    labels: dict[str, Any] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            labels.setdefault(label, handle)
    if labels:
        figure.legend(
            labels.values(), labels.keys(), loc="outside lower center", ncols=min(len(labels), 6), fontsize=8
        )


def finish_figure(
    figure: Any, axes: Any, out: Path, file: str, title: str, subtitle: str, caption: str
) -> Plot:
    """Title, legend and file of a figure; the Plot that the report shows it by."""
    figure.suptitle(f"{title}\n{subtitle}" if subtitle else title, fontsize=10)
    _legend(figure, axes)
    figure.savefig(out / file, dpi=DPI)
    return Plot(file, f"{title}, {subtitle}" if subtitle else title, caption)


def _plain_log_y(ax: Any) -> None:
    """A log y axis labelled 20, 50, 100 rather than 2 x 10^1: timings read as numbers."""
    from matplotlib.ticker import LogFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def _no_data(ax: Any) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.5")
    ax.tick_params(axis="x", which="both", bottom=False, labelbottom=False)
    if len(ax.get_shared_y_axes().get_siblings(ax)) == 1:
        # A y axis of its own has nothing to read; one shared with its row still labels the others' bars.
        ax.tick_params(axis="y", which="both", left=False, labelleft=False)


def _positive(info: Info, key: str, scale: float = 1.0) -> float | None:
    """A figure that can be drawn on a log axis: a finite number above 0, else None (missing, CPU run)."""
    value = info.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value) * scale
    return value if math.isfinite(value) and value > 0 else None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def _value_label(value: float) -> str:
    return f"{value:.0f}" if value >= 1000 else f"{value:.3g}"


def _log_scale(series: Iterable[dict[str, dict[str, float]]]) -> bool:
    """One scale for every subplot of a figure: log where its bars span more than LOG_SPREAD."""
    heights = [v for s in series for values in s.values() for v in values.values()]
    return bool(heights) and max(heights) / min(heights) > LOG_SPREAD


def _grouped_bars(
    ax: Any, groups: Sequence[str], series: dict[str, dict[str, float]], colors: dict[str, str], log: bool
) -> None:
    """Bars per group (x) and series (side by side in a group), each labelled with its value."""
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        offset = (i - (len(series) - 1) / 2) * width
        present = [g for g in groups if g in values]
        bars = ax.bar(
            [groups.index(g) + offset for g in present],
            [values[g] for g in present],
            width,
            label=label,
            color=colors.get(label),
        )
        ax.bar_label(bars, fmt=_value_label, fontsize=6, padding=1)
    ax.set_xticks(range(len(groups)), groups)
    if log:
        _plain_log_y(ax)
    ax.margins(y=0.12)


def _measured_ticks(ax: Any, values: Iterable[int], label: Callable[[int], str] = str) -> None:
    """A log2 x axis ticked at the measured values, at most 8 of them so that labels stay apart."""
    ax.set_xscale("log", base=2)
    values = sorted(set(values))
    shown = values[:: math.ceil(len(values) / 8)]
    ax.set_xticks(shown, [label(v) for v in shown], rotation=30 if len(shown) > 4 else 0, fontsize=7)
    ax.minorticks_off()


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
    for provider in sorted({p.provider for p in cell}, key=lambda x: registry_order(x, PROVIDERS)):
        line = sorted((p for p in cell if p.provider == provider), key=lambda p: p.shape.seq)
        values = [_positive(p.info, metric.key, metric.scale) for p in line]
        color = PROVIDER_COLORS.get(provider)
        ax.plot([p.shape.seq for p in line], values, marker="o", label=provider, color=color)
    _measured_ticks(ax, (p.shape.seq for p in cell))
    if metric.log_y:
        _plain_log_y(ax)
    ax.set_xlabel("sequence length", fontsize=8)
    ax.set_ylabel(metric.label, fontsize=8)
    ax.grid(True, which="both", alpha=0.3)


def _attention_figure(points: Sequence[AttentionPoint], metric: Metric, out: Path) -> Plot | None:
    """Rows: modes; columns: head dim and masking; only for a metric that some point has."""
    drawn = [p for p in points if _positive(p.info, metric.key, metric.scale) is not None]
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
                _no_data(ax)
    family, dtype = points[0].family, points[0].dtype
    file = f"attention_{metric.name}_{_slug(family.split(' ', 1)[1])}_{_slug(dtype)}.png"
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
    # perf/test_end_to_end.py records no `suite`. Its interleaved comparison with the reference model
    # (baseline_median_ms) times a different thing: rounds alternating with the reference's.
    return (
        info.get("suite") is None
        and info.get("mode") in FLOP_MODES
        and all(key in info for key in ("preset", "impl", "context", "precision"))
        and "baseline_median_ms" not in info
        and _positive(info, "median_ms") is not None
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
    log = _log_scale(panels.values())
    # One y axis per row: the implementations of a mode side by side, comparable by eye.
    figure, axes = new_figure(len(modes), len(impls), width=max(4.4, 1.4 * len(presets)), sharey="row")
    for row, mode in enumerate(modes):
        for col, impl in enumerate(impls):
            ax = axes[row][col]
            ax.set_title(f"{mode}, {impl}", fontsize=9)
            if (mode, impl) in panels:
                _grouped_bars(ax, presets, panels[mode, impl], PRECISION_COLORS, log)
            else:
                _no_data(ax)
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
    results = precision_report.results_of("step_precision", infos)
    results = [x for x in results if _positive(x, "median_ms") is not None]
    if not results:
        return []
    contexts = sorted({x["context"] for x in results})
    presets = _presets(results)
    panels = _precision_bars(results, lambda x: x["context"])
    log = _log_scale(panels.values())
    figure, axes = new_figure(1, len(contexts), width=max(4.4, 1.4 * len(presets)))
    for col, context in enumerate(contexts):
        ax = axes[0][col]
        _grouped_bars(ax, presets, panels[context], PRECISION_COLORS, log)
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
        and _positive(x, "busbw_gbps") is not None
        and _positive(x, "median_ms") is not None
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
        _measured_ticks(ax, (x["size_bytes"] for x in results), byte_size_label)
        ax.set_xlabel("message size (fp32)", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    bandwidth.set_ylabel("bus bandwidth (GB/s)", fontsize=8)
    bandwidth.set_title("busbw = algbw * 2 (n-1) / n", fontsize=9)
    _plain_log_y(time)
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
    results = [x for x in dp_report.results_of(DP_SUITE, infos) if _positive(x, "median_ms") is not None]
    if not results:
        return []
    setups: dict[tuple, list[Info]] = {}
    for x in sorted(results, key=lambda x: (dp_report.setup_order(x), _dp_order(x))):
        setups.setdefault(dp_report.setup_key(x), []).append(x)
    columns = min(2, len(setups))
    rows = math.ceil(len(setups) / columns)
    widest = max(map(len, setups.values()))
    figure, axes = new_figure(rows, columns, width=max(5.0, 0.9 * widest), height=3.8)
    for ax in list(axes.flat)[len(setups) :]:
        ax.set_visible(False)
    for ax, variants in zip(axes.flat, setups.values(), strict=False):
        _data_parallel_bars(ax, variants)
        ax.set_title(dp_report.setup_line(variants[0]), fontsize=8)
    title = "data parallel: training step per variant and bucket size, communication's share"
    caption = (
        "Each bar is a variant's median step; its upper part is what it takes beyond one GPU alone "
        "('single'), labelled with that share of the step. bucketed: DDPBucketed with the bucket size shown."
    )
    return [finish_figure(figure, axes, out, "data_parallel.png", title, "", caption)]


def _data_parallel_bars(ax: Any, variants: Sequence[Info]) -> None:
    labels = [dp_report.variant_label(x) for x in variants]
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
