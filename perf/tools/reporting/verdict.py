"""The gate's verdict as the terminal shows it, in the order a person acts on it:

1. the decision (PASS or FAIL), both runs (commit, date, GPU, tier), the counts and the rule;
2. each regression, then the kernels that moved inside it (perf/tools/reading/kernel_changes.py);
3. the rest: did not persist, host-bound slower, clock moved, improvements, the kernels of those that moved
   on GPU time, the benchmarks judged on wall time alone and those not compared;
4. the decision again, the log's last line.

Each benchmark is in one section (perf/tools/judging/outcome.py); a reason shared by many is said once with
its count; new and missing benchmarks are counted and named on request (--list). Rows name benchmarks by their
shortest unique ending (run_info.short_names) and stay within WIDTH characters where the names allow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perf.tools.judging.changes import Change, Rule
from perf.tools.judging.outcome import FASTER, NOT_PERSISTED, PRECEDENCE, SLOWER, UNCHANGED, Moved, Outcome
from perf.tools.judging.regression_rule import CLOCK_MOVED, HOST_BOUND_SLOWER, HOST_NOISE, clock_moved
from perf.tools.reading.kernel_changes import OTHER, changes_between, explanation_lines, no_breakdown_reason
from perf.tools.reading.results import Results
from perf.tools.reading.run_info import Side, gpu_count, short_names, world_sizes
from perf.tools.reading.timings import GPU

WIDTH = 120  # characters a line keeps to where the names allow
# What `gate --list` names one by one: new benchmarks, the baseline's not compared (missing, outside the
# selection, at other world sizes), those judged on wall time alone.
LISTS = ("new", "missing", "wall-only")
# Benchmarks are named under a reason that covers at most this many (a profiler failure in one); beyond
# it (a baseline recorded before GPU time) they are counted, and named with --list.
LISTED_PER_REASON = 3
# Each section's title. {judged}: the threshold its rows were judged at where they share one; {again}:
# whether they were measured again; {threshold}: --threshold.
TITLES = {
    SLOWER: "regressions ({n}): slower by more than {judged} and the noise bound{again}",
    NOT_PERSISTED: "did not persist ({n}, never failing): slower by more than {judged}, not when measured "
    "again",
    HOST_BOUND_SLOWER: "host-bound slower ({n}, never failing): wall time slower by more than {threshold} "
    "but within {judged}",
    HOST_NOISE: "host noise ({n}, never failing): host-bound, wall slower by more than {judged}, GPU time "
    "not; not measured again",
    CLOCK_MOVED: "clock moved ({n}, never failing): GPU time slower at a lower SM clock, within {judged} at "
    "the baseline's clock",
    FASTER: "improvements ({n}): faster by more than {judged} and the noise bound",
}
# What the counts call each category.
COUNTED = {
    SLOWER: "regressed",
    NOT_PERSISTED: "did not persist",
    HOST_BOUND_SLOWER: "host-bound slower",
    HOST_NOISE: "host noise",
    CLOCK_MOVED: "clock moved",
    FASTER: "faster",
}
LEFT = ("figure", "threshold", "verdict")  # text columns; the others are numbers, aligned right
ALWAYS = ("figure", "base ms", "current ms", "ratio")  # the columns every table has


# --------------------------------------------------------------------------- the head
def decision(outcome: Outcome) -> str:
    """'PASS: ...', 'FAIL: 2 regressions (2 in gpu time), ...', or 'NO VERDICT: ...' where the runs have too
    little in common: the first and the last line."""
    n = len(outcome.regressions)
    compared = f"{outcome.compared} benchmark{'s' * (outcome.compared != 1)} compared"
    too_few = outcome.too_few_compared()
    if too_few is not None:
        return f"NO VERDICT: {too_few} --list new,missing names both sides"
    if not n:
        return f"PASS: no regression, {compared}"
    named = ", ".join(f"{k} in {figure} time" for figure, k in outcome.by_figure().items() if k)
    return f"FAIL: {n} regression{'s' * (n != 1)} ({named}), {compared}"


def compared_counts(outcome: Outcome) -> str:
    """Every benchmark of both runs once: '343 compared: 35 regressed, ..., 258 unchanged'."""
    parts = [f"{outcome.count(c)} {COUNTED[c]}" for c in PRECEDENCE]
    return f"{outcome.compared} compared: {', '.join(parts)}, {outcome.count(UNCHANGED)} unchanged"


def not_compared(outcome: Outcome) -> list[tuple[str, str, str, list[str]]]:
    """(the --list kind that names them, count and what, why, names) of each reason a benchmark was not
    compared, where it covers any."""
    absent, label = outcome.absent, outcome.current_label
    missing = (
        f"selected by {label}, no result: skipped or failed"
        if absent.selection_recorded
        else f"not in {label}, which records no selection"
    )
    other_worlds = [name for names in absent.other_worlds.values() for name in names]
    reasons = [
        ("new", f"{len(outcome.new)} new", "not in the baseline", outcome.new),
        ("missing", f"{len(absent.missing)} missing", missing, absent.missing),
        (
            "missing",
            f"{len(absent.unselected)} outside {label}'s selection",
            "a narrower tier or -k, or renamed or removed since the baseline",
            absent.unselected,
        ),
        (
            "missing",
            f"{len(other_worlds)} at other world sizes",
            "not comparable, never failing",
            other_worlds,
        ),
    ]
    return [reason for reason in reasons if reason[3]]


def not_compared_counts(outcome: Outcome) -> str:
    """'169 new, 12 outside the current file's selection', or 'none'."""
    return ", ".join(what for _, what, _, _ in not_compared(outcome)) or "none"


