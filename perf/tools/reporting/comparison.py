"""The report's part against a baseline: every benchmark of both runs judged by the gate's rule on its wall
time and its GPU busy time (perf/tools/judging/changes.py, the noise file's GPU-time thresholds included) and
put in one category by the gate's own classification (perf/tools/judging/outcome.py), so that the report and
the gate count the same pair of files alike; as a table and a plot of the ratios."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf.tools.judging import changes
from perf.tools.judging.changes import Rule, gpu_missing_reason
from perf.tools.judging.outcome import FASTER, SLOWER, UNCHANGED, Outcome, classify
from perf.tools.judging.regression_rule import CLOCK_MOVED, HOST_BOUND_SLOWER, HOST_NOISE
from perf.tools.reading.kernel_changes import HEADER as KERNEL_HEADER
from perf.tools.reading.kernel_changes import explanation_rows
from perf.tools.reading.results import Results
from perf.tools.reading.timings import GPU, HOST_BOUND_SHARE, WALL, Timing
from perf.tools.reporting.figures import Plot, finish_figure, new_figure
from perf.tools.reporting.render import Block, Code, Heading, Image, Paragraph, Table
from perf.tools.reporting.verdict import extra_infos, not_compared, not_compared_counts

# The ratio plot shows at most this many benchmarks: the slowest and the fastest half each.
MAX_RATIO_ROWS = 60
RATIO_TICKS = (0.1, 0.2, 0.33, 0.5, 0.67, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2, 3, 5, 10)
VERDICT_COLORS = {SLOWER: "tab:red", FASTER: "tab:green", UNCHANGED: "0.6"}
COLUMNS = ("benchmark", "baseline ms", "current ms", "ratio", "base GPU ms", "GPU ms", "GPU ratio", "verdict")


@dataclass(frozen=True)
class Compared:
    name: str  # node id
    baseline: dict[str, Timing]  # per figure: 'wall' always, 'gpu' where recorded
    current: dict[str, Timing]
    verdicts: dict[str, str]  # per figure both runs have: its verdict (outcome's words) or 'unchanged'
    category: str  # the benchmark's one category (outcome.PRECEDENCE), or 'unchanged'
    gpu_missing: str | None  # why the GPU times were not compared; None when they were
    # The benchmark's extra_info in each run: its kernel tables explain a change.
    infos: tuple[Any, Any] = (None, None)

    def ratio(self, figure: str = WALL) -> float | None:
        if figure not in self.verdicts:
            return None
        return self.current[figure].median_s / self.baseline[figure].median_s

    @property
    def verdict(self) -> str:
        """'slower (gpu)', 'host-bound slower (wall)', 'unchanged', ...: the category and its figures."""
        figures = [figure for figure, word in self.verdicts.items() if word == self.category]
        return f"{self.category} ({', '.join(figures)})" if self.category != UNCHANGED else UNCHANGED

    @property
    def word(self) -> str:
        """The category, the HTML row's class."""
        return self.category


@dataclass(frozen=True)
class Comparison:
    rows: list[Compared]  # the largest ratio of either figure (the slowest) first
    outcome: Outcome  # the counts, new and missing benchmarks, as the gate has them
    rule: Rule
    notes: list[str]  # which GPU-time thresholds applied (perf/tools/noise.py)


def compare(baseline: Results, current: Results, rule: Rule, notes: Sequence[str] = ()) -> Comparison:
    """Every benchmark of both runs, judged and counted as the gate judges and counts them on two stored
    files (--current): every suspect a regression, as nothing is measured again."""
    found = changes.compare(baseline, current, rule, remeasurable=False)
    outcome = classify(found, found.suspects, [], baseline, current, own_run=False)
    words, categories = {}, {}
    for entries in outcome.moved.values():
        for entry in entries:
            categories[entry.name] = entry.category
            words |= {(entry.name, change.figure): word for word, change in entry.changes}
    before, after = extra_infos(baseline), extra_infos(current)
    rows = []
    for name in current.timings:
        if name in baseline.timings:
            old, new = baseline.figures(name), current.figures(name)
            verdicts = {f: words.get((name, f), UNCHANGED) for f in (WALL, GPU) if f in old and f in new}
            category = categories.get(name, UNCHANGED)
            missing = gpu_missing_reason(baseline, current, name)
            rows.append(
                Compared(name, old, new, verdicts, category, missing, (before.get(name), after.get(name)))
            )
    rows.sort(key=lambda row: -max(r for r in (row.ratio(WALL), row.ratio(GPU)) if r))
    return Comparison(rows, outcome, rule, list(notes))


