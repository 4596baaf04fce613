"""`python -m perf.tools.bisect`: the search (perf/tools/judging/bisect_search.py) on made-up results, a
slowdown planted at every position of 16 commits (25%, and 2% at 0.2% noise with the defaults), no false
slowdown where none was made, an undecided benchmark, skipped commits; the command line (perf/tools/bisect.py)
on small git repositories with fake pytest runners (exact, noisy, on a GPU whose clock moves), its refusals;
and real runs in a clone of this repository, a benchmark slowed by a sleep at one commit, and a SIGTERM."""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perf.tools import bisect
from perf.tools.judging.bisect_search import BAD, GOOD, SKIPPED, Rule, expected_measurements, search
from perf.tools.reading.errors import GateError
from perf.tools.reading.results import Results
from perf.tools.reading.timings import GPU, WALL, Timing

ROOT = Path(__file__).resolve().parent.parent
NAMES = [f"perf/test_x.py::test_x[case{i}]" for i in range(4)]
COMMITS = [f"{i:02d}" + "c" * 38 for i in range(16)]  # 16 candidates; BAD is the last
GOOD_SHA = "g" * 40
SLOWED = NAMES[2]
KERNELS_US = {"attention_kernel": 500.0, "mlp_kernel": 400.0, "norm_kernel": 150.0}  # of each GPU benchmark
NO_SLOWDOWN = "no slowdown between GOOD and BAD in this selection"


# --------------------------------------------------------------------------- made-up results
def results(medians: dict[str, float], se_share: float = 0.002, gpu: dict[str, float] | None = None,
            methods: dict[str, str] | None = None) -> Results:  # fmt: skip
    """One run's results: wall medians (s), each with a standard error of `se_share` of it; GPU times too."""
    gpu = gpu or {}
    timings = {name: Timing(m, m * se_share) for name, m in medians.items()}
    gpu_timings = {name: Timing(m, m * se_share) for name, m in gpu.items()}
    # As load_results reads them: gpu_method where a GPU time was recorded, "isolated" where none is named.
    gpu_methods = {name: (methods or {}).get(name, "isolated") for name in gpu}
    return Results(Path("fake.json"), "the CPU (test)", timings, gpu_timings, gpu_methods=gpu_methods)


def planted(first_bad: int | None, factor=1.25, noise=0.004, seed=0, gauss=False, se_share=0.002):
    """measure(commit): 2 runs, every benchmark at (i + 1) ms, each run off by noise of its own (uniform
    within +-noise, or normal of sd `noise`); SLOWED `factor` times slower from candidate `first_bad` on
    (None: never). Counts the commits measured."""
    measured: list[str] = []

    def measure(commit: str) -> list[Results]:
        measured.append(commit)
        index = -1 if commit == GOOD_SHA else COMMITS.index(commit)
        rng = random.Random(f"{seed}-{index}")
        slow = factor if first_bad is not None and index >= first_bad else 1.0
        off = (lambda: rng.gauss(0, noise)) if gauss else (lambda: rng.uniform(-noise, noise))
        return [results({n: (i + 1) * 1e-3 * (1 + off()) * (slow if n == SLOWED else 1)
                         for i, n in enumerate(NAMES)}, se_share) for _ in range(2)]  # fmt: skip

    return measure, measured


def same(**medians_and_gpu) -> list[Results]:
    return [results(**medians_and_gpu) for _ in range(2)]


def steps_of(answer) -> list[tuple[str, str, str]]:
    return [(step.commit[:2], step.verdict, step.note) for step in answer.steps]


# --------------------------------------------------------------------------- the search
@pytest.mark.parametrize("position", range(len(COMMITS)))
@pytest.mark.parametrize(("factor", "noise", "gauss"), [(1.25, 0.004, False), (1.02, 0.002, True)],
                         ids=["25% at 0.4% uniform", "2% at 0.2% sd"])  # fmt: skip
