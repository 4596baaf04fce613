"""The gate's A/B mode (perf/tools/running/ab.py, perf/tools/reporting/ab_verdict.py) with a fake runner on a
small git repository: the ABBA order, the undecided measured again by node id, new and missing benchmarks, a
base that cannot run the selection; and once for real, `python -m perf.tools.gate --base HEAD` in a copy of
this checkout, ended normally and by a Ctrl-C."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perf.tools.judging.paired_rule import ABRun
from perf.tools.reading.errors import GateError
from perf.tools.reporting import ab_verdict
from perf.tools.running import ab
from tests.gate_files import stats, write_results
from tests.test_worktrees import commit_all, git, worktree_paths

ROOT = Path(__file__).resolve().parent.parent
SLOW, SAME, NOISY, MIXED = (
    f"perf/test_matmul.py::test_matmul[{n}]" for n in ("slow", "same", "noisy", "mixed")
)
NEW, GONE = "perf/test_matmul.py::test_matmul[new]", "perf/test_matmul.py::test_matmul[gone]"
# Each side's runs, in turn: a relative offset of NOISY's median per run (2%: undecided at a 1% threshold),
# head 1% slower in every pair; MIXED (where a test adds it): head 2% slower, then 2% faster, so never slower.
NOISY_OFFSETS = (0.02, -0.02, -0.02, 0.02, 0.0, 0.0, 0.0, 0.0)
MIXED_HEAD_OFFSETS = (0.02, -0.02, 0.0, 0.0)
ABBA_BAAB = ["base", "head", "head", "base", "head", "base", "base", "head"]  # the sides of 4 pairs, in turn


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "README").write_text("x\n")
    commit_all(repo, "one")
    return repo


class FakeRunner:
    """runner_for: each tree's runs write result files of fixed medians (ms); base's may fail instead."""

    def __init__(self, repo: Path, base_code: int = 0, base_kept: tuple[str, ...] = ()):
        self.repo, self.base_code, self.base_kept = repo, base_code, base_kept
        self.calls: list[tuple[str, list[str]]] = []
        self.medians = {
            "base": {SLOW: 10.0, SAME: 20.0, NOISY: 30.0, GONE: 5.0},
            "head": {SLOW: 10.5, SAME: 20.0, NOISY: 30.3, NEW: 5.0},
        }

    def __call__(self, tree: Path):
        side = "head" if tree == self.repo else "base"

        def run(args, json_path: Path) -> int:
            assert tree.is_dir()  # base's worktree exists while it runs
            run_number = sum(1 for s, _ in self.calls if s == side)
            self.calls.append((side, list(args)))
            picked = [a for a in args if "::" in a]
            medians = {n: m for n, m in self.medians[side].items() if not picked or n in picked}
            if NOISY in medians:
                medians[NOISY] *= 1 + NOISY_OFFSETS[run_number]
            if MIXED in medians and side == "head":
                medians[MIXED] *= 1 + MIXED_HEAD_OFFSETS[run_number]
            benchmarks = {n: stats(m * 1e-3, 0.001, seed=i) for i, (n, m) in enumerate(medians.items())}
            if side == "base" and self.base_code:
                kept = {n: s for n, s in benchmarks.items() if n in self.base_kept}
                if kept:
                    partial = write_results(json_path.with_name(json_path.stem + ".partial.json"), kept)
                    document = json.loads(partial.read_text())
                    document["perf"] = {"partial": "the session ended with exit code 1 (tests failed)"}
                    partial.write_text(json.dumps(document))
                return self.base_code
            write_results(json_path, benchmarks)
            return 0

        return run


def run(repo: Path, fake: FakeRunner, **kwargs) -> tuple[ABRun, list[str]]:
    said: list[str] = []
    result = ab.run_ab(
        "HEAD", ["perf/test_matmul.py", "-q"], repo=repo, runner_for=fake, say=said.append, **kwargs
    )
    assert worktree_paths(repo) == [str(repo)]
    return result, said


def test_abba_then_only_the_undecided_that_may_turn_slower_by_node_id_in_ba_ab_pairs(repo, tmp_path):
    fake = FakeRunner(repo)
    fake.medians["base"][MIXED] = fake.medians["head"][MIXED] = 40.0
    result, said = run(repo, fake, save=tmp_path / "kept")
    assert [side for side, _ in fake.calls] == ABBA_BAAB
    assert all(args == ["perf/test_matmul.py", "-q"] for _, args in fake.calls[:4])
    # The undecided alone, options kept; MIXED was faster at head in a pair: it can never be slower.
    assert all(args == [NOISY, "-q"] for _, args in fake.calls[4:])
    paired = result.paired
    assert paired.named("slower") == [SLOW] and paired.named("same") == [SAME]
    assert paired.named("unknown") == [MIXED, NOISY]  # undecided: reported, not failed
    assert (paired.new, paired.missing) == ([NEW], [GONE])
    settled = "; 1 more cannot turn slower (head faster in a pair)"
    assert said == [
        f"A/B: 1 undecided, measured again (pair 3 of at most 4){settled}",
        f"A/B: 1 undecided, measured again (pair 4 of at most 4){settled}",
    ]
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == [
        f"{i:02d}_{side}.json" for i, side in enumerate(ABBA_BAAB)
    ]
    lines = ab_verdict.report(result)
    head = git(repo, "rev-parse", "HEAD").strip()[:12]
    assert (
        lines[0]
        == lines[-1]
        == f"FAIL: 1 slower (1 same, 2 undecided of 4; A/B against base {head}, 4 runs + 2 pairs re-measured)"
    )
    assert lines[1] == "counts: 1 slower, 0 faster, 1 same, 2 unknown, 1 new, 1 missing"
    assert lines[2].startswith("rule: base and head alternately (ABBA")
    assert max(len(line) for line in lines[:6]) <= ab_verdict.WIDTH and lines[3].startswith("  ")
    text = "\n".join(lines)
    assert "base   10.0000 ms  head   10.5000 ms  ratio 1.0500" in text
    assert "pairs (head / base, wall): 1.0500 1.0500" in text
    assert "no kernel breakdown for test_matmul[slow]" in text
    assert "unknown after 4 pairs" in text and ab_verdict.exit_code(result) == 1


def test_max_pairs_two_measures_abba_only_and_unknown_passes(repo):
    fake = FakeRunner(repo)
    fake.medians["head"][SLOW] = 10.0
    result, said = run(repo, fake, max_pairs=2)
    assert len(fake.calls) == 4 and said == []
    assert ab_verdict.exit_code(result) == 0
    decided = "PASS: none slower (2 same, 1 undecided of 3; A/B against base"
    assert ab_verdict.decision(result).startswith(decided)


def test_base_failing_is_said_and_its_benchmarks_never_fail(repo):
    fake = FakeRunner(repo, base_code=1, base_kept=(SAME,))
    result, _ = run(repo, fake, max_pairs=2)
    assert result.paired.named("same") == [SAME] and result.paired.named("slower") == []
    assert sorted(result.paired.new) == sorted([SLOW, NOISY, NEW])
    text = "\n".join(ab_verdict.report(result))
    assert (
        "base could not run the selection: `pytest perf/test_matmul.py -q` on base failed with exit code 1"
        in text
    )
    assert "new (not on base, or failing there) (3):" in text
    assert ab_verdict.exit_code(result) == 0


def test_base_that_cannot_collect_the_selection_is_said_not_taken_for_an_interrupt(repo):
    # pytest exits 2 at a collection error (a module base lacks): the gate was not interrupted.
    result, _ = run(repo, FakeRunner(repo, base_code=2), max_pairs=2)
    text = "\n".join(ab_verdict.report(result))
    assert "on base stopped at collection (exit code 2): base cannot collect it" in text, text
    assert ab_verdict.exit_code(result) == 2  # nothing measured on both sides: no verdict, not 130


def test_markdown_summary_holds_the_decision_the_link_and_the_verdict_alone(repo):
    result, _ = run(repo, FakeRunner(repo), max_pairs=2)
    text = ab_verdict.markdown(result, "https://ci.example/run/7")
    lines = text.splitlines()
    assert lines[0] == f"## GPU gate (A/B) — {ab_verdict.decision(result)}"
    assert "https://ci.example/run/7" in lines[2]
    fenced = text.split("```")[1].strip().splitlines()
    assert fenced == ab_verdict.report(result)


def test_base_running_nothing_gives_no_verdict(repo):
    result, _ = run(repo, FakeRunner(repo, base_code=4), max_pairs=2)
    assert ab_verdict.exit_code(result) == 2
    assert ab_verdict.report(result)[0].startswith("NO VERDICT: no benchmark measured on both sides")


def test_a_failed_head_run_is_no_verdict_and_leaves_no_worktree(repo):
    fake = FakeRunner(repo)

    def runner_for(tree):
        inner = fake(tree)
        return (lambda args, path: 1) if tree == repo else inner

    with pytest.raises(GateError, match="failed with exit code 1; no verdict"):
        ab.run_ab("HEAD", ["perf/test_matmul.py"], repo=repo, runner_for=runner_for, say=lambda line: None)
    assert worktree_paths(repo) == [str(repo)]


def test_a_dirty_tree_is_said_in_one_line_and_a_bad_ref_runs_nothing(repo):
    (repo / "changed.py").write_text("x = 2\n")
    _, said = run(repo, FakeRunner(repo), max_pairs=2)
    head = git(repo, "rev-parse", "HEAD")[:12]
    assert said == [f"head: the working tree as it is, HEAD {head} with uncommitted changes"]
    fake = FakeRunner(repo)
    with pytest.raises(GateError, match=r"^--base nope: not a commit in this repository \(git rev-parse\)$"):
        ab.run_ab("nope", [], repo=repo, runner_for=fake)
    assert fake.calls == []


# --------------------------------------------------------------------------- real runs in a copy
def checkout_copy(tmp_path: Path) -> Path:
    """This working tree as it is (tracked and untracked files, not ignored ones), committed in a repository
    of its own: the gate there measures base HEAD against the same code."""
    copy = tmp_path / "copy"
    listed = git(ROOT, "ls-files", "-co", "--exclude-standard", "-z").split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    git(copy, "init", "-q")
    commit_all(copy, "copy")
    return copy


def gate_in(copy: Path, *args: str, **kwargs) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    return subprocess.Popen(
        [sys.executable, "-m", "perf.tools.gate", *args],
        cwd=copy,
        env={**env, "CUDA_VISIBLE_DEVICES": "", **kwargs.pop("env", {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # SIGINT as a terminal's job has it, even where this pytest ignores it (a background job).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        **kwargs,
    )


@pytest.mark.slow
def test_gate_base_head_for_real_leaves_no_worktree(tmp_path):
    copy = checkout_copy(tmp_path)
    gate = gate_in(
        copy,
        "--base",
        "HEAD",
        "--max-pairs",
        "2",
        "--threshold",
        "0.5",
        "--markdown",
        str(tmp_path / "summary.md"),
        "--",
        "perf/test_weighted_sum.py",
        "--device",
        "cpu",
        "-k",
        "forward and not backward",
        "-p",
        "no:cacheprovider",
        "--benchmark-max-time=0.02",
    )
    out, err = gate.communicate(timeout=300)
    assert gate.returncode in (0, 1), out + err
    head = git(copy, "rev-parse", "HEAD").strip()[:12]
    decision = [line for line in out.splitlines() if "A/B against base" in line]
    assert decision and decision[0].startswith(("PASS", "FAIL")) and head in decision[0], out + err
    assert worktree_paths(copy) == [str(copy)]
    assert (tmp_path / "summary.md").read_text().startswith(f"## GPU gate (A/B) — {decision[0]}")


@pytest.mark.parametrize("option", ["--baseline=x.json", "--current=x.json", "--remeasure=2", "--list=new"])
def test_options_of_the_stored_baseline_gate_are_refused_with_base_in_one_line(option, capsys):
    from perf.tools import gate

    assert gate.main(["--base", "HEAD", option]) == 2
    err = capsys.readouterr().err
    name = option.split("=")[0]
    assert err.count("\n") == 1 and f"{name} is not used with it" in err, err


@pytest.mark.slow
def test_ctrl_c_during_the_ab_exits_130_and_leaves_no_worktree(tmp_path):
    copy = checkout_copy(tmp_path)
    shutil.copy(ROOT / "tests/harness_samples/interrupted_bench.py", copy / "perf/test_zz_wait.py")
    commit_all(copy, "a benchmark that waits")  # in base and head alike
    marker = tmp_path / "waiting"
    gate = gate_in(
        copy,
        "--base",
        "HEAD",
        "--",
        "perf/test_zz_wait.py",
        "-p",
        "no:cacheprovider",
        "--benchmark-max-time=0.02",
        env={"STOP": "wait", "MARKER": str(marker)},
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and gate.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), "the benchmark never started waiting"
        assert len(worktree_paths(copy)) == 2  # base is running in its worktree
        gate.send_signal(signal.SIGINT)
        out, err = gate.communicate(timeout=120)
    finally:
        gate.kill()
    assert gate.returncode == 130, out + err
    assert err.splitlines()[-1].startswith("perf.tools.gate: interrupted: `pytest perf/test_zz_wait.py"), err
    assert "Traceback" not in err
    assert worktree_paths(copy) == [str(copy)]
    assert not list(Path(copy / ".git" / "worktrees").glob("*"))
