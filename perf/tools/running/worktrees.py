"""Another commit of this repository checked out beside it, for measuring it with the same Python: `git
worktree add --detach` into a temporary folder, removed again however the block ends (an exception, a
Ctrl-C, a SIGTERM through `terminating_as_interrupt`).

A pytest started in such a tree imports that tree's `model`, `kernels` and `perf` (pytest.ini's `pythonpath
= .`); the interpreter, its site-packages and the compile caches under the user's home and /tmp (Triton's,
TorchInductor's) are the same for both trees, so nothing that can be shared is built twice.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from perf.storage import ROOT
from perf.tools.reading.errors import GateError
from perf.tools.reading.run_info import SHORT
from perf.tools.running.runs import Runner, run_pytest_in
from perf.tools.running.scratch import alive

FOLDER_PREFIX = "perf-worktree-"  # the temporary folder that holds a worktree
OWNER_FILE = "owner.pid"  # beside the worktree: the process that made it, for remove_abandoned


def git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    """git -C `repo` ARGS, its output captured; a GateError where git is not installed."""
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise GateError("git: not found on PATH; measuring another commit needs it") from None


def resolve_commit(ref: str, repo: Path = ROOT, option: str = "--base") -> str:
    """The full sha of `ref`; a GateError of one line naming `option` and the ref where it names none."""
    found = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if found.returncode == 0 and found.stdout.strip():
        return found.stdout.strip()
    if git(repo, "rev-parse", "--git-dir").returncode != 0:
        raise GateError(f"{option} {ref}: {repo} is not a git checkout (git rev-parse)")
    raise GateError(f"{option} {ref}: not a commit in this repository (git rev-parse)")


def is_dirty(repo: Path = ROOT) -> bool:
    """Whether tracked files differ from HEAD or untracked files that git does not ignore exist: both are
    measured when the working tree is. Results under baselines/ (a `make baseline` not yet committed) are
    no code, and do not count."""
    return bool(git(repo, "status", "--porcelain", "--", ".", ":(exclude)baselines").stdout.strip())


def working_tree_state(repo: Path = ROOT) -> str:
    """'HEAD 1a2b3c4d5e6f with uncommitted changes' (or '..., clean'): what a run in the tree measures."""
    head = resolve_commit("HEAD", repo, "HEAD")
    return f"HEAD {head[:SHORT]} " + ("with uncommitted changes" if is_dirty(repo) else "clean")


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block has ended: a second Ctrl-C does not cut a clean-up short."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a held signal is delivered here


def _remove(repo: Path, tree: Path, folder: Path) -> None:
    with _signals_held():
        git(repo, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(folder, ignore_errors=True)
        git(repo, "worktree", "prune")  # forgets the tree where `remove` failed and the folder is gone


def remove_abandoned(repo: Path = ROOT) -> list[Path]:
    """Remove this repository's worktrees that a run killed outright (SIGKILL, a lost machine) left behind:
    those in a FOLDER_PREFIX folder whose OWNER_FILE names a process that no longer runs. Returns them."""
    listed = git(repo, "worktree", "list", "--porcelain").stdout.splitlines()
    removed = []
    for line in listed:
        tree = Path(line.removeprefix("worktree ")) if line.startswith("worktree ") else None
        if tree is None or not tree.parent.name.startswith(FOLDER_PREFIX):
            continue
        try:
            owner = int((tree.parent / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not one of ours, or being made this moment: left alone
        if not alive(owner):
            _remove(repo, tree, tree.parent)
            removed.append(tree)
    return removed


@contextlib.contextmanager
def checked_out(commit: str, repo: Path = ROOT) -> Iterator[Path]:
    """`commit` checked out (detached) in a temporary folder for the block's duration; removed on every
    exit, registered worktree and folder both. Worktrees that killed runs left behind are removed first,
    each said in one line on stderr."""
    for tree in remove_abandoned(repo):
        print(f"removed the worktree {tree}, left behind by a run that was killed", file=sys.stderr)
    folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
    (folder / OWNER_FILE).write_text(str(os.getpid()))
    tree = folder / commit[:SHORT]
    try:
        added = git(repo, "worktree", "add", "--detach", str(tree), commit)
        if added.returncode != 0:
            reason = (added.stderr.strip().splitlines() or ["no reason given"])[-1]
            raise GateError(f"{commit[:SHORT]}: cannot be checked out beside this tree ({reason})")
        yield tree
    finally:
        _remove(repo, tree, folder)


@contextlib.contextmanager
def terminating_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt while the block runs, so that it unwinds `checked_out` as a Ctrl-C
    does (Python's default for SIGTERM ends the process at once, leaving the worktree behind). While a
    child pytest runs, runs.forwarding_signals passes it on instead."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def runner_in(tree: Path) -> Runner:
    """runs.run_pytest, started in `tree` instead of the repository root: that tree's code is measured."""

    return functools.partial(run_pytest_in, tree)
