"""Find the commit that made a selection of benchmarks slower, measuring it on this machine at commits between
GOOD and BAD (as `git bisect run` would, with the gate's rule as the test).

    python -m perf.tools.bisect GOOD BAD -- perf/test_attention.py -k forward --tier pr
    python -m perf.tools.bisect v1.2 HEAD --save bisect/ -- -k train_step

The commits are BAD's first-parent line after GOOD. Each measured commit is checked out beside this tree
(perf/tools/worktrees.py), measured once with the selection and removed; the search
(perf/tools/bisect_search.py) measures GOOD, then halves the range, BAD only where every commit before it was
good. A commit at which the
selection cannot run is skipped. Uncommitted changes are never measured.

Exit codes: 0 a first slower commit found, 1 no slowdown between GOOD and BAD in the selection, 2 bad input or
a failed run (GOOD or BAD could not be measured), 130 interrupted (no worktree and no child left).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from perf.storage import ROOT
from perf.tools.bisect_search import (
    BAD,
    GOOD,
    SHORT,
    Answer,
    Rule,
    Step,
    expected_measurements,
    search,
)
from perf.tools.kernel_changes import BASELINE, CURRENT, explanation_lines
from perf.tools.regression_rule import Z
from perf.tools.results import GateError, Results
from perf.tools.runs import (
    PYTEST_INTERRUPTED,
    Interrupted,
    Runner,
    is_selection,
    measure,
    tool_main,
    with_selection,
)
from perf.tools.worktrees import checked_out, is_dirty, resolve_commit, runner_in, terminating_as_interrupt

PROG = "perf.tools.bisect"
# Lower than the gate's 5%: each commit is compared with GOOD measured minutes before on the same machine, and
# once one slower commit is known the midpoint between the two decides, not the threshold.
THRESHOLD = 0.03
WIDTH = 120  # columns of the output
SLOWED_SHOWN = 5  # benchmarks listed (and explained kernel by kernel) under the answer


# --------------------------------------------------------------------------- command line
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise GateError(message)  # one line and exit 2, as every other refusal


def _options(argv: Sequence[str]) -> argparse.Namespace:
    parser = _Parser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0])
    parser.add_argument("good", metavar="GOOD", help="a commit at which the selection was fast")
    parser.add_argument("bad", metavar="BAD", help="a later commit (GOOD its ancestor) at which it is slower")
    parser.add_argument(
        "--threshold", type=float, default=THRESHOLD, metavar="FRACTION",
        help=f"relative slowdown against GOOD that makes a commit bad, in (0, 1) ({THRESHOLD:g})",
    )  # fmt: skip
    parser.add_argument("--z", type=float, default=Z, help=f"noise bound in standard errors, > 0 ({Z:g})")
    parser.add_argument(
        "--save", type=Path, metavar="DIR", help="keep each measured commit's results as DIR/<short sha>.json"
    )
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    options = parser.parse_args(argv[:split])
    options.pytest_args = argv[split + 1 :]
    if not options.pytest_args:
        raise GateError(
            "no selection: give the benchmarks to measure after --, e.g. -- perf/test_attention.py -k forward"
        )
    missing = [a for a in options.pytest_args if a.startswith("perf/") and not is_selection(a)]
    if missing:
        raise GateError(
            f"{missing[0]}: no such file or folder under perf/; give a path or node id that exists"
        )
    if not 0 < options.threshold < 1:
        raise GateError(f"--threshold {options.threshold:g}: accepted is a fraction > 0 and < 1, e.g. 0.03")
    if not 0 < options.z < math.inf:
        raise GateError(f"--z {options.z:g}: accepted is a positive number of standard errors, e.g. 3")
    if options.save is not None and options.save.exists() and not options.save.is_dir():
        raise GateError(f"--save {options.save}: not a folder; give the folder to keep the results in")
    return options


# --------------------------------------------------------------------------- git
def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


def candidates(good: str, bad: str, repo: Path) -> list[str]:
    """BAD's first-parent line after GOOD, oldest first (BAD last); a GateError where GOOD is not before."""
    if good == bad:
        raise GateError(f"GOOD and BAD are the same commit, {good[:SHORT]}; give an older GOOD")
    if _git(repo, "merge-base", "--is-ancestor", good, bad).returncode != 0:
        raise GateError(f"GOOD {good[:SHORT]} is not an ancestor of BAD {bad[:SHORT]}; give an older GOOD")
    found = _git(repo, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}").stdout.split()
    if not found or _git(repo, "rev-parse", f"{found[0]}^").stdout.strip() != good:
        raise GateError(
            f"GOOD {good[:SHORT]} is not on BAD's first-parent line (a commit of a merged branch); "
            "give a commit of that line"
        )
    return found


