"""The gate's verdict in Markdown, for GitHub's job summary (`gate --markdown FILE`, appended to
$GITHUB_STEP_SUMMARY by .github/workflows/gpu-gate.yml): the decision, both runs, the counts and the rule,
each regression with the kernels that moved inside it, and a link to the kept verdict, results and report.
The rest (improvements, host-bound slowdowns, the benchmarks not compared) is counted here and listed in
the terminal verdict and the report.
"""

from __future__ import annotations

from collections.abc import Sequence

from perf.tools.judging.changes import Rule
from perf.tools.judging.outcome import SLOWER, Moved, Outcome
from perf.tools.reading.kernel_changes import HEADER as KERNEL_HEADER
from perf.tools.reading.kernel_changes import busy_time, explanation_rows
from perf.tools.reading.results import Results
from perf.tools.reading.run_info import Side
from perf.tools.reporting.render import Block, Code, Heading, Link, Paragraph, Table, markdown
from perf.tools.reporting.verdict import (
    compared_counts,
    decision,
    extra_infos,
    not_compared_counts,
    rule_text,
)

COLUMNS = ("benchmark", "figure", "base ms", "current ms", "ratio", "threshold", "noise ms", "re-measured")


def _sides(baseline: Side, current: Side) -> Table:
    rows = [
        ["file", Code(baseline.source), Code(current.source)],
        ["commit", baseline.commit or "not recorded", current.commit or "not recorded"],
        ["recorded", baseline.recorded or "not recorded", current.recorded or "not recorded"],
        ["GPU", baseline.gpu, current.gpu],
        ["tier", baseline.tier or "not recorded", current.tier or "not recorded"],
    ]
    return Table(("", "baseline", "current"), rows)


def _regressions(entries: Sequence[Moved]) -> Table:
    """A row per figure that moved, the one that failed first; node ids whole, as pytest takes them. The
    re-measurements' column only where suspects were measured again."""
    rows = []
    for entry in entries:
        for word, change in entry.changes:
            rows.append(
                [
                    Code(entry.name),
                    change.figure if word == SLOWER else f"{change.figure} ({word})",
                    f"{change.baseline.median_s * 1e3:.3f}",
                    f"{change.current.median_s * 1e3:.3f}",
                    f"{change.ratio:.3f}",
                    str(change.threshold),
                    "-" if change.noise_s is None else f"{change.noise_s * 1e3:.3f}",
                    ",".join(f"{r:.3f}" for r in change.remeasured) or "-",
                ]
            )
    if all(row[-1] == "-" for row in rows):
        return Table(COLUMNS[:-1], [row[:-1] for row in rows], numeric=frozenset({2, 3, 4, 6}))
    return Table(COLUMNS, rows, numeric=frozenset({2, 3, 4, 6}))


def _kernels(entries: Sequence[Moved], baseline: Results, current: Results) -> list[Block]:
    """Per regression the kernels whose time per call changed most; each reason there is none, once."""
    before, after = extra_infos(baseline), extra_infos(current)
    blocks: list[Block] = []
    without: dict[str, int] = {}
    for entry in entries:
        old, new = before.get(entry.name), after.get(entry.name)
        rows = explanation_rows(old, new)
        if isinstance(rows, str):
            without[rows] = without.get(rows, 0) + 1
            continue
        blocks.append(Paragraph(f"{entry.name}: {busy_time(old, new)}"))
        blocks.append(
            Table(KERNEL_HEADER, rows, numeric=frozenset(range(3)))
            if rows
            else Paragraph("No kernel's time or launches per call changed.")
        )
    blocks += [Paragraph(f"{n} without a kernel breakdown: {reason}.") for reason, n in without.items()]
    return [Heading(3, "What changed inside the regressions"), *blocks] if blocks else []


def summary(
    outcome: Outcome,
    rule: Rule,
    baseline: Results,
    current: Results,
    sides: tuple[Side, Side],
    notes: Sequence[str] = (),
    link: str | None = None,
) -> str:
    """The Markdown text of the verdict; `link` is where the kept verdict, results and report are."""
    blocks: list[Block] = [
        Heading(2, f"GPU gate — {decision(outcome)}"),
        _sides(*sides),
        Paragraph(f"{compared_counts(outcome)}. Not compared: {not_compared_counts(outcome)}."),
        Paragraph("; ".join([f"Rule: {rule_text(rule)}", *notes]) + "."),
    ]
    if outcome.regressions:
        blocks += [Heading(3, "Regressions"), _regressions(outcome.regressions)]
        blocks += _kernels(outcome.regressions, baseline, current)
    if link:
        kept = "The full verdict, the results and the report against the baseline: "
        blocks.append(Link(kept, "this run's artifacts", link))
    else:
        blocks.append(Paragraph("The full verdict is in the job's log."))
    return markdown(blocks)
