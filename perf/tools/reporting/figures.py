"""Drawing the report's figures: one matplotlib Figure per PNG, its title, legend and file, and the
bars, axes and labels the plots share (perf/tools/reporting/plots.py, and the comparison's ratio plot).

matplotlib is imported on first use, with the Agg backend: files only, no display needed; a Figure of
its own per plot, not pyplot's, so nothing global is kept between reports.
"""

from __future__ import annotations

import importlib.util
import io
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf.storage import write_whole
from perf.tables.format import Info

DPI = 100
MIN_WIDTH = 7.0  # inches: room for the title and legend of a figure of one narrow subplot
# Bars grouped per preset switch to a log axis beyond this spread: 2.7b's step is 50x a small one's.
LOG_SPREAD = 20.0


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
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=DPI)
    write_whole(out / file, image.getvalue())  # an interrupt leaves no half-written plot
    return Plot(file, f"{title}, {subtitle}" if subtitle else title, caption)


def plain_log_y(ax: Any) -> None:
    """A log y axis labelled 20, 50, 100 rather than 2 x 10^1: timings read as numbers."""
    from matplotlib.ticker import LogFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def no_data(ax: Any) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.5")
    ax.tick_params(axis="x", which="both", bottom=False, labelbottom=False)
    if len(ax.get_shared_y_axes().get_siblings(ax)) == 1:
        # A y axis of its own has nothing to read; one shared with its row still labels the others' bars.
        ax.tick_params(axis="y", which="both", left=False, labelleft=False)


def positive(info: Info, key: str, scale: float = 1.0) -> float | None:
    """A figure that can be drawn on a log axis: a finite number above 0, else None (missing, CPU run)."""
    value = info.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value) * scale
    return value if math.isfinite(value) and value > 0 else None


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def value_label(value: float) -> str:
    return f"{value:.0f}" if value >= 1000 else f"{value:.3g}"


def log_scale(series: Iterable[dict[str, dict[str, float]]]) -> bool:
    """One scale for every subplot of a figure: log where its bars span more than LOG_SPREAD."""
    heights = [v for s in series for values in s.values() for v in values.values()]
    return bool(heights) and max(heights) / min(heights) > LOG_SPREAD


def grouped_bars(
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
        ax.bar_label(bars, fmt=value_label, fontsize=6, padding=1)
    ax.set_xticks(range(len(groups)), groups)
    if log:
        plain_log_y(ax)
    ax.margins(y=0.12)


def measured_ticks(ax: Any, values: Iterable[int], label: Callable[[int], str] = str) -> None:
    """A log2 x axis ticked at the measured values, at most 8 of them so that labels stay apart."""
    ax.set_xscale("log", base=2)
    values = sorted(set(values))
    shown = values[:: math.ceil(len(values) / 8)]
    ax.set_xticks(shown, [label(v) for v in shown], rotation=30 if len(shown) > 4 else 0, fontsize=7)
    ax.minorticks_off()