def test_a_slowdown_planted_anywhere_is_found_in_five_measured_commits(position, factor, noise, gauss):
    # The A/B's rule at its defaults (1%, z 3, bounded over every probe the search may measure).
    measure, measured = planted(position, factor, noise, seed=position, gauss=gauss)
    answer = search(GOOD_SHA, COMMITS, measure)
    assert answer.first_bad == COMMITS[position], steps_of(answer)
    assert answer.comparison == (GOOD_SHA if position == 0 else COMMITS[position - 1])
    assert answer.unmeasured == ()
    assert [f.name for f in answer.slowed] == [SLOWED]
    assert answer.slowed[0].ratio == pytest.approx(factor, rel=0.01)
    assert answer.measured == len(measured) == len(set(measured))
    assert answer.runs == 2 * answer.measured
    # GOOD and four halvings; BAD itself needs one more, to confirm it is slower at all.
    assert answer.measured <= expected_measurements(16) + (position == len(COMMITS) - 1), measured
    assert measured[0] == GOOD_SHA


@pytest.mark.parametrize("seed", range(20))
def test_an_unchanged_range_at_low_noise_gives_no_false_slowdown(seed):
    measure, measured = planted(None, noise=0.002, seed=seed, gauss=True)
    answer = search(GOOD_SHA, COMMITS, measure)
    assert answer.first_bad is None and answer.reason == NO_SLOWDOWN, steps_of(answer)
    assert len(measured) == expected_measurements(len(COMMITS)) + 1  # GOOD, the halvings up to BAD


def test_a_noisy_unchanged_range_ends_with_no_slowdown():
    # 2% noise, each run's rounds as noisy: within the threshold and the noise bound, never slower. (Runs
    # 2% apart whose rounds say 0.2% are not bounded so without a noise profile: NOTES.md.)
    measure, measured = planted(None, noise=0.02, seed=7, se_share=0.02)
    answer = search(GOOD_SHA, COMMITS, measure, Rule(threshold=0.03))
    assert answer.first_bad is None and answer.reason == NO_SLOWDOWN
    assert {step.verdict for step in answer.steps} == {GOOD}
    assert measured[-1] == COMMITS[-1]  # BAD measured to be sure


def test_after_a_bad_commit_the_midpoint_decides_not_the_threshold():
    # SLOWED is 1.6x from candidate 4 on; candidate 3 reads 4% slower, beyond the 3% threshold and its
    # noise bound, but much nearer GOOD than the slower commits: good.
    def measure(commit: str) -> list[Results]:
        index = -1 if commit == GOOD_SHA else COMMITS.index(commit)
        factor = 1.6 if index >= 4 else 1.04 if index == 3 else 1.0
        return same(medians={n: 1e-3 * (factor if n == SLOWED else 1.0) for n in NAMES}, se_share=0.001)

    answer = search(GOOD_SHA, COMMITS, measure, Rule(threshold=0.03))
    assert answer.first_bad == COMMITS[4]
    verdicts = {step.commit: step.verdict for step in answer.steps}
    assert verdicts[COMMITS[3]] == GOOD and verdicts[COMMITS[7]] == BAD
    assert "of the way" in next(step.note for step in answer.steps if step.commit == COMMITS[3])


def test_of_two_slowdowns_the_first_is_found():
    def measure(commit: str) -> list[Results]:
        index = -1 if commit == GOOD_SHA else COMMITS.index(commit)
        medians = dict.fromkeys(NAMES, 1e-3)
        medians[NAMES[0]] *= 1.3 if index >= 9 else 1.0  # the larger, later one
        medians[NAMES[1]] *= 1.2 if index >= 2 else 1.0
        return same(medians=medians)

    assert search(GOOD_SHA, COMMITS, measure).first_bad == COMMITS[2]


def test_an_undecided_benchmark_never_makes_a_commit_bad():
    # SLOWED 2% slower at every commit after GOOD, but its runs 3% apart: the rule cannot say slower
    # (UNKNOWN), and nothing else moved.
    def measure(commit: str) -> list[Results]:
        factor = 1.0 if commit == GOOD_SHA else 1.02
        return [results({n: 1e-3 * (factor * jitter if n == SLOWED else 1.0) for n in NAMES})
                for jitter in (0.985, 1.015)]  # fmt: skip

    steps = []
    answer = search(GOOD_SHA, COMMITS, measure, on_step=steps.append)
    assert answer.first_bad is None and {s.verdict for s in steps} == {GOOD}
    assert "undecided" in steps[1].note


