"""What `python -m perf.tools.bisect` prints: a line per measured commit as the search makes it, then the
answer, the first slower commit (or why there is none), the benchmarks it slowed and the kernels that changed
across it (perf/tools/reading/kernel_changes.py). Commits are named by their subject, read from git."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from perf.tools.judging.bisect_search import BAD, GOOD, Answer, Step
from perf.tools.reading.kernel_changes import BASELINE, CURRENT, explanation_lines
from perf.tools.reading.results import Results
from perf.tools.reading.run_info import SHORT

WIDTH = 120  # columns of the output
SLOWED_SHOWN = 5  # benchmarks listed (and explained kernel by kernel) under the answer


def _describe(commit: str, repo: Path, form: str = "%s") -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "log", "-1", f"--format={form}", commit], capture_output=True, text=True
    )
    return done.stdout.strip()


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: room - 1] + "…"


def step_printer(total: int, repo: Path) -> Callable[[Step], None]:
    count = [0]

    def show(step: Step) -> None:
        count[0] += 1
        verdict = "GOOD" if count[0] == 1 else step.verdict
        start = f"[{count[0]}/~{max(total, count[0])}] {step.commit[:SHORT]} {verdict:<7} "
        subject = _cut(_describe(step.commit, repo), 40)
        print(f"{start}{subject}: {step.note}", flush=True)

    return show


def answer_lines(answer: Answer, repo: Path) -> list[str]:
    first = answer.first_bad
    if first is None:
        return [answer.reason]
    lines = []
    if answer.unmeasured:
        count = len(answer.unmeasured) + 1
        lines.append(f"first slower commit: one of {count}, the others could not be measured")
        for commit in (*answer.unmeasured, first):
            lines.append(f"    {commit[:SHORT]} {_cut(_describe(commit, repo), WIDTH - 12)}")
    lines.append(f"first slower commit: {first} {_cut(_describe(first, repo), 60)}")
    lines.append(f"    {_describe(first, repo, '%an, %ad')}")
    parent = _describe(first, repo, "%P").split()[:1]
    comparison = answer.comparison
    label = "GOOD " if comparison == answer.good else ""
    if parent == [comparison]:
        lines.append(f"    compared with its parent, {label}{comparison[:SHORT]}")
    else:
        lines.append(
            f"    compared with {label}{comparison[:SHORT]}, the nearest measured good commit before it "
            f"(its parent {parent[0][:SHORT] if parent else '?'} was not measured)"
        )
    # The first run of each side shows the kernels; the figures are the geometric means of all runs.
    before, after = answer.results_of(comparison)[0], answer.results_of(first)[0]
    info = {side: _infos(results) for side, results in ((BAD, after), (GOOD, before))}
    compared = len(after.timings.keys() & before.timings.keys())
    lines.append(f"slowed {len(answer.slowed)} of {compared} benchmarks (base -> this commit):")
    for figure in answer.slowed[:SLOWED_SHOWN]:
        base_ms, current_ms = figure.base_s * 1e3, figure.current_s * 1e3
        lines.append(
            f"    {figure.figure:<4} {base_ms:10.3f} -> {current_ms:10.3f} ms {figure.ratio:6.3f}x  "
            f"{figure.name.split('::')[-1]}"
        )
        for grown in figure.kernels:  # the kernels that decided it (perf/tools/judging/kernel_shares.py)
            lines.append(
                f"        kernel {grown.kernel}: {grown.time_ratio:.4f}x its time per call, "
                f"{grown.share_ratio:.4f}x its share of the GPU time"
            )
    if len(answer.slowed) > SLOWED_SHOWN:
        lines.append(f"    and {len(answer.slowed) - SLOWED_SHOWN} more")
    lines.append(f"kernels across it ({comparison[:SHORT]} -> {first[:SHORT]}):")
    sides = {BASELINE: comparison[:SHORT], CURRENT: first[:SHORT]}  # the commits, not a baseline and a run
    for figure in answer.slowed[:SLOWED_SHOWN]:
        name = figure.name.split("::")[-1]
        base_info, bad_info = info[GOOD].get(figure.name), info[BAD].get(figure.name)
        for line in explanation_lines(name, base_info, bad_info, width=WIDTH):
            lines.append("    " + line.replace(BASELINE, sides[BASELINE]).replace(CURRENT, sides[CURRENT]))
    return lines


def _infos(results: Results) -> dict[str, object]:
    benchmarks = results.document.get("benchmarks") or []
    return {b.get("fullname"): b.get("extra_info") for b in benchmarks if isinstance(b, dict)}
