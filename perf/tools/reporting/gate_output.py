"""What the gate shows once it has judged: both runs described (perf/tools/reading/run_info.py), the notes
on where its thresholds came from, the verdict printed (verdict.py) and, where asked, its Markdown summary
for GitHub's job summary written whole (verdict_markdown.py)."""

from __future__ import annotations

from pathlib import Path

from perf.storage import recorded_on_cpu, write_whole
from perf.tools.judging.changes import Rule
from perf.tools.judging.noise_thresholds import NoiseThresholds
from perf.tools.judging.outcome import Outcome
from perf.tools.reading.errors import GateError
from perf.tools.reading.results import Results
from perf.tools.reading.run_info import describe
from perf.tools.reporting.verdict import report
from perf.tools.reporting.verdict_markdown import summary

# What a CPU run's figures are, said beside its verdict: the cpu tier checks that every suite runs.
CPU_NOTE = (
    "CPU run: not a measurement; the cpu tier checks that every suite runs, at small sizes and few rounds, "
    "so its slower and faster say nothing of a GPU"
)


def show(
    outcome: Outcome,
    rule: Rule,
    baseline: Results,
    current: Results,
    sources: tuple[str, str],
    thresholds: NoiseThresholds,
    listing: frozenset[str] = frozenset(),
    markdown_file: Path | None = None,
    link: str | None = None,
) -> None:
    """Print the verdict on `current` against `baseline` (`sources` names where each came from); write its
    Markdown summary to `markdown_file` where given, with `link` to where the kept files are."""
    sides = (describe(baseline, sources[0]), describe(current, sources[1]))
    notes = thresholds.summary()
    if recorded_on_cpu(current.machine):  # said with the verdict, not only at the top of the run
        notes = [*notes, CPU_NOTE]
    print("\n".join(report(outcome, rule, baseline, current, sides, notes, listing)))
    if markdown_file is not None:
        text = summary(outcome, rule, baseline, current, sides, notes, link)
        try:
            write_whole(markdown_file, text.encode())
        except OSError as err:
            raise GateError(
                f"--markdown {markdown_file}: cannot be written ({err.strerror or err})"
            ) from None
