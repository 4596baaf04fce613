"""`python -m perf.tools.calibrate live` (perf/tools/running/live_ab.py) with a fake gate on a small git
repository: clean and planted A/Bs alternate in scratch worktrees of HEAD, the plant applied in the planted
ones only, a line added where nothing is measured in the clean ones; the figures count false alarms and
catches from the gates' logs; a plant that does not apply runs nothing; no worktree is left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf.tools import calibrate
from perf.tools.reading.errors import GateError
from perf.tools.reporting import calibration
from perf.tools.running import live_ab
from tests.test_worktrees import commit_all, git, worktree_paths


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "docs" / "README.md").write_text("docs\n")
    (repo / "speed.txt").write_text("1.00\n")
    commit_all(repo, "one")
    return repo


@pytest.fixture
def plant(repo, tmp_path) -> Path:
    (repo / "speed.txt").write_text("1.05\n")
    diff = tmp_path / "plant.diff"
    diff.write_text(git(repo, "diff"))
    git(repo, "checkout", "--", "speed.txt")
    return diff


class FakeGate:
    """A gate that fails where the tree runs slower (the plant applied) or always, as told."""

    def __init__(self, always_fails: bool = False):
        self.always_fails = always_fails
        self.calls: list[tuple[list[str], str, str]] = []

    def __call__(self, args, tree: Path, log: Path) -> int:
        speed = (tree / "speed.txt").read_text().strip()
        self.calls.append((list(args), speed, (tree / "docs" / "README.md").read_text()))
        if speed == "1.05" or self.always_fails:
            kernel = "  kernel attn_fwd: 1.0600x its time per call\n"
            log.write_text(f"gate output\nFAIL: 2 slower (1 undecided of 3)\n{kernel}")
            return 1
        log.write_text("PASS: none slower (3 undecided of 3; A/B against base 1a2b)\n")
        return 0


def test_clean_and_planted_alternate_and_are_counted(repo, plant, tmp_path):
    gate, said = FakeGate(), []
    done = live_ab.run_live(
        plant, ["-k", "attention"], clean=2, planted=3, save=tmp_path / "live", repo=repo, gate=gate,
        say=said.append,
    )  # fmt: skip
    assert [d.kind for d in done] == ["clean", "planted", "clean", "planted", "planted"]
    head = git(repo, "rev-parse", "HEAD").strip()
    assert all(
        args[:2] == ["--base", head] and args[-3:] == ["--", "-k", "attention"] for args, _, _ in gate.calls
    )
    assert [speed for _, speed, _ in gate.calls] == ["1.00", "1.05", "1.00", "1.05", "1.05"]
    assert all(("changes nothing measured" in docs) == (speed == "1.00") for _, speed, docs in gate.calls)
    assert calibration.live_summary(done)[:2] == [
        "clean A/Bs failed: 0 of 2 (false alarms)",
        "planted A/Bs caught: 3 of 3, a kernel named in 3",
    ]
    assert said[1].startswith("2/5 planted: FAIL: 2 slower") and done[1].kernels == ("attn_fwd",)
    assert sorted(p.name for p in (tmp_path / "live").glob("*.log"))[0] == "01_clean.log"
    assert worktree_paths(repo) == [str(repo)]
    markdown = calibration.live_markdown(done, "Live")
    assert "| 2 | planted | FAIL: 2 slower (1 undecided of 3) | attn_fwd |" in markdown


def test_a_gate_that_fails_clean_code_is_counted_as_false_alarms(repo, plant, tmp_path):
    done = live_ab.run_live(
        plant, [], clean=2, planted=0, save=tmp_path / "live", repo=repo, gate=FakeGate(always_fails=True),
        say=lambda line: None,
    )  # fmt: skip
    assert calibration.live_summary(done)[0] == "clean A/Bs failed: 2 of 2 (false alarms)"


def test_a_plant_that_does_not_apply_runs_nothing(repo, tmp_path, capsys):
    wrong = tmp_path / "wrong.diff"
    wrong.write_text("--- a/nothing.txt\n+++ b/nothing.txt\n@@ -1 +1 @@\n-a\n+b\n")
    gate = FakeGate()
    with pytest.raises(GateError, match=r"does not apply to .*; nothing was run"):
        live_ab.run_live(wrong, [], clean=1, planted=1, save=tmp_path / "live", repo=repo, gate=gate)
    assert gate.calls == [] and worktree_paths(repo) == [str(repo)]
    for argv, said in (
        (["live", "--plant", str(tmp_path / "none.diff"), "--save", str(tmp_path / "s")], "no such file"),
        (["live", "--plant", str(wrong), "--save", str(tmp_path / "s"), "--planted", "-1"], "--planted -1"),
        (
            ["live", "--plant", str(wrong), "--save", str(tmp_path / "s"), "--clean", "0", "--planted", "0"],
            "nothing",
        ),
    ):
        assert calibrate.main(argv) == 2
        assert said in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
