"""The A/B verdict (perf/tools/running/ab.py) as the terminal shows it: the decision, the counts, the rule,
then each slower benchmark with both sides' times, its pairs and the kernels that moved in it; the undecided
and what base could not run; the decision again as the last line."""

from __future__ import annotations

import textwrap
from pathlib import Path

from perf.storage import write_whole
from perf.tools.judging.kernel_shares import KERNEL_SHARE, kernel_lines
from perf.tools.judging.paired_rule import (
    FALSE_RATE,
    FASTER,
    FIRST_PAIRS,
    SAME,
    SLOWER,
    UNKNOWN,
    ABRun,
    Bounds,
    Judgement,
)
from perf.tools.reading.errors import GateError
from perf.tools.reading.kernel_changes import explanation_lines
from perf.tools.reading.results import Results
from perf.tools.reading.run_info import SHORT, short_names
from perf.tools.reading.timings import FIGURES

WIDTH = 120  # characters a line keeps to where the names allow
LISTED = 10  # undecided, new or missing benchmarks named; the rest are counted


def exit_code(ab: ABRun) -> int:
    """0 pass, 1 a benchmark slower, 2 no verdict (nothing measured on both sides)."""
    if ab.paired is None or not ab.paired.judged:
        return 2
    return 1 if ab.paired.named(SLOWER) else 0


def decision(ab: ABRun) -> str:
    """The first and the last line: what was decided of how many, e.g. 'PASS: none slower (2 same, 7
    undecided of 9; A/B against base abc123, 4 runs + 2 pairs re-measured)'."""
    runs = f"{2 * FIRST_PAIRS} runs"
    if ab.remeasured:
        runs += f" + {len(ab.remeasured)} pair{'s' * (len(ab.remeasured) != 1)} re-measured"
    against = f"A/B against base {ab.base_commit[:SHORT]}, {runs}"
    if exit_code(ab) == 2:
        return f"NO VERDICT: no benchmark measured on both sides ({against})"
    paired = ab.paired
    found = [
        (len(paired.named(v)), word)
        for v, word in ((FASTER, "faster"), (SAME, "same"), (UNKNOWN, "undecided"))
    ]
    rest = ", ".join(f"{count} {word}" for count, word in found if count)
    of = f"{rest} of {len(paired.judged)}" if rest else f"of {len(paired.judged)}"
    slower = len(paired.named(SLOWER))
    if slower:
        return f"FAIL: {slower} slower ({of}; {against})"
    return f"PASS: none slower ({of}; {against})"


def counts(ab: ABRun) -> str:
    paired = ab.paired
    judged = [f"{len(paired.named(v))} {v}" for v in (SLOWER, FASTER, SAME, UNKNOWN)]
    return f"counts: {', '.join(judged)}, {len(paired.new)} new, {len(paired.missing)} missing"


def rule(ab: ABRun) -> str:
    bounds = ab.paired.bounds if ab.paired is not None and ab.paired.bounds is not None else Bounds(ab.z)
    return (
        f"rule: base and head alternately (ABBA, then BA/AB pairs for the undecided, at most {ab.max_pairs} "
        f"pairs); slower or faster by more than {ab.threshold:.1%}, {bounds.z_slower:.2f} standard errors (a "
        f"{FALSE_RATE:.0%} chance of any false slower in the gate) and in every pair; same when {bounds.z:g} "
        f"standard errors lie within {ab.threshold:.1%}; judged on gpu time where both sides measured it "
        "alike, and on wall time unless host-bound; slower too where a kernel of at least "
        f"{KERNEL_SHARE:.0%} of its GPU time grew by that rule, in its time and in its share"
    )


def _extra_info(results: Results, name: str) -> object:
    for entry in results.document.get("benchmarks", ()):
        if isinstance(entry, dict) and entry.get("fullname") == name:
            return entry.get("extra_info")
    return None


def _last_info(runs: list[Results], name: str) -> object:
    return next((_extra_info(r, name) for r in reversed(runs) if name in r.timings), None)