def explained_blocks(rows: Sequence[Compared]) -> list[Block]:
    """What changed inside each benchmark that moved: its kernels whose GPU time per call changed most."""
    moved = [r for r in rows if r.word != "unchanged"]
    if not moved:
        return []
    blocks: list[Block] = [
        Heading(3, "What changed inside"),
        Paragraph(
            "Per benchmark that moved, the kernels whose GPU time per call changed most (extra_info "
            "gpu_kernels: launches and microseconds per call of its profiled calls); '-' where a kernel "
            "is not among that run's 20 costliest."
        ),
    ]
    for row in moved:
        found = explanation_rows(*row.infos)
        blocks.append(Paragraph(f"{row.name.removeprefix('perf/')}: {row.verdict}"))
        if isinstance(found, str):
            blocks.append(Paragraph(f"No kernel breakdown: {found}."))
        elif found:
            blocks.append(Table(KERNEL_HEADER, found, numeric=frozenset(range(0, 3))))
        else:
            blocks.append(Paragraph("No kernel's time or launches per call changed."))
    return blocks


def shown(fullname: str) -> Code:
    return Code(fullname.removeprefix("perf/"))


def _ms(timings: dict[str, Timing], figure: str) -> str:
    return f"{timings[figure].median_s * 1e3:.4g}" if figure in timings else "-"


def _ratio(row: Compared, figure: str) -> str:
    ratio = row.ratio(figure)
    return "-" if ratio is None else f"{ratio:.3f}"


# The categories in the order the report counts them.
COUNTED = (SLOWER, FASTER, UNCHANGED, HOST_BOUND_SLOWER, HOST_NOISE, CLOCK_MOVED)


def _counts(comparison: Comparison) -> str:
    outcome, rule = comparison.outcome, comparison.rule
    counted = ", ".join(f"{outcome.count(c)} {c}" for c in COUNTED)
    wall_only = sum(map(len, outcome.wall_only.values()))
    return (
        f"{outcome.compared} benchmarks in both runs: {counted}; not compared: "
        f"{not_compared_counts(outcome)}; {wall_only} judged on wall time alone (no GPU time in one of "
        "the runs). Each benchmark is counted once, as the gate counts it (python -m perf.tools.gate "
        "--baseline BASELINE --current RESULT gives the same numbers, 'slower' being its regressions): "
        "slower where either figure is, else host-bound slower, clock moved, faster, unchanged. Each "
        "benchmark is judged on two figures: its wall time (the median of its timed rounds) and its GPU "
        "busy time (the median time one call kept the GPU busy, which the host's speed does not move). "
        "Ratio: current / baseline (above 1: slower). Slower or faster: by more than "
        f"{rule.threshold:.0%} (the GPU time: its own threshold where the runner's noise file gives one) "
        f"and by more than {rule.z:g} standard errors of the two medians, each from its run's own rounds "
        "or calls; the gate also measures suspects again (a report can't). Host-bound slower: host-bound "
        f"in the baseline (one call keeps the host busy for at least {HOST_BOUND_SHARE:.0%} of its time, "
        "so its wall time follows the host's CPU) and slower in wall time, but by less than the host-bound "
        f"threshold ({rule.host_threshold:.0%}): listed, never failing. {' '.join(comparison.notes)}"
    ).rstrip()