def test_a_commit_that_cannot_run_is_skipped_for_its_neighbour():
    measure, _ = planted(10)
    steps = []

    def failing_at_7(commit: str) -> list[Results] | str:
        return "`pytest ...` failed with exit code 1" if commit == COMMITS[7] else measure(commit)

    answer = search(GOOD_SHA, COMMITS, failing_at_7, on_step=steps.append)
    assert answer.first_bad == COMMITS[10]
    skipped = (COMMITS[7], SKIPPED, "`pytest ...` failed with exit code 1")
    assert (steps[1].commit, steps[1].verdict, steps[1].note) == skipped
    assert steps[2].commit in (COMMITS[6], COMMITS[8])  # the nearest to the middle instead
    assert answer.steps == tuple(steps)


def test_skipped_commits_just_before_the_first_bad_one_are_named():
    measure, _ = planted(6)
    answer = search(GOOD_SHA, COMMITS, lambda c: "cannot run" if c == COMMITS[5] else measure(c))
    assert answer.first_bad == COMMITS[6]
    assert answer.unmeasured == (COMMITS[5],)
    assert answer.comparison == COMMITS[4]


def test_good_that_cannot_run_is_an_error_and_bad_that_cannot_run_no_answer():
    measure, _ = planted(None)
    with pytest.raises(GateError, match=r"^GOOD gggggggggggg: the selection cannot run there"):
        search(GOOD_SHA, COMMITS, lambda c: "no" if c == GOOD_SHA else measure(c))
    answer = search(GOOD_SHA, COMMITS, lambda c: "exit code 4" if c == COMMITS[-1] else measure(c))
    assert answer.first_bad is None
    assert answer.reason == f"BAD {COMMITS[-1][:12]} could not be measured (exit code 4)"


def test_the_figure_is_gpu_time_only_where_both_sides_measured_it_alike():
    names = NAMES[:3]
    gpu = dict.fromkeys(names[:2], 5e-4)

    def measure(commit: str) -> list[Results]:
        factor = 1.0 if commit == GOOD_SHA else 1.3
        # names[1]: burst at GOOD, isolated (no gpu_method) after; names[2]: no GPU time at all.
        methods = {names[1]: "burst"} if commit == GOOD_SHA else {}
        scaled = {n: m * factor for n, m in gpu.items()}
        return same(medians={n: 1e-3 * factor for n in names}, gpu=scaled, methods=methods)

    answer = search(GOOD_SHA, COMMITS[:2], measure)
    assert answer.first_bad == COMMITS[0]
    assert {f.name: f.figure for f in answer.slowed} == {names[0]: GPU, names[1]: WALL, names[2]: WALL}


# --------------------------------------------------------------------------- the command line
def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    # --allow-empty: the tools copied into a clone are often those it already has.
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def result_file(path: Path, medians: dict[str, float], infos: dict[str, dict] | None = None) -> None:
    """A result file as `pytest --benchmark-json` writes it, 20 rounds with a 1% IQR each: on the CPU, or,
    with each benchmark's extra_info in `infos`, on a GPU of no baselines folder here."""
    entries = [{"fullname": n, "stats": {"median": m, "rounds": 20, "iqr": m * 0.01},
                "extra_info": (infos or {}).get(n, {})} for n, m in medians.items()]  # fmt: skip
    cpu, gpu = {"device": "cpu", "cpu_model": "test"}, {"device": "cuda", "gpu": {"name": "NVIDIA Test"}}
    path.write_text(json.dumps({"machine_info": {"perf": gpu if infos else cpu}, "benchmarks": entries}))


