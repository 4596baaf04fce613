"""The gate's verdict as the terminal shows it: every change with the threshold it was judged at and where
that came from, the GPU's clock beside it, what changed inside each benchmark kernel by kernel, and
one last line that says PASS or FAIL."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perf.tools.changes import Change, Comparison, Rule
from perf.tools.kernel_changes import explanation_lines
from perf.tools.regression_rule import GPU, WALL, clock_moved
from perf.tools.results import Results

# Benchmarks judged on wall time alone are named where a reason covers at most this many (a profiler
# failure in one benchmark); beyond it (a baseline recorded before GPU time) they are counted.
LISTED_PER_REASON = 10

HEADER = (
    f"  {'figure':<6} {'base ms':>10} {'current ms':>10} {'ratio':>7} {'threshold':>22} {'noise ms':>9} "
    f"{'re-measured':>13} {'SM MHz':>11}  benchmark"
)


def _clock(change: Change) -> str:
    """The mean SM clock of both runs where it moved with the slowdown, e.g. '1980->1845'."""
    base, current = change.baseline.sm_mhz, change.current.sm_mhz
    if change.figure != GPU or base is None or current is None:
        return "-"
    return f"{base:.0f}->{current:.0f}"


def _row(change: Change) -> str:
    before, after = change.baseline.median_s * 1e3, change.current.median_s * 1e3
    noise = "-" if change.noise_s is None else f"{change.noise_s * 1e3:.3f}"
    remeasured = ",".join(f"{r:.3f}" for r in change.remeasured) or "-"
    return (
        f"  {change.figure:<6} {before:>10.3f} {after:>10.3f} {change.ratio:>7.3f} {change.threshold!s:>22} "
        f"{noise:>9} {remeasured:>13} {_clock(change):>11}  {change.name}"
    )


def _wall_only_lines(wall_only: dict[str, list[str]]) -> list[str]:
    if not wall_only:
        return []
    count = sum(map(len, wall_only.values()))
    lines = [f"judged on wall time alone, {count} benchmark(s) without GPU time to compare:"]
    for reason, names in wall_only.items():
        lines.append(f"  {len(names)}: {reason}")
        if len(names) <= LISTED_PER_REASON:
            lines += [f"    {name}" for name in names]
    return lines


def selection(results: Results) -> set[str] | None:
    """The node ids of the benchmarks a run selected (after -k, tiers and deselection), where it says."""
    perf = results.document.get("perf")
    selected = perf.get("selected") if isinstance(perf, dict) else None
    if not isinstance(selected, list):
        return None
    return {name for name in selected if isinstance(name, str)}


def _missing_lines(missing: Sequence[str], current: Results) -> list[str]:
    """The baseline's benchmarks without a result in this run: those it selected are listed (skipped,
    failed, out of memory); those outside its selection (a narrower tier, -k) are counted."""
    selected = selection(current)
    if selected is None:
        return ["missing:", *(f"  {name}" for name in missing)] if missing else []
    lost = [name for name in missing if name in selected]
    lines = (
        ["missing (selected by this run, no result: skipped or failed):", *(f"  {n}" for n in lost)]
        if lost
        else []
    )
    outside = len(missing) - len(lost)
    if outside:
        lines.append(f"{outside} benchmark(s) of the baseline outside this run's selection: not compared")
    return lines


def _world_sizes(results: Results) -> dict[str, int]:
    """Each benchmark's world size (extra_info world_size: the ranks it ran on), where it has one."""
    sizes = {}
    for entry in results.document.get("benchmarks", []):
        info = entry.get("extra_info") if isinstance(entry, dict) else None
        size = info.get("world_size") if isinstance(info, dict) else None
        if isinstance(size, int) and not isinstance(size, bool):
            sizes[entry.get("fullname")] = size
    return sizes


def gpu_count(results: Results) -> int | None:
    """The GPUs the run's machine had visible (machine_info.perf.gpu.count), where it says."""
    perf = results.document.get("machine_info", {}).get("perf")
    gpu = perf.get("gpu") if isinstance(perf, dict) else None
    count = gpu.get("count") if isinstance(gpu, dict) else None
    return count if isinstance(count, int) else None


def other_world_sizes(missing: Sequence[str], baseline: Results, current: Results) -> dict[int, list[str]]:
    """The baseline's benchmarks missing from this run that ran at a world size this run measured nothing
    at (a two-GPU baseline compared on one GPU, torchrun with another world size), by world size."""
    before, now = _world_sizes(baseline), set(_world_sizes(current).values())
    found: dict[int, list[str]] = {}
    for name in missing:
        size = before.get(name)
        if size is not None and size not in now:
            found.setdefault(size, []).append(name)
    return found


