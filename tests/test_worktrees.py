"""perf/tools/running/worktrees.py on a small git repository of its own: resolving refs, the working tree's
state, a commit checked out beside it and removed however the block ends, and a pytest there importing that
tree's packages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perf.tools.reading.errors import GateError
from perf.tools.running import worktrees

ROOT = Path(__file__).resolve().parent.parent


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    """Two commits: `perf/__init__.py` says VERSION = 1, then 2; pytest.ini makes the root the import root."""
    repo = tmp_path / "repo"
    (repo / "perf").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    (repo / "test_which.py").write_text(
        "import os, pathlib, perf\n"
        "def test_which():\n"
        "    pathlib.Path(os.environ['WHICH']).write_text(f'{perf.__file__} {perf.VERSION}')\n"
    )
    for version in (1, 2):
        (repo / "perf" / "__init__.py").write_text(f"VERSION = {version}\n")
        commit_all(repo, f"version {version}")
    return repo


def worktree_paths(repo: Path) -> list[str]:
    listed = git(repo, "worktree", "list", "--porcelain").splitlines()
    return [line.split()[1] for line in listed if line.startswith("worktree ")]


def test_resolve_gives_the_full_sha_and_a_bad_ref_one_line(repo, tmp_path):
    assert worktrees.resolve_commit("HEAD~1", repo) == git(repo, "rev-parse", "HEAD~1").strip()
    with pytest.raises(GateError) as bad:
        worktrees.resolve_commit("nope", repo)
    assert str(bad.value) == "--base nope: not a commit in this repository (git rev-parse)"
    outside = tmp_path / "plain"
    outside.mkdir()
    with pytest.raises(GateError, match=r"^--base HEAD: .*plain is not a git checkout \(git rev-parse\)$"):
        worktrees.resolve_commit("HEAD", outside)


def test_working_tree_state_says_whether_changes_are_measured(repo):
    head = git(repo, "rev-parse", "HEAD").strip()
    assert worktrees.working_tree_state(repo) == f"HEAD {head[:12]} clean"
    (repo / "baselines" / "gpu").mkdir(parents=True)
    (repo / "baselines" / "gpu" / "0001_new.json").write_text("{}")  # `make baseline` not committed: no code
    assert worktrees.working_tree_state(repo) == f"HEAD {head[:12]} clean"
    (repo / "new.py").write_text("x = 1\n")  # untracked and not ignored: a run here measures it
    assert worktrees.working_tree_state(repo) == f"HEAD {head[:12]} with uncommitted changes"
    assert worktrees.is_dirty(repo)


def test_checked_out_tree_holds_the_commit_and_is_removed_after(repo):
    first = worktrees.resolve_commit("HEAD~1", repo)
    with worktrees.checked_out(first, repo) as tree:
        assert (tree / "perf" / "__init__.py").read_text() == "VERSION = 1\n"
        assert len(worktree_paths(repo)) == 2
    assert not tree.exists() and not tree.parent.exists()
    assert worktree_paths(repo) == [str(repo)]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_checked_out_tree_is_removed_when_the_block_raises(repo, error):
    head = worktrees.resolve_commit("HEAD", repo)
    with pytest.raises(error), worktrees.checked_out(head, repo) as tree:
        (tree / "scratch.txt").write_text("uncommitted in the worktree: removed with --force")
        raise error
    assert not tree.parent.exists()
    assert worktree_paths(repo) == [str(repo)]


# SIGTERM while the block runs between child runs: it must unwind and remove the tree.
HOLDER = """
import sys, time
from pathlib import Path
from perf.tools.running import worktrees
repo, marker = Path(sys.argv[1]), Path(sys.argv[2])
try:
    head = worktrees.resolve_commit("HEAD", repo)
    with worktrees.terminating_as_interrupt(), worktrees.checked_out(head, repo):
        marker.touch()
        time.sleep(60)
except KeyboardInterrupt:
    sys.exit(130)
"""


def start_holder(repo: Path, tmp_path: Path) -> subprocess.Popen:
    """HOLDER in a process of its own, returned once it is inside its worktree."""
    marker = tmp_path / "inside"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(repo), str(marker)], env=env)
    deadline = time.monotonic() + 30
    while not marker.exists() and holder.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not marker.exists():
        holder.kill()
        pytest.fail("the holder never got inside its worktree")
    return holder


def test_sigterm_between_runs_unwinds_and_removes_the_tree(repo, tmp_path):
    holder = start_holder(repo, tmp_path)
    try:
        assert len(worktree_paths(repo)) == 2
        holder.send_signal(signal.SIGTERM)
        assert holder.wait(timeout=30) == 130
    finally:
        holder.kill()
    assert worktree_paths(repo) == [str(repo)]


def test_a_tree_left_by_a_killed_run_is_removed_by_the_next_and_a_live_ones_is_not(repo, tmp_path, capsys):
    holder = start_holder(repo, tmp_path)
    try:
        head = worktrees.resolve_commit("HEAD", repo)
        with worktrees.checked_out(head, repo):  # the holder still runs: its tree stays
            assert len(worktree_paths(repo)) == 3
        holder.kill()  # SIGKILL: no clean-up of its own
        holder.wait(timeout=30)
    finally:
        holder.kill()
    left = [Path(p) for p in worktree_paths(repo)[1:]]
    assert len(left) == 1 and left[0].exists()
    capsys.readouterr()
    with worktrees.checked_out(head, repo):
        assert len(worktree_paths(repo)) == 2  # the new one only
    assert not left[0].parent.exists() and worktree_paths(repo) == [str(repo)]
    assert f"removed the worktree {left[0]}, left behind by a run that was killed" in capsys.readouterr().err


def test_runner_in_a_tree_imports_that_trees_packages(repo, tmp_path, monkeypatch):
    which = tmp_path / "which.txt"
    monkeypatch.setenv("WHICH", str(which))
    first = worktrees.resolve_commit("HEAD~1", repo)
    with worktrees.checked_out(first, repo) as tree:
        args = ["-q", "-p", "no:cacheprovider", "test_which.py"]
        assert worktrees.runner_in(tree)(args, tmp_path / "r.json") == 0
        assert which.read_text() == f"{tree / 'perf' / '__init__.py'} 1"
