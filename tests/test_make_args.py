"""`make bench`, `make baseline` and `make gate` give ARGS to pytest as pytest takes them: a path or node id
in ARGS selects instead of perf/, options keep their values, and `make bench` still compares with the
newest baseline of this GPU (or CPU) unless ARGS names one (`--benchmark-compare=NUM`).

Most tests run make with PY replaced by a Python that prints the arguments it was given (what the shell
made of the recipe and ARGS) and nothing else: well under a second each. Two run pytest for real with
--collect-only (a few seconds each) and check what pytest made of them: the files collected and the
baseline compared with.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perf.tools import gate

ROOT = Path(__file__).resolve().parent.parent
MAKE = shutil.which("make")
ECHO_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"
# The issue's form: the path after --benchmark-compare became its value, and all of perf/ ran.
ISSUE_ARGS = "perf/test_end_to_end.py -k train_step"

pytestmark = pytest.mark.skipif(MAKE is None, reason="needs GNU make")


def make(target: str, args: str, *, py: str, **variables: str) -> subprocess.Popen:
    """`make TARGET ARGS=args` started in the repository root, without setting up the environment (-o: the
    env marker counts as made) and without a calling make's MAKEFLAGS (`make test ARGS=...` sets them)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GATE_ARGS", "NAME"}
    }
    command = [MAKE, "-s", "-o", ".venv/.suite-ready", target, f"PY={py}", f"ARGS={args}"]
    command += [f"{key}={value}" for key, value in variables.items()]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finished(process: subprocess.Popen) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=180)
    return process.returncode, stdout, stderr


def argv_of(target: str, args: str, **variables: str) -> list[str]:
    """The arguments that `make TARGET ARGS=args` gives Python (`-m pytest ...`), as the shell split them."""
    code, stdout, stderr = finished(
        make(target, args, py=f"{sys.executable} -c {shlex.quote(ECHO_ARGV)}", **variables)
    )
    assert code == 0, stderr
    return json.loads(stdout.strip().splitlines()[-1])


def pytest_argv(target: str, args: str, **variables: str) -> tuple[list[str], list[str]]:
    """(the recipe's own pytest arguments, the rest): the rest must be ARGS as pytest would get them."""
    argv = argv_of(target, args, **variables)
    assert argv[:2] == ["-m", "pytest"]
    user = shlex.split(args)
    assert argv[len(argv) - len(user) :] == user, "ARGS are not passed as they are, last"
    return argv[2 : len(argv) - len(user)], user


FORMS = [
    pytest.param(ISSUE_ARGS, id="issue-path-then-k"),
    pytest.param("-k train_step --presets 2.7b", id="readme-flags"),
    pytest.param("--benchmark-disable -q", id="ci-run"),
    pytest.param("-k perf_x", id="k-value-like-a-name"),
    pytest.param("-k perf", id="k-value-an-existing-folder"),
    pytest.param("perf/test_matmul.py::test_matmul -q", id="node-id"),
    pytest.param("-k 'train_step and not vs' perf/test_end_to_end.py", id="quoted-k-then-path"),
    pytest.param("", id="no-args"),
]


# --------------------------------------------------------------------------- the commands (fast)
@pytest.mark.parametrize("args", FORMS)
def test_bench_compares_with_the_newest_baseline_and_adds_no_path(args):
    own, _ = pytest_argv("bench", args)
    # A bare --benchmark-compare (the newest baseline): argparse gives its optional value only to a
    # word that is not an option, so the word after it must be one of the recipe's own options, never ARGS.
    at = own.index("--benchmark-compare")
    assert at + 1 < len(own) and own[at + 1].startswith("-"), own
    # perf/ is pytest's testpaths, which pytest runs only when ARGS has no path; never a path itself.
    assert _testpaths(own) == ["perf"]
    assert not [word for word in own if word.startswith("perf") and not word.startswith("testpaths")], own


