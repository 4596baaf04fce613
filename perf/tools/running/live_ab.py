"""The A/B measured live on this machine, clean and with a planted slowdown: how often the gate fails code
that changed nothing and how often it catches a known fault, here and now rather than replayed.

Each A/B is the gate's own (`python -m perf.tools.gate --base COMMIT -- ARGS`), run in a scratch worktree
of COMMIT: for a clean one with a line added to a file nothing measures (docs/), for a planted one with the
patch applied (a unified diff, `git apply`). Clean and planted A/Bs alternate, so that a drift of the machine
over the session falls on both. Each gate's output goes to its log, its runs to its folder.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from perf.storage import ROOT
from perf.tools.reading.errors import GateError
from perf.tools.reading.gate_logs import CLEAN, PLANTED, LiveAB, read_gate_log
from perf.tools.running import worktrees
from perf.tools.running.runs import run_child

# A file that no benchmark reads: a line added to it is a change that changes nothing measured.
UNMEASURED_FILE = Path("docs/README.md")

# Runs the gate as a command in a tree, its output into a file; returns the exit code.
GateCommand = Callable[[Sequence[str], Path, Path], int]


def run_gate(args: Sequence[str], tree: Path, log: Path) -> int:
    """The gate in `tree` (that tree's code is measured as head), its output into `log`."""
    with log.open("w") as output:
        return run_child([sys.executable, "-m", "perf.tools.gate", *args], tree, output)


def check_patch(patch: Path, commit: str, repo: Path = ROOT) -> None:
    """Refuses, in one line and before anything runs, a patch that is missing or does not apply to
    `commit`."""
    if not patch.is_file():
        raise GateError(
            f"--plant {patch}: no such file; give a unified diff (git diff > plant.diff); nothing was run"
        )
    with worktrees.checked_out(commit, repo) as tree:
        checked = worktrees.git(tree, "apply", "--check", str(patch.resolve()))
    if checked.returncode != 0:
        reason = (checked.stderr.strip().splitlines() or ["no reason given"])[0]
        raise GateError(f"--plant {patch}: does not apply to {commit[:12]} ({reason}); nothing was run")


def _prepare(tree: Path, kind: str, patch: Path) -> None:
    """The head of one kind: the plant applied, or a line added where nothing is measured."""
    if kind == PLANTED:
        applied = worktrees.git(tree, "apply", str(patch.resolve()))
        if applied.returncode != 0:
            raise GateError(f"--plant {patch}: did not apply ({applied.stderr.strip()})")
    else:
        with (tree / UNMEASURED_FILE).open("a") as docs:
            docs.write("\n<!-- a change that changes nothing measured -->\n")


def order(clean: int, planted: int) -> list[str]:
    """The kinds in the order they run: alternating, clean first, the rest of the larger count last."""
    kinds = []
    for i in range(max(clean, planted)):
        kinds += [CLEAN] * (i < clean) + [PLANTED] * (i < planted)
    return kinds


def run_live(
    patch: Path,
    pytest_args: Sequence[str],
    *,
    clean: int,
    planted: int,
    save: Path,
    gate_options: Sequence[str] = (),
    repo: Path = ROOT,
    gate: GateCommand = run_gate,
    say: Callable[[str], None] = print,
) -> list[LiveAB]:
    """`clean` and `planted` A/Bs of HEAD, alternating; one line said as each ends."""
    commit = worktrees.resolve_commit("HEAD", repo, "HEAD")
    check_patch(patch, commit, repo)
    save.mkdir(parents=True, exist_ok=True)
    done: list[LiveAB] = []
    kinds = order(clean, planted)
    with worktrees.terminating_as_interrupt():
        for number, kind in enumerate(kinds, 1):
            with worktrees.checked_out(commit, repo) as tree:
                _prepare(tree, kind, patch)
                name = f"{number:02d}_{kind}"
                args = ["--base", commit, "--save", str((save / name).resolve()), *gate_options]
                start = time.monotonic()
                code = gate([*args, "--", *pytest_args], tree, save / f"{name}.log")
                done.append(read_gate_log(kind, number, code, time.monotonic() - start, save / f"{name}.log"))
            last = done[-1]
            say(f"{number}/{len(kinds)} {kind}: {last.verdict} ({last.seconds / 60:.1f} min)")
    return done