def gpu_file(path: Path, rng: random.Random, kernel: float, clock: float, noise: float = 0.002) -> None:
    """A GPU run whose clock moves every kernel alike (within +-clock), each kernel and the wall time off by a
    normal `noise` too, SLOWED's kernel `kernel` times slower; its kernel tables in extra_info gpu_kernels."""
    speed, medians, infos = 1 + rng.uniform(-clock, clock), {}, {}
    for i, name in enumerate(NAMES):
        grown = {"attention_kernel": kernel if name == SLOWED else 1.0}
        us = {k: x * (i + 1) * speed * grown.get(k, 1) * (1 + rng.gauss(0, noise))
              for k, x in KERNELS_US.items()}  # fmt: skip
        table = [{"kernel": k, "launches": 1.0, "us": x} for k, x in us.items()]
        gpu_ms = sum(us.values()) / 1e3
        infos[name] = {"gpu_ms": gpu_ms, "gpu_calls": 20, "gpu_ms_iqr": gpu_ms * 0.01, "gpu_method": "burst",
                       "gpu_kernels": table}  # fmt: skip
        medians[name] = gpu_ms * 1.05e-3 * (1 + rng.gauss(0, noise))
    result_file(path, medians, infos)


def line_repo(folder: Path, plans: list[dict]) -> list[str]:
    """A repository of one commit per plan, GOOD first, each plan (with its index) in the file `plan`."""
    folder.mkdir()
    git(folder, "init", "-q")
    for i, plan in enumerate(plans):
        (folder / "plan").write_text(json.dumps({**plan, "which": i}))
        commit_all(folder, f"change {i}")
    return git(folder, "rev-list", "--reverse", "HEAD").split()


@pytest.fixture
def repo(tmp_path) -> tuple[Path, list[str]]:
    """Eight commits; each one's factor on SLOWED in its plan (1.5 from the sixth on); the fourth fails."""
    plans = [{"slow": 1.5 if i >= 5 else 1.0, "broken": i == 3} for i in range(8)]
    return tmp_path / "repo", line_repo(tmp_path / "repo", plans)


def fake_runner(calls: list[str] | None = None, seed: int = 0, noise: float = 0.0, clock: float | None = None,
                broken: int = 1):  # fmt: skip
    """Each run writes its tree's plan: every benchmark 1 ms, SLOWED `slow` times slower, off by a normal
    `noise` of the run's own; on a GPU where `clock` is given (`gpu_file`). A broken commit exits `broken`."""
    count = itertools.count()

    def runner_for(tree: Path):
        def run(args, json_path: Path) -> int:
            plan = json.loads((tree / "plan").read_text())
            (calls if calls is not None else []).append(tree.name)
            rng = random.Random(f"{seed}-{plan['which']}-{next(count)}")
            if plan.get("broken"):
                return broken
            if clock is not None:
                gpu_file(json_path, rng, plan.get("kernel", 1.0), clock)
            else:
                slow = {SLOWED: plan.get("slow", 1.0)}
                result_file(json_path, {n: 1e-3 * (1 + rng.gauss(0, noise)) * slow.get(n, 1) for n in NAMES})
            return 0

        return run

    return runner_for


def run_main(capsys, repo: Path, *argv: str, calls: list[str] | None = None) -> tuple[int, str, str]:
    code = bisect.main(list(argv), repo=repo, runner_for=fake_runner(calls))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_names_the_first_slower_commit_and_leaves_no_worktree(repo, capsys, tmp_path):
    repo, shas = repo
    calls: list[str] = []
    save = tmp_path / "kept"
    argv = (shas[0], shas[-1], "--save", str(save), "--", "-k", "x")
    code, out, err = run_main(capsys, repo, *argv, calls=calls)
    assert code == 0, out + err
    assert f"first slower commit: {shas[5]} change 5" in out
    assert "compared with its parent, " + shas[4][:12] in out
    assert "wall      1.000 ->      1.500 ms  1.500x  test_x[case2]" in out
    # change 3, the first middle, fails at its first run and is skipped: not counted as measured.
    measured = sorted(set(calls) - {shas[3][:12]})
    assert len(measured) == 4 and len(calls) == 9 and calls.count(shas[3][:12]) == 1
    lines = out.splitlines()
    assert lines[-1] == "found in 4 measured commits (8 runs) of 8 (GOOD and the 7 after it)"
    assert lines[0].endswith(", 2 runs each: pytest perf/ -k x")
    assert lines[1].startswith("noise profile: no baselines/cpu-test/noise.json; standard errors from")
    assert lines[2].startswith(f"[1/~4] {shas[0][:12]} GOOD    change 0: the reference")
    assert sorted(p.name for p in save.iterdir()) == sorted(f"{c}-{i}.json" for c in measured for i in (1, 2))
    assert git(repo, "worktree", "list").count("\n") == 1