@pytest.mark.parametrize("args", FORMS)
def test_baseline_saves_and_adds_no_path(args):
    own, _ = pytest_argv("baseline", args, NAME="my-change")
    assert "--benchmark-save=my-change" in own
    assert _testpaths(own) == ["perf"]
    assert not [word for word in own if word.startswith("perf") and not word.startswith("testpaths")], own


def test_baseline_name_defaults_to_baseline():
    own, _ = pytest_argv("baseline", "-q")
    assert "--benchmark-save=baseline" in own


def test_users_own_compare_comes_last_and_wins():
    # ARGS come after the recipe's own bare --benchmark-compare (pytest_argv checks it), and argparse
    # keeps the last value given: theirs.
    own, user = pytest_argv("bench", "--benchmark-compare=0003 perf/test_matmul.py")
    assert "--benchmark-compare" in own
    assert user == ["--benchmark-compare=0003", "perf/test_matmul.py"]


def test_dry_run_prints_the_issue_form_with_the_path_outside_the_compare_option():
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    done = subprocess.run(
        [MAKE, "-n", "-o", ".venv/.suite-ready", "bench", f"ARGS={ISSUE_ARGS}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    (line,) = [line for line in done.stdout.splitlines() if " -m pytest " in line]
    assert "--benchmark-compare perf/" not in line
    assert line.endswith(f"-m pytest --benchmark-compare -o testpaths=perf {ISSUE_ARGS}"), line


def _testpaths(own: list[str]) -> list[str]:
    """The testpaths that the recipe's `-o testpaths=...` sets."""
    values = [own[i + 1] for i, word in enumerate(own[:-1]) if word in ("-o", "--override-ini")]
    return [v.split("=", 1)[1] for v in values if v.startswith("testpaths=")]


# --------------------------------------------------------------------------- make gate (fast)
GATE_FORMS = [
    pytest.param(ISSUE_ARGS, [*shlex.split(ISSUE_ARGS)], id="issue-path-then-k"),
    pytest.param(
        "-k train_step --presets 2.7b", ["perf/", "-k", "train_step", "--presets", "2.7b"], id="flags"
    ),
    pytest.param("-k perf", ["perf/", "-k", "perf"], id="k-value-an-existing-folder"),
    pytest.param("", ["perf/"], id="no-args"),
]


@pytest.mark.parametrize(("args", "expected"), GATE_FORMS)
def test_gate_runs_the_selection_in_args_or_perf(tmp_path, capsys, args, expected):
    baseline = tmp_path / "0001_baseline.json"
    benchmark = {"fullname": "perf/test_matmul.py::test_matmul[x]", "stats": {"median": 0.01, "rounds": 1}}
    machine = {"perf": {"device": "cpu", "cpu_model": "test"}}
    baseline.write_text(json.dumps({"machine_info": machine, "benchmarks": [benchmark]}))
    argv = argv_of("gate", args, GATE_ARGS=f"--baseline {baseline}")
    assert argv[:2] == ["-m", "perf.tools.gate"]
    assert argv[argv.index("--") + 1 :] == shlex.split(args)
    calls = []

    def runner(pytest_args, json_path):
        calls.append(list(pytest_args))
        return 5  # nothing collected: the gate stops there, with the arguments it gave pytest recorded

    assert gate.main(argv[2:], runner=runner, machine=lambda device: "the CPU (test)") == 2
    assert calls == [expected]
    capsys.readouterr()


# --------------------------------------------------------------------------- pytest itself (a few seconds)
NOTE = re.compile(r"^(no stored baseline for .*|comparing against .*|cannot compare against .*)$", re.M)
COLLECTED = {
    "issue": ISSUE_ARGS,
    "flags": "--benchmark-compare=0003 -k train_step --presets 2.7b",
}


@pytest.fixture(scope="module")
def collected() -> dict[str, tuple[set[str], str]]:
    """For each of COLLECTED: (the files `make bench ARGS="args --collect-only"` collects, its note on the
    comparison). Not -q: a quiet collection lists node ids alone, without the suite's notes. The runs are
    started together: each is mostly imports, so they overlap well."""
    runs = {
        key: make("bench", f"{args} --collect-only -p no:cacheprovider", py=sys.executable)
        for key, args in COLLECTED.items()
    }
    results = {}
    for key, run in runs.items():
        code, stdout, stderr = finished(run)
        assert code == 0, stdout[-3000:] + stderr[-3000:]
        notes = NOTE.findall(stdout.replace("perf: ", ""))
        assert notes, stdout[-3000:]
        assert "<Dir tests>" not in stdout  # the correctness tests are not collected beside perf/
        results[key] = ({f"perf/{name}" for name in re.findall(r"<Module (\S+)>", stdout)}, notes[-1])
    return results


@pytest.mark.slow
def test_issue_form_collects_only_its_file_and_compares_with_the_newest_baseline(collected):
    files, note = collected["issue"]
    assert files == {"perf/test_end_to_end.py"}
    assert "perf/test_end_to_end.py" not in note, note  # the path was not taken as the baseline to compare
    assert note.startswith("no stored baseline for") or " baselines/" in note, note


@pytest.mark.slow
def test_flags_alone_collect_perf_and_users_compare_wins(collected):
    files, note = collected["flags"]
    assert "perf/test_end_to_end.py" in files and len(files) > 1
    assert all(f.startswith("perf/") for f in files), files
    assert "0003" in note, note  # theirs, not the newest


def test_make_test_runs_tests_by_testpaths_so_a_path_in_args_selects():
    own, user = pytest_argv("test", "tests/test_toy.py -q")
    # A worker per core, the `alone` tests in one of them; pytest.ini's testpaths = tests without a path.
    assert own == ["-n", "auto", "--dist", "loadgroup", "--benchmark-disable"]
    assert user == ["tests/test_toy.py", "-q"]


def test_make_test_workers_can_be_set_or_turned_off():
    assert pytest_argv("test", "", TEST_WORKERS="0")[0][:2] == ["-n", "0"]
    assert pytest_argv("test", "-x", TEST_WORKERS="4")[0][:2] == ["-n", "4"]


def test_make_noise_runs_the_noise_tool_with_args_after_its_own_options():
    argv = argv_of("noise", "--tier pr -k train_step", NOISE_RUNS="5")
    assert argv == ["-m", "perf.tools.noise", "--runs", "5", "--", "--tier", "pr", "-k", "train_step"]
    assert argv_of("noise", "--tier pr")[:4] == ["-m", "perf.tools.noise", "--runs", "3"]


# --------------------------------------------------------------------------- make bisect (fast)
def test_make_bisect_gives_good_bad_and_its_options_then_args_after_the_separator():
    argv = argv_of("bisect", ISSUE_ARGS, GOOD="v1", BAD="HEAD~2", BISECT_ARGS="--threshold 0.05")
    own = ["-m", "perf.tools.bisect", "v1", "HEAD~2", "--threshold", "0.05", "--"]
    assert argv == [*own, *shlex.split(ISSUE_ARGS)]


def test_make_bisect_without_good_or_bad_stops_before_running():
    echo = f"{sys.executable} -c {shlex.quote(ECHO_ARGV)}"
    code, _, stderr = finished(make("bisect", "-k x", py=echo, GOOD="v1"))
    assert code != 0 and "GOOD=REF and BAD=REF are needed" in stderr


# --------------------------------------------------------------------------- make gate BASE=REF (fast)
def test_make_gate_base_gives_the_ref_before_gate_args_and_args_after_the_separator():
    argv = argv_of("gate", "-k forward", BASE="origin/main", GATE_ARGS="--max-pairs 6")
    assert argv == [
        "-m",
        "perf.tools.gate",
        "--base",
        "origin/main",
        "--max-pairs",
        "6",
        "--",
        "-k",
        "forward",
    ]
    assert "--base" not in argv_of("gate", "-k forward", BASE="")