def slower_lines(ab: ABRun, judgement: Judgement, shown: str) -> list[str]:
    """A slower benchmark: each figure's base and head ms and ratio, the pair ratios, the kernels."""
    lines = [f"  {shown}"]
    for figure in judgement.figures.values():
        lines.append(
            f"    {figure.figure:<4}  base {figure.base_s * 1e3:9.4f} ms  "
            f"head {figure.head_s * 1e3:9.4f} ms  ratio {figure.ratio:.4f} (±{figure.se * 100:.2f}% se)  "
            f"{figure.verdict}"
        )
    pairs = " ".join(f"{r:.4f}" for r in judgement.pair_ratios)
    lines.append(f"    pairs (head / base, {judgement.primary}): {pairs}")
    lines += ["    " + line for line in kernel_lines(judgement)]
    base_info = _last_info(ab.runs["base"], judgement.name)
    head_info = _last_info(ab.runs["head"], judgement.name)
    lines += ["    " + line for line in explanation_lines(shown, base_info, head_info, width=WIDTH - 4)]
    return lines


def _named(title: str, names: list[str]) -> list[str]:
    if not names:
        return []
    shown = names[:LISTED]
    more = [f"  ... and {len(names) - LISTED} more"] if len(names) > LISTED else []
    return [f"{title} ({len(names)}):", *(f"  {name}" for name in shown), *more]


def report(ab: ABRun) -> list[str]:
    """The whole verdict, line by line."""
    lines = [decision(ab)]
    if exit_code(ab) != 2:
        lines += [counts(ab), *textwrap.wrap(rule(ab), WIDTH, subsequent_indent="  ")]
    if ab.noise_note:
        lines.append(ab.noise_note)
    lines.append(f"base {ab.base_commit[:SHORT]}; head the working tree, {ab.head_state}")
    lines += [f"base could not run the selection: {failure}" for failure in ab.base_failures]
    paired = ab.paired
    if paired is None:
        return [*lines, decision(ab)]
    if paired.fallback_line():
        lines.append(paired.fallback_line())
    slower = [paired.judged[name] for name in paired.named(SLOWER)]
    short = short_names(paired.judged)
    if slower:
        primaries = ", ".join(sorted({j.primary for j in slower}))
        lines.append(f"slower ({len(slower)}), judged first on {primaries} time:")
        for judgement in slower:
            lines += slower_lines(ab, judgement, short[judgement.name])

    def ratios(verdict: str) -> list[str]:
        return [
            f"{short[j.name]}  ratio {j.figures[j.primary].ratio:.4f}"
            for j in paired.judged.values()
            if j.verdict == verdict
        ]

    lines += _named(
        f"unknown after {ab.pairs} pairs (never failing: more pairs or a quieter machine decide)",
        ratios(UNKNOWN),
    )
    lines += _named("faster", ratios(FASTER))
    new_title = "new (not on base" + (", or failing there)" if ab.base_failures else ")")
    lines += _named(new_title, paired.new)
    lines += _named("missing (on base only)", paired.missing)
    lines.append(f"figures: {'; '.join(f'{k}: {v}' for k, v in FIGURES.items())}")
    return [*lines, decision(ab)]


def markdown(ab: ABRun, link: str | None = None) -> str:
    """The verdict for a CI job summary: the decision as the heading, the link to the kept runs, and the
    verdict as the terminal shows it (without the runs' own pytest output)."""
    lines = [f"## GPU gate (A/B) — {decision(ab)}", ""]
    if link:
        lines += [f"The runs' result files and the full log: {link}", ""]
    return "\n".join([*lines, "```", *report(ab), "```", ""])


def show(ab: ABRun, markdown_file: Path | None = None, link: str | None = None) -> int:
    """`gate --base REF`'s output: print the verdict, write its Markdown summary where asked (whole or not at
    all); return the exit code."""
    print("\n".join(report(ab)), flush=True)
    if markdown_file is not None:
        try:
            write_whole(markdown_file, markdown(ab, link).encode())
        except OSError as err:
            raise GateError(
                f"--markdown {markdown_file}: cannot be written ({err.strerror or err})"
            ) from None
    return exit_code(ab)