def rule_text(rule: Rule) -> str:
    return (
        f"--threshold {rule.threshold:.0%}, --host-bound-threshold {rule.host_threshold:.0%} for host-bound "
        f"wall times, noise bound --z {rule.z:g}"
    )


def head(
    outcome: Outcome, sides: tuple[Side, Side], rule: Rule, notes: Sequence[str], listing: frozenset[str]
) -> list[str]:
    lines = [decision(outcome)]
    for label, side in zip(("baseline:", "current: "), sides, strict=True):
        lines += [f"{label} {side.source}", f"  {side.line()}"]
    lines.append(compared_counts(outcome))
    present = {kind for kind, *_ in not_compared(outcome)}
    kinds = [kind for kind in LISTS if kind in present and kind not in listing]
    named = f" (--list {','.join(kinds)} names them)" if kinds else ""
    lines.append(f"not compared: {not_compared_counts(outcome)}{named}")
    wall_only = sum(map(len, outcome.wall_only.values()))
    if wall_only:
        lines.append(f"judged on wall time alone: {wall_only}, without GPU time on a side (why: below)")
    return [*lines, f"rule: {rule_text(rule)}", *notes]


# --------------------------------------------------------------------------- the sections
def _clock(change: Change) -> str:
    """The mean SM clock of both runs where it moved with the slowdown, e.g. '1980->1845'."""
    base, current = change.baseline.sm_mhz, change.current.sm_mhz
    if change.figure != GPU or base is None or current is None:
        return "-"
    return f"{base:.0f}->{current:.0f}"


def _cells(word: str, change: Change) -> dict[str, str]:
    return {
        "figure": change.figure,
        "base ms": f"{change.baseline.median_s * 1e3:.3f}",
        "current ms": f"{change.current.median_s * 1e3:.3f}",
        "ratio": f"{change.ratio:.3f}",
        "threshold": str(change.threshold),
        "noise ms": "-" if change.noise_s is None else f"{change.noise_s * 1e3:.3f}",
        "re-measured": ",".join(f"{r:.3f}" for r in change.remeasured) or "-",
        "SM MHz": _clock(change),
        "verdict": word,
    }