def _describe(commit: str, repo: Path, form: str = "%s") -> str:
    return _git(repo, "log", "-1", f"--format={form}", commit).stdout.strip()


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: room - 1] + "…"


# --------------------------------------------------------------------------- measuring one commit
def _interruptible(runner: Runner) -> Runner:
    def run(args: Sequence[str], json_path: Path) -> int:
        code = runner(args, json_path)
        # Ended by a signal (a SIGTERM passed on): an interrupt, not a commit at which the selection fails.
        if code < 0:
            raise KeyboardInterrupt
        # pytest stopped itself (the runner raises KeyboardInterrupt where an interrupt was passed on):
        # a collection error, so this commit is skipped like any other that cannot run the selection.
        if code == PYTEST_INTERRUPTED:
            raise GateError(f"pytest stopped at collection (exit code {code}): the commit cannot collect it")
        return code

    return run


def _measurer(
    args: list[str], save: Path | None, repo: Path, runner_for: Callable[[Path], Runner]
) -> Callable[[str], Results | str]:
    def measure_commit(commit: str) -> Results | str:
        with checked_out(commit, repo) as tree:
            path = None if save is None else save / f"{commit[:SHORT]}.json"
            try:
                return measure(_interruptible(runner_for(tree)), args, commit[:SHORT], save=path)
            except GateError as err:  # the selection cannot run at this commit: skipped by the search
                return str(err)

    return measure_commit


# --------------------------------------------------------------------------- output
def _step_printer(total: int, repo: Path) -> Callable[[Step], None]:
    count = [0]

    def show(step: Step) -> None:
        count[0] += 1
        verdict = "GOOD" if count[0] == 1 else step.verdict
        start = f"[{count[0]}/~{max(total, count[0])}] {step.commit[:SHORT]} {verdict:<7} "
        subject = _cut(_describe(step.commit, repo), 40)
        print(f"{start}{subject}: {step.note}", flush=True)

    return show


def _answer_lines(answer: Answer, repo: Path) -> list[str]:
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
    before, after = answer.results_of(comparison), answer.results_of(first)
    info = {side: _infos(results) for side, results in ((BAD, after), (GOOD, before))}
    compared = len(after.timings.keys() & before.timings.keys())
    lines.append(f"slowed {len(answer.slowed)} of {compared} benchmarks (base -> this commit):")
    for figure in answer.slowed[:SLOWED_SHOWN]:
        base_ms, current_ms = figure.base.median_s * 1e3, figure.current.median_s * 1e3
        lines.append(
            f"    {figure.figure:<4} {base_ms:10.3f} -> {current_ms:10.3f} ms {figure.ratio:6.3f}x  "
            f"{figure.name.split('::')[-1]}"
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


# --------------------------------------------------------------------------- the flow
def _bisect(options: argparse.Namespace, repo: Path, runner_for: Callable[[Path], Runner]) -> int:
    good = resolve_commit(options.good, repo, "GOOD")
    bad = resolve_commit(options.bad, repo, "BAD")
    commits = candidates(good, bad, repo)
    if bad == resolve_commit("HEAD", repo, "HEAD") and is_dirty(repo):
        print(
            "note: BAD is HEAD and this tree has uncommitted changes: "
            "they are not part of any commit measured"
        )
    args = with_selection(options.pytest_args)
    span = f"{len(commits)} commits after GOOD {good[:SHORT]} up to BAD {bad[:SHORT]}"
    print(f"bisecting {span}: pytest {' '.join(args)}")
    measured: list[Step] = []
    printer = _step_printer(expected_measurements(len(commits)), repo)

    def on_step(step: Step) -> None:
        measured.append(step)
        printer(step)

    rule = Rule(options.threshold, options.z)
    try:
        answer = search(good, commits, _measurer(args, options.save, repo, runner_for), rule, on_step)
    except KeyboardInterrupt:
        kept = f"their results are in {options.save}" if options.save else "their results were not kept"
        raise Interrupted(f"after {len(measured)} measured commits; {kept}") from None
    print("\n".join(_answer_lines(answer, repo)))
    if answer.first_bad is not None:
        total = f"{len(commits) + 1} (GOOD and the {len(commits)} after it)"
        print(f"found in {answer.measured} measured commits of {total}")
        return 0
    return 1 if answer.reason.startswith("no slowdown") else 2


def main(
    argv: Sequence[str] | None = None, *, repo: Path = ROOT, runner_for: Callable[[Path], Runner] = runner_in
) -> int:
    """The command line; returns the exit code. `runner_for` gives the pytest runner of a checked-out tree."""

    def body() -> int:
        with terminating_as_interrupt():  # a SIGTERM unwinds the worktree as a Ctrl-C does
            return _bisect(_options(sys.argv[1:] if argv is None else argv), repo, runner_for)

    return tool_main(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