def _other_world_lines(found: dict[int, list[str]], baseline: Results, current: Results) -> list[str]:
    if not found:
        return []
    ran = sorted(set(_world_sizes(current).values()))
    gpus = gpu_count(current)
    sizes = ", ".join(map(str, ran))
    here = f"this run measured world size(s) {sizes}" if ran else "this run measured no distributed benchmark"
    here += f" on {gpus} GPU(s)" if gpus is not None else ""
    base_gpus = gpu_count(baseline)
    there = f", the baseline's machine had {base_gpus} GPU(s)" if base_gpus is not None else ""
    lines = [f"not comparable, other world sizes ({here}{there}; listed, never failing):"]
    for size, names in sorted(found.items()):
        lines.append(f"  {len(names)} benchmark(s) of the baseline at world size {size}")
        if len(names) <= LISTED_PER_REASON:
            lines += [f"    {name}" for name in names]
    return lines


def _missing_count(missing: Sequence[str], current: Results) -> str:
    selected = selection(current)
    if selected is None:
        return f"{len(missing)} missing"
    lost = sum(name in selected for name in missing)
    return f"{lost} missing, {len(missing) - lost} outside the selection"


def _explained(changes: Sequence[Change], baseline: Results, current: Results) -> list[str]:
    """What changed inside each benchmark that moved, kernel by kernel, once per benchmark."""
    lines: list[str] = []
    for name in dict.fromkeys(c.name for c in changes):
        lines += explanation_lines(name, _info(baseline, name), _info(current, name))
    return (
        ["what changed inside (GPU time per call by kernel, the largest changes first):", *lines]
        if lines
        else []
    )


def _info(results: Results, name: str) -> Mapping[str, Any]:
    for entry in results.document.get("benchmarks", []):
        if isinstance(entry, dict) and entry.get("fullname") == name:
            info = entry.get("extra_info")
            return info if isinstance(info, dict) else {}
    return {}


def report(
    comparison: Comparison,
    regressions: list[Change],
    not_persisted: list[Change],
    rule: Rule,
    baseline: Results,
    current: Results,
    notes: Sequence[str] = (),
) -> list[str]:
    lines = list(notes)
    sections = (
        ("regressions (slower by more than their threshold and than the noise bound)", regressions),
        ("improvements (listed, never failing)", comparison.improvements),
        ("did not persist (slower once, not when measured again: noise)", not_persisted),
        (
            f"host-bound, wall time slower by more than {rule.threshold:.0%} "
            f"but not {rule.host_threshold:.0%} (listed, never failing: the host's Python and launches "
            "set it; see --host-bound-threshold)",
            comparison.host_bound,
        ),
        (
            "clock moved: GPU time slower with a lower mean SM clock, within the threshold at the "
            "baseline's clock (listed, never failing)",
            comparison.clock_moved,
        ),
    )
    for title, changes in sections:
        if changes:
            lines += [f"{title}:", HEADER, *(_row(c) for c in changes)]
    clocked = [c for c in regressions if c.figure == GPU and clock_moved(c.baseline, c.current)]
    if clocked:
        lines.append(
            f"{len(clocked)} GPU-time regression(s) ran at a lower SM clock (the SM MHz column) and stay "
            "regressions at the baseline's clock"
        )
    if comparison.new:
        lines += ["new (not in the baseline):", *(f"  {name}" for name in comparison.new)]
    other_worlds = other_world_sizes(comparison.missing, baseline, current)
    set_apart = {name for names in other_worlds.values() for name in names}
    missing = [name for name in comparison.missing if name not in set_apart]
    lines += _other_world_lines(other_worlds, baseline, current)
    lines += _missing_lines(missing, current)
    lines += _wall_only_lines(comparison.wall_only)
    moved = [
        *regressions,
        *(c for c in (*comparison.improvements, *comparison.clock_moved) if c.figure == GPU),
    ]
    lines += _explained(moved, baseline, current)
    counts = (
        f"{comparison.compared} compared, {len(comparison.improvements)} faster, "
        f"{len(not_persisted)} did not persist, {len(comparison.host_bound)} host-bound slower, "
        f"{len(comparison.clock_moved)} clock moved, {len(comparison.new)} new, "
        f"{_missing_count(missing, current)}, {len(set_apart)} at other world sizes, "
        f"{sum(map(len, comparison.wall_only.values()))} without GPU time; "
        f"threshold {rule.threshold:.0%}, z {rule.z:g}, host-bound {rule.host_threshold:.0%}"
    )
    if regressions:
        by_figure = {f: sum(c.figure == f for c in regressions) for f in (GPU, WALL)}
        named = ", ".join(f"{n} in {figure} time" for figure, n in by_figure.items() if n)
        verdict = f"FAIL: {len(regressions)} regression{'s' * (len(regressions) != 1)} ({named})"
    else:
        verdict = "PASS"
    return [*lines, f"{verdict} ({counts})"]