def table(entries: Sequence[Moved], category: str, names: Mapping[str, str]) -> list[str]:
    """A header and a row per figure that moved, each ending in the benchmark's short name; where a row
    would pass WIDTH, each benchmark's name heads its rows instead. A column appears only where a row has
    something in it: the threshold where the rows' differ, re-measurements where made, the clock where it
    moved, the verdict where a row's differs from the section's."""
    grouped = [(entry.name, [_cells(word, change) for word, change in entry.changes]) for entry in entries]
    rows = [cells for _, found in grouped for cells in found]
    shown = list(ALWAYS)
    if len({cells["threshold"] for cells in rows}) > 1:
        shown.append("threshold")
    shown += [c for c in ("noise ms", "re-measured", "SM MHz") if any(cells[c] != "-" for cells in rows)]
    if any(cells["verdict"] != category for cells in rows):
        shown.append("verdict")
    widths = {c: max(len(c), *(len(cells[c]) for cells in rows)) for c in shown}

    def line(cells: Mapping[str, str]) -> str:
        text = "  ".join(cells[c].ljust(widths[c]) if c in LEFT else cells[c].rjust(widths[c]) for c in shown)
        return text.rstrip()

    header = line({c: c for c in shown})
    flat = [f"  {line(cells)}  {names[name]}" for name, found in grouped for cells in found]
    if all(len(row) <= WIDTH for row in flat):
        return [f"  {header}  benchmark", *flat]
    lines = [f"    {header}"]
    for name, found in grouped:
        lines += [f"  {names[name]}", *(f"    {line(cells)}" for cells in found)]
    return lines


def section(
    entries: Sequence[Moved], category: str, names: Mapping[str, str], outcome: Outcome, rule: Rule
) -> list[str]:
    if not entries:
        return []
    judged = {str(c.threshold) for e in entries for word, c in e.changes if word == category}
    again = (
        f", in each of {outcome.remeasured} re-measurement(s)"
        if outcome.remeasured
        else ", not measured again" + ("" if outcome.own_run else " (--current)")
    )
    title = TITLES[category].format(
        n=len(entries),
        judged=judged.pop() if len(judged) == 1 else "their threshold",
        again=again,
        threshold=f"{rule.threshold:.0%}",
    )
    return [f"{title}:", *table(entries, category, names)]


def extra_infos(results: Results) -> dict[str, Any]:
    """Each benchmark's extra_info by node id."""
    return {
        entry.get("fullname"): entry.get("extra_info")
        for entry in results.document.get("benchmarks", [])
        if isinstance(entry, dict)
    }


def explained(
    title: str, entries: Sequence[Moved], baseline: Results, current: Results, names: Mapping[str, str]
) -> list[str]:
    """What changed inside each benchmark, kernel by kernel; each reason there is no breakdown said once,
    with the count of benchmarks it covers."""
    before, after = extra_infos(baseline), extra_infos(current)
    lines: list[str] = []
    without: dict[str, list[str]] = {}
    for entry in entries:
        old, new = before.get(entry.name), after.get(entry.name)
        reason = no_breakdown_reason(old, new)
        if reason is not None:
            without.setdefault(reason, []).append(names[entry.name])
            continue
        lines += [f"  {line}" for line in explanation_lines(names[entry.name], old, new, width=WIDTH - 2)]
    for reason, found in without.items():
        lines.append(f"  {len(found)} without a kernel breakdown: {reason}")
        if len(found) <= LISTED_PER_REASON:
            lines += [f"    {name}" for name in found]
    return [f"{title}:", *lines] if lines else []


def why_lines(entries: Sequence[Moved], baseline: Results, current: Results, shown: int = 4) -> list[str]:
    """The kernels that grew in most of the regressions, their growth summed: why the run failed, said
    before the regressions are listed one by one (the breakdown of each comes after them)."""
    before, after = extra_infos(baseline), extra_infos(current)
    grew: dict[str, list[float]] = {}  # kernel -> [regressions it grew in, us per call summed, launched more]
    for entry in entries:
        changes = changes_between(before.get(entry.name), after.get(entry.name))
        for change in [] if isinstance(changes, str) else changes:
            if change.change_us > 0 and not change.kernel.startswith(OTHER):
                found = grew.setdefault(change.kernel, [0, 0.0, 0])
                found[0] += 1
                found[1] += change.change_us
                found[2] += change.change_launches > 0
    if not grew:
        return []
    top = sorted(grew.items(), key=lambda item: (-item[1][0], -item[1][1], item[0]))[:shown]
    lines = [
        f"why: kernels that grew in most of the {len(entries)} regression(s), their growth per call summed:"
    ]
    for kernel, (count, us, more) in top:
        launched = f", launched more in {more}" if more else ""
        text = f"  in {count}: +{us / 1e3:.3f} ms{launched}: "
        lines.append(text + kernel[: max(20, WIDTH - len(text))])
    return lines