def test_a_commit_that_fails_is_skipped_in_one_line(repo, capsys):
    repo, shas = repo
    # candidates 1..7: the first probe is the middle one, change 3, which fails.
    code, out, _ = run_main(capsys, repo, shas[0], shas[-1], "--", "-k", "x")
    assert code == 0
    (skipped,) = [line for line in out.splitlines() if " skipped " in line]
    said = f"[2/~4] {shas[3][:12]} skipped change 3: `pytest perf/ -k x` failed with exit code 1"
    assert skipped.startswith(said)
    assert f"first slower commit: {shas[5]}" in out


def test_a_commit_that_cannot_collect_is_skipped_not_taken_for_an_interrupt(repo, capsys):
    # pytest exits 2 at a collection error; an interrupt passed on reaches the tool as KeyboardInterrupt.
    repo, shas = repo

    code = bisect.main([shas[0], shas[-1], "--", "-k", "x"], repo=repo, runner_for=fake_runner(broken=2))
    out = capsys.readouterr().out
    assert code == 0 and f"first slower commit: {shas[5]}" in out, out
    assert "pytest stopped at collection (exit code 2): the commit cannot collect it" in out


def test_an_unchanged_range_exits_1(repo, capsys):
    repo, shas = repo
    code, out, _ = run_main(capsys, repo, shas[0], shas[2], "--", "-k", "x")
    assert code == 1
    assert out.splitlines()[-1] == NO_SLOWDOWN


NO_SELECTION = (
    "no selection: give the benchmarks to measure after --, e.g. -- perf/test_attention.py -k forward"
)
NOT_BEFORE = "GOOD {head} is not an ancestor of BAD {head2}; give an older GOOD"
NOT_A_FRACTION = "--threshold 2: accepted is a fraction > 0 and < 1, e.g. 0.01"
NOT_RUNS = "--runs {runs}: accepted is a whole number of runs >= 1, e.g. 2"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nope", "HEAD", "--", "-k", "x"], "GOOD nope: not a commit in this repository (git rev-parse)"),
        (["HEAD~7", "zzz", "--", "-k", "x"], "BAD zzz: not a commit in this repository (git rev-parse)"),
        (["HEAD", "HEAD", "--", "-k", "x"], "GOOD and BAD are the same commit, {head}; give an older GOOD"),
        (["HEAD", "HEAD~2", "--", "-k", "x"], NOT_BEFORE),
        (["HEAD~2", "HEAD"], NO_SELECTION),
        (["HEAD~2", "HEAD", "--"], NO_SELECTION),
        (["HEAD~2", "HEAD", "--threshold", "2", "--", "-k", "x"], NOT_A_FRACTION),
        (["HEAD~2", "HEAD", "--runs", "0", "--", "-k", "x"], NOT_RUNS.replace("{runs}", "0")),
        (["HEAD~2", "HEAD", "--runs", "abc", "--", "-k", "x"], NOT_RUNS.replace("{runs}", "abc")),
        (["HEAD~2", "HEAD", "--runs", "-1", "--", "-k", "x"], NOT_RUNS.replace("{runs}", "-1")),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2_with_nothing_run(repo, capsys, argv, message):
    repo, shas = repo
    calls: list[str] = []
    code, out, err = run_main(capsys, repo, *argv, calls=calls)
    assert code == 2
    assert err == f"perf.tools.bisect: error: {message.format(head=shas[-1][:12], head2=shas[-3][:12])}\n"
    assert calls == [] and out == ""


def test_a_dirty_tree_is_said_when_bad_is_head(repo, capsys):
    repo, shas = repo
    (repo / "plan").write_text("{}")
    code, out, _ = run_main(capsys, repo, shas[4], "HEAD", "--", "-k", "x")
    assert code == 0
    assert out.splitlines()[0] == (
        "note: BAD is HEAD and this tree has uncommitted changes: they are not part of any commit measured"
    )
    code, out, _ = run_main(capsys, repo, shas[4], shas[6], "--", "-k", "x")
    assert "uncommitted" not in out