def comparison_blocks(comparison: Comparison, out: Path) -> list[Block]:
    blocks: list[Block] = [
        Heading(2, "Against the baseline"),
        Paragraph(_counts(comparison)),
        Table(
            COLUMNS,
            [
                [
                    shown(r.name),
                    _ms(r.baseline, WALL),
                    _ms(r.current, WALL),
                    _ratio(r, WALL),
                    _ms(r.baseline, GPU),
                    _ms(r.current, GPU),
                    _ratio(r, GPU),
                    r.verdict,
                ]
                for r in comparison.rows
            ],
            numeric=frozenset(range(1, 7)),
            marks=[r.word if r.word != UNCHANGED else "" for r in comparison.rows],
        ),
    ]
    plot = ratio_plot(comparison.rows, out)
    if plot is not None:
        blocks += [Paragraph(plot.caption), Image(plot.file, plot.title)]
    blocks += explained_blocks(comparison.rows)
    outcome = comparison.outcome
    if outcome.new:
        blocks += [
            Heading(3, "New (not in the baseline)"),
            Table(("benchmark",), [[shown(name)] for name in outcome.new]),
        ]
    absent = [(what, why, names) for kind, what, why, names in not_compared(outcome) if kind == "missing"]
    if absent:
        rows = [
            [shown(name), f"{what.split(' ', 1)[1]}: {why}"] for what, why, found in absent for name in found
        ]
        blocks += [Heading(3, "Not in the result (in the baseline only)"), Table(("benchmark", "why"), rows)]
    return blocks


# --------------------------------------------------------------------------- the plot
def _color(verdict: str | None) -> str:
    return VERDICT_COLORS.get(verdict or UNCHANGED, VERDICT_COLORS[UNCHANGED])


def _ratio_bars(ax: Any, shown_rows: Sequence[Compared]) -> None:
    """Per benchmark a bar from 1 to its wall ratio and, hatched beside it, one to its GPU ratio."""
    all_ratios = []
    for figure, offset, hatch in ((WALL, -0.2, None), (GPU, 0.2, "///")):
        rows = [(i, r) for i, r in enumerate(shown_rows) if r.ratio(figure) is not None]
        if not rows:
            continue
        ratios = [r.ratio(figure) for _, r in rows]
        all_ratios += ratios
        bars = ax.barh(
            [i + offset for i, _ in rows],
            [ratio - 1 for ratio in ratios],
            left=1,
            height=0.4,
            color=[_color(r.verdicts[figure]) for _, r in rows],
            hatch=hatch,
            edgecolor="white" if hatch else None,
            label="GPU busy time" if figure == GPU else "wall time",
        )
        ax.bar_label(bars, [f"{ratio:.2f}" for ratio in ratios], fontsize=5, padding=2)
    positions = range(len(shown_rows))
    ax.set_yticks(positions, [shown(r.name) for r in shown_rows], fontsize=6)
    ax.invert_yaxis()  # the slowest at the top, as in the table
    ax.axvline(1, color="black", linewidth=0.8)
    ax.set_xscale("log")  # 0.5 and 2 the same distance from 1
    low, high = min(0.9, *all_ratios) / 1.1, max(1.1, *all_ratios) * 1.1
    ax.set_xlim(low, high)
    ticks = [t for t in RATIO_TICKS if low <= t <= high]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks], fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel("current / baseline (above 1: slower)", fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)


def ratio_plot(rows: Sequence[Compared], out: Path) -> Plot | None:
    """Current / baseline per benchmark and figure (`rows` sorted slowest first), bars from 1."""
    if not rows:
        return None
    shown_rows = list(rows)
    left_out = len(shown_rows) - MAX_RATIO_ROWS
    if left_out > 0:
        half = MAX_RATIO_ROWS // 2
        shown_rows = shown_rows[:half] + shown_rows[-half:]
    figure, axes = new_figure(1, 1, width=9.0, height=1.0 + 0.3 * len(shown_rows))
    _ratio_bars(axes[0][0], shown_rows)
    caption = (
        "Per benchmark, wall time (plain) and GPU busy time (hatched, where both runs have it). Red: "
        "slower, green: faster (beyond the threshold and the noise), grey: unchanged."
    )
    if left_out > 0:
        caption += f" The {MAX_RATIO_ROWS // 2} slowest and fastest; {left_out} in between left out."
    title = "current against baseline: ratio of medians"
    return finish_figure(figure, axes, out, "baseline_ratios.png", title, "", caption)