def wall_only_lines(outcome: Outcome, listed: bool) -> list[str]:
    if not outcome.wall_only:
        return []
    count = sum(map(len, outcome.wall_only.values()))
    lines = [f"judged on wall time alone ({count}, without GPU time to compare on a side):"]
    for reason, names in outcome.wall_only.items():
        lines.append(f"  {len(names)}: {reason}")
        if listed or len(names) <= LISTED_PER_REASON:
            lines += [f"    {name}" for name in names]
    return lines


def _world_lines(outcome: Outcome, baseline: Results, current: Results) -> list[str]:
    """What each run measured on, beside the baseline's benchmarks at world sizes this one lacks."""
    ran = sorted(set(world_sizes(current).values()))
    gpus, base_gpus = gpu_count(current), gpu_count(baseline)
    here = f"world size(s) {', '.join(map(str, ran))}" if ran else "no distributed benchmark"
    sizes = ", ".join(map(str, outcome.absent.other_worlds))
    there = f" on {base_gpus} GPU(s)" if base_gpus is not None else ""
    return [
        f"    the baseline's at world size(s) {sizes}, measured{there}",
        f"    {outcome.current_label}: {here}" + (f" on {gpus} GPU(s)" if gpus is not None else ""),
    ]


def not_compared_lines(
    outcome: Outcome, baseline: Results, current: Results, listing: frozenset[str]
) -> list[str]:
    reasons = not_compared(outcome)
    if not reasons:
        return []
    lines = ["not compared:"]
    for kind, what, why, names in reasons:
        lines.append(f"  {what}: {why}")
        if what.endswith("other world sizes"):
            lines += _world_lines(outcome, baseline, current)
        if kind in listing:
            lines += [f"    {name}" for name in names]
    return lines


# --------------------------------------------------------------------------- the verdict
def report(
    outcome: Outcome,
    rule: Rule,
    baseline: Results,
    current: Results,
    sides: tuple[Side, Side],
    notes: Sequence[str] = (),
    listing: frozenset[str] = frozenset(),
) -> list[str]:
    """The verdict's lines; `listing` holds the kinds of LISTS to name one by one."""
    names = short_names([*baseline.timings, *current.timings])
    lines = head(outcome, sides, rule, notes, listing)
    regressions = outcome.regressions
    lines += why_lines(regressions, baseline, current)
    lines += section(regressions, SLOWER, names, outcome, rule)
    clocked = [c for e in regressions for w, c in e.changes if w == SLOWER and c.figure == GPU]
    clocked = [c for c in clocked if clock_moved(c.baseline, c.current)]
    if clocked:
        lines.append(
            f"{len(clocked)} GPU-time regression(s) ran at a lower SM clock (the SM MHz column) and stay "
            "regressions at the baseline's clock"
        )
    title = "what changed inside the regressions (GPU time per call by kernel, the largest changes first)"
    lines += explained(title, regressions, baseline, current, names)
    for category in PRECEDENCE[1:]:
        lines += section(outcome.moved[category], category, names, outcome, rule)
    others = [
        entry
        for category in (CLOCK_MOVED, FASTER)
        for entry in outcome.moved[category]
        if any(c.figure == GPU and word == category for word, c in entry.changes)
    ]
    title = "what changed inside the others that moved on GPU time"
    lines += explained(title, others, baseline, current, names)
    lines += wall_only_lines(outcome, "wall-only" in listing)
    lines += not_compared_lines(outcome, baseline, current, listing)
    return [*lines, decision(outcome)]