# --------------------------------------------------------------------------- the command line on noisy runs
# --------------------------------------------------------------------------- a real run in a clone
# The tools as checked out here, every module of their floors (perf/tools/*/), and the results database that
# imports them: they replace the clone's own copies whole, so that no module of another layout is left there.
COPIED = ("perf/tools", "perf/history")
# A call of about 13 ms on a CPU (65536 rows): a scheduler's hiccups are a small share of it, where a 0.5 ms
# call (the tier's 4096 rows) once read 1.63x slower on a commit that changed nothing.
SELECTION = [
    "perf/test_weighted_sum.py", "-k", "torch and forward and not backward", "--device", "cpu",
    "--weighted-sum-rows", "65536",
]  # fmt: skip
ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> tuple[Path, list[str]]:
    """This repository cloned, this checkout's tools in its first commit (GOOD), then five commits; the fourth
    adds a 200 ms sleep to the weighted-sum forward step, about 16x its CPU time (13 ms)."""
    clone = tmp_path_factory.mktemp("bisect") / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    for folder in COPIED:
        shutil.rmtree(clone / folder, ignore_errors=True)
        shutil.copytree(ROOT / folder, clone / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shas = [commit_all(clone, "the tools as checked out")]
    workload = clone / "perf/workloads/weighted_sum.py"
    for i in range(1, 6):
        if i == 4:
            text = workload.read_text().replace(
                "        def step() -> torch.Tensor:\n",
                "        def step() -> torch.Tensor:\n            __import__('time').sleep(0.2)\n",
            )
            assert "sleep" in text
            workload.write_text(text)
        else:
            (clone / "docs" / "bisect-note.md").write_text(f"note {i}\n")
        shas.append(commit_all(clone, f"step {i}" + (": a sleep in the forward" if i == 4 else "")))
    return clone, shas


@pytest.mark.slow
@pytest.mark.alone  # it times the host: other tests at once would move GOOD's figure
def test_a_real_run_finds_the_commit_that_slept(clone):
    clone, shas = clone
    # --threshold 0.9: the sleep makes the call about 16 times slower; a CPU's own hiccups stay below it.
    command = [sys.executable, "-m", "perf.tools.bisect", shas[0], shas[-1], "--threshold", "0.9"]
    done = subprocess.run(
        [*command, "--", *SELECTION], cwd=clone, env=ENV, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = "\n".join(line for line in done.stdout.splitlines() if line.startswith(("[", "first", "found")))
    assert f"first slower commit: {shas[4]} step 4: a sleep in the forward" in done.stdout, said
    assert "test_weighted_sum[fp32-rows65536-torch-forward]" in done.stdout.split("first slower commit")[1]
    assert git(clone, "worktree", "list").count("\n") == 1


def _processes_in(folder: Path, command: str = "") -> list[int]:
    """The processes working in `folder` (their cwd under it) whose command line has `command`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(folder) in os.readlink(proc / "cwd"):
                if command.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_a_sigterm_mid_run_leaves_no_worktree_and_no_child(clone):
    clone, shas = clone
    tool = subprocess.Popen(
        [sys.executable, "-m", "perf.tools.bisect", shas[0], shas[-1], "--", *SELECTION],
        cwd=clone, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline, trees = time.monotonic() + 120, []
        while not trees and time.monotonic() < deadline and tool.poll() is None:
            listed = git(clone, "worktree", "list", "--porcelain").splitlines()
            trees = [Path(line.split()[1]) for line in listed[1:] if line.startswith("worktree ")]
            trees = [tree for tree in trees if _processes_in(tree, "pytest")]  # its pytest has started
            time.sleep(0.05)
        assert trees, "no pytest started in a worktree"
        time.sleep(1)  # into its collection or its rounds
        tool.send_signal(signal.SIGTERM)
        out, err = tool.communicate(timeout=120)
    finally:
        tool.kill()
    assert tool.returncode == 130, out + err
    said = "perf.tools.bisect: interrupted: `pytest perf/test_weighted_sum.py"  # the run's own interrupt
    assert err.splitlines()[-1].startswith(said), err
    assert "Traceback" not in err
    assert git(clone, "worktree", "list").count("\n") == 1
    assert not trees[0].exists() and _processes_in(trees[0]) == []
