"""Find the commit that made a selection of benchmarks slower, measuring it on this machine at commits between
GOOD and BAD (as `git bisect run` would, with the gate's rule as the test).

    python -m perf.tools.bisect GOOD BAD -- perf/test_attention.py -k forward --tier pr
    python -m perf.tools.bisect v1.2 HEAD --save bisect/ -- -k train_step

The commits are BAD's first-parent line after GOOD. Each measured commit is checked out beside this tree
(perf/tools/running/worktrees.py, perf/tools/running/bisect_runs.py), measured --runs times back to back
and removed; the search (perf/tools/judging/bisect_search.py) measures GOOD, then halves the range, BAD only
where every commit before it was good, each commit judged against GOOD by the A/B's paired rule with the
runner's noise profile (--noise). A commit at which the selection cannot run is skipped. Uncommitted changes
are never measured. What it prints: perf/tools/reporting/bisect_answer.py.

Exit codes: 0 a first slower commit found, 1 no slowdown between GOOD and BAD in the selection, 2 bad input or
a failed run (GOOD or BAD could not be measured), 130 interrupted (no worktree and no child left).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from perf.storage import BASELINES, FOLDER, ROOT
from perf.tools.judging import paired_rule
from perf.tools.judging.bisect_search import Rule, Step, expected_measurements, search
from perf.tools.judging.noise_thresholds import Noise, noise_profile
from perf.tools.reading.destinations import checked
from perf.tools.reading.errors import GateError, Interrupted, ToolParser, settle, tool_main
from perf.tools.reading.results import Results
from perf.tools.reading.run_info import SHORT
from perf.tools.reporting.bisect_answer import answer_lines, step_printer
from perf.tools.running.bisect_runs import candidates, measurer
from perf.tools.running.runs import Runner, is_selection, with_selection
from perf.tools.running.worktrees import is_dirty, resolve_commit, runner_in, terminating_as_interrupt

PROG = "perf.tools.bisect"
# The A/B's: each commit is compared with GOOD measured minutes before on the same machine, and once one
# slower commit is known the midpoint between the two decides, not the threshold.
THRESHOLD, Z = paired_rule.THRESHOLD, paired_rule.Z
# Runs of each commit: two a side is the A/B's first look (ABBA), enough for a 2% step at low noise.
RUNS = 2


# --------------------------------------------------------------------------- command line
def _options(argv: Sequence[str]) -> argparse.Namespace:
    parser = ToolParser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0])
    parser.add_argument("good", metavar="GOOD", help="a commit at which the selection was fast")
    parser.add_argument("bad", metavar="BAD", help="a later commit (GOOD its ancestor) at which it is slower")
    parser.add_argument(
        "--threshold", type=float, default=THRESHOLD, metavar="FRACTION",
        help=f"relative slowdown against GOOD that makes a commit bad, in (0, 1) ({THRESHOLD:g})",
    )  # fmt: skip
    parser.add_argument("--z", type=float, default=Z, help=f"noise bound in standard errors, > 0 ({Z:g})")
    parser.add_argument(
        "--runs", default=str(RUNS), metavar="N",
        help=f"runs of each commit measured, back to back, >= 1 ({RUNS})",
    )  # fmt: skip
    parser.add_argument(
        "--noise", metavar="FILE|off",
        help="the runner's noise file, whose run-to-run spreads bound the standard errors (default: "
        "baselines/<gpu>/noise.json where it exists; off: the runs' own spread alone)",
    )  # fmt: skip
    parser.add_argument(
        "--save", type=Path, metavar="DIR", help="keep each run's results as DIR/<short sha>-<run>.json"
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
        raise GateError(f"--threshold {options.threshold:g}: accepted is a fraction > 0 and < 1, e.g. 0.01")
    if not 0 < options.z < math.inf:
        raise GateError(f"--z {options.z:g}: accepted is a positive number of standard errors, e.g. 3")
    if not options.runs.isdigit() or int(options.runs) < 1:
        raise GateError(f"--runs {options.runs}: accepted is a whole number of runs >= 1, e.g. {RUNS}")
    options.runs = int(options.runs)
    checked(options.save, "--save", FOLDER)
    return options


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
    print(f"bisecting {span}, {options.runs} runs each: pytest {' '.join(args)}")
    measured: list[Step] = []
    printer = step_printer(expected_measurements(len(commits)), repo)

    def on_step(step: Step) -> None:
        measured.append(step)
        printer(step)

    def profile(good_run: Results) -> Noise | None:
        noise, note = noise_profile(options.noise, good_run, BASELINES, paired_rule.PROFILE_SPREAD)
        print(note)  # said once, before the first verdict
        return noise

    rule = Rule(options.threshold, options.z)  # looks: every probe the search may measure
    measure = measurer(args, options.save, repo, runner_for, options.runs)
    try:
        answer = search(good, commits, measure, rule, on_step, profile)
    except KeyboardInterrupt:
        kept = f"their results are in {options.save}" if options.save else "their results were not kept"
        raise Interrupted(f"after {len(measured)} measured commits; {kept}") from None
    settle()  # the answer printed is the answer returned
    print("\n".join(answer_lines(answer, repo)))
    if answer.first_bad is not None:
        total = f"{len(commits) + 1} (GOOD and the {len(commits)} after it)"
        print(f"found in {answer.measured} measured commits ({answer.runs} runs) of {total}")
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
