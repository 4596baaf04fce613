"""The commits `python -m perf.tools.bisect` searches, and measuring one of them: BAD's first-parent line
after GOOD, and each commit checked out beside this tree (worktrees.py), measured --runs times back to back
with the selection and removed. A commit at which the selection cannot run gives the reason instead of
results, so that the search (perf/tools/judging/bisect_search.py) skips it; an interrupt ends the whole
bisection."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from perf.tools.reading.errors import GateError
from perf.tools.reading.results import Results
from perf.tools.reading.run_info import SHORT
from perf.tools.running.runs import PYTEST_INTERRUPTED, Runner, measure
from perf.tools.running.worktrees import checked_out, git


def candidates(good: str, bad: str, repo: Path) -> list[str]:
    """BAD's first-parent line after GOOD, oldest first (BAD last); a GateError where GOOD is not before."""
    if good == bad:
        raise GateError(f"GOOD and BAD are the same commit, {good[:SHORT]}; give an older GOOD")
    if git(repo, "merge-base", "--is-ancestor", good, bad).returncode != 0:
        raise GateError(f"GOOD {good[:SHORT]} is not an ancestor of BAD {bad[:SHORT]}; give an older GOOD")
    found = git(repo, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}").stdout.split()
    if not found or git(repo, "rev-parse", f"{found[0]}^").stdout.strip() != good:
        raise GateError(
            f"GOOD {good[:SHORT]} is not on BAD's first-parent line (a commit of a merged branch); "
            "give a commit of that line"
        )
    return found


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


def measurer(
    args: list[str], save: Path | None, repo: Path, runner_for: Callable[[Path], Runner], runs: int = 1
) -> Callable[[str], list[Results] | str]:
    """Measuring one commit of `repo` `runs` times back to back with the pytest arguments `args`, in one
    checkout (each result file kept as `save`/<short sha>-<i>.json where given, i from 1): its results,
    or why the selection cannot run there (any of its runs failed)."""

    def measure_commit(commit: str) -> list[Results] | str:
        with checked_out(commit, repo) as tree:
            runner = _interruptible(runner_for(tree))
            measured = []
            for i in range(1, runs + 1):
                path = None if save is None else save / f"{commit[:SHORT]}-{i}.json"
                try:
                    measured.append(measure(runner, args, commit[:SHORT], save=path))
                except GateError as err:  # the selection cannot run at this commit: skipped by the search
                    return str(err)
            return measured

    return measure_commit
