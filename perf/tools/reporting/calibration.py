"""The calibration's tallies (perf/tools/judging/replay.py) as a table: per rule and scenario, the share of
gate runs with a false slower (clean) or the share of planted benchmarks caught, and for the A/B the benchmark
runs its further pairs measure a gate (their cost), for the terminal and, in Markdown, for docs/gate.md."""

from __future__ import annotations

from collections.abc import Sequence

from perf.tables.format import grid
from perf.tools.judging.replay import AB, CLEAN, Tally
from perf.tools.reading import gate_logs
from perf.tools.reading.gate_logs import LiveAB
from perf.tools.reading.run_info import short_names

TITLES = (
    "<rule",
    "<scenario",
    "gates",
    "gates failed",
    "verdicts",
    "slower",
    "<decided by",
    "again a gate",
    "<most often slower",
)


def _share(count: int, total: int) -> str:
    return f"{count / total:.1%} ({count})" if total else "-"


def _cut(name: str, width: int = 48) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _row(tally: Tally, names: dict[str, str]) -> list[str]:
    worst = (
        ", ".join(f"{_cut(names.get(n, n))} {rate:.0%}" for n, rate in tally.worst(2)) if tally.slower else ""
    )
    decided = ", ".join(f"{why} {count}" for why, count in tally.why.most_common())
    failed = _share(tally.failed, tally.gates) if tally.scenario == CLEAN else ""
    return [
        tally.rule,
        tally.scenario,
        str(tally.gates),
        failed,
        str(tally.verdicts),
        _share(tally.slower, tally.verdicts),
        decided,
        f"{tally.again / tally.gates:.1f}" if tally.rule == AB and tally.gates else "",
        worst,
    ]


def table(tallies: Sequence[Tally]) -> list[str]:
    """One row per tally: on clean runs the share of gates with any false slower ('gates failed') and of
    benchmark verdicts; with a plant, the share of the planted benchmarks' verdicts that were slower."""
    names = short_names(n for t in tallies for n in t.judged_by)
    return grid(TITLES, [_row(t, names) for t in tallies])


def markdown(tallies: Sequence[Tally], heading: str) -> str:
    """The same rows as a Markdown table under `heading`."""
    names = short_names(n for t in tallies for n in t.judged_by)
    titles = [t.lstrip("<") for t in TITLES]
    lines = [heading, "", "| " + " | ".join(titles) + " |", "|" + " --- |" * len(titles)]
    lines += ["| " + " | ".join(_row(t, names)) + " |" for t in tallies]
    return "\n".join(lines) + "\n"


def live_summary(done: Sequence[LiveAB]) -> list[str]:
    """The live A/Bs' figures: clean ones that failed (false alarms), planted ones caught, minutes."""
    clean = [d for d in done if d.kind == gate_logs.CLEAN]
    planted = [d for d in done if d.kind == gate_logs.PLANTED]
    lines = []
    if clean:
        failed = sum(d.failed for d in clean)
        lines.append(f"clean A/Bs failed: {failed} of {len(clean)} (false alarms)")
    if planted:
        caught = sum(d.failed for d in planted)
        named = sum(bool(d.kernels) for d in planted if d.failed)
        lines.append(f"planted A/Bs caught: {caught} of {len(planted)}, a kernel named in {named}")
    undecided = sum(d.exit_code not in (0, 1) for d in done)
    if undecided:
        lines.append(f"no verdict: {undecided} (see their logs)")
    if done:
        minutes = sorted(d.seconds / 60 for d in done)
        lines.append(f"minutes an A/B: {minutes[0]:.1f} to {minutes[-1]:.1f}")
    return lines


def live_markdown(done: Sequence[LiveAB], heading: str) -> str:
    """Each live A/B as a row, then the summary."""
    lines = [
        heading,
        "",
        "| A/B | kind | verdict | kernels named | minutes |",
        "| --- | --- | --- | --- | --- |",
    ]
    for d in done:
        kernels = ", ".join(d.kernels) or "-"
        lines.append(f"| {d.number} | {d.kind} | {d.verdict} | {kernels} | {d.seconds / 60:.1f} |")
    return "\n".join([*lines, "", *live_summary(done)]) + "\n"
