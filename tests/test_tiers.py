"""The tiers' cells (perf/tiers.py): the pr tier keeps cells of every suite, each one a cell of the default
tier, and its patterns each match something; collected from the benchmark files as pytest collects them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perf.tiers import TIERS
from tests import shared_run

ROOT = Path(__file__).resolve().parents[1]


def collected(tier: str) -> list[str]:
    """The node ids `pytest perf/ --tier TIER --collect-only` lists on this machine (CPU sizes)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "perf/",
            f"--tier={tier}",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line for line in proc.stdout.splitlines() if line.startswith("perf/") and "::" in line]


@pytest.fixture(scope="module")
def ids(request) -> dict[str, list[str]]:
    """Each tier's node ids, collected once for every pytest-xdist worker (tests/shared_run.py)."""

    def collect(folder: Path) -> None:
        found = {tier: collected(tier) for tier in ("cpu", "pr", "default")}
        (folder / "ids.json").write_text(json.dumps(found))

    return json.loads((shared_run.once(request.config, "tier-ids", collect) / "ids.json").read_text())


def test_pr_cells_are_cells_of_the_default_tier(ids):
    assert ids["pr"], "the pr tier collected nothing"
    outside = sorted(set(ids["pr"]) - set(ids["default"]))
    assert not outside, f"pr cells a default-tier baseline cannot judge: {outside}"


def test_pr_tier_keeps_every_benchmark_file(ids):
    """The gate runs the pr tier: a benchmark file without pr cells would never be judged in a pull request
    (docs/adding-a-suite.md says the same)."""
    files = {path.name for path in (ROOT / "perf").glob("test_*.py")}
    kept = {node.split("::")[0].removeprefix("perf/") for node in ids["pr"]}
    missing = sorted(files - kept)
    assert not missing, (
        f"no pr cell in {', '.join(missing)}: declare cells={{'pr': (...)}} in the suite of each "
        "(perf/cases/), a few cells of the default tier"
    )


def test_every_pr_cell_keeps_a_benchmark_and_the_issue_cells_are_there(ids):
    relative = [node.removeprefix("perf/") for node in ids["pr"]]
    # The run itself refuses a cell that keeps nothing (tests/test_declarations.py).
    for _, cell in TIERS["pr"].cells:
        assert any(node.startswith(f"{cell.benchmark}[") for node in relative), cell
    for preset in ("small", "large"):
        for precision in ("fp32", "bf16"):
            for impl in ("sdpa", "flash_triton"):
                assert (
                    f"test_end_to_end.py::test_train_step[{impl}-{preset}-{precision}-ctx512-warm2]"
                    in relative
                )
    assert {node for node in relative if node.startswith("test_compile.py")} == {
        "test_compile.py::test_compile_gain[ctx512-2.7b-bf16-train_step-eager]",
        "test_compile.py::test_compile_gain[ctx512-2.7b-bf16-train_step-compiled]",
    }
    attention = [node for node in relative if node.startswith("test_attention.py")]
    assert len(attention) == 3 * 3 * 3  # seqs x head dims 64, 80, 128 x three providers
    assert all("-causal-" in node and "bf16-forward_backward" in node for node in attention)
    assert not any(node.endswith("-naive]") for node in attention)


def test_the_cpu_tier_runs_every_benchmark_function_once_or_more(ids):
    # It checks that every suite runs (NOTES.md: The CPU tier in five minutes): fewer cells, no function less.
    functions = {
        f"{path.name}::{name}"
        for path in (ROOT / "perf").glob("test_*.py")
        for name in re.findall(r"^def (test_\w+)\(", path.read_text(), re.MULTILINE)
    }
    kept = {node.removeprefix("perf/").split("[")[0] for node in ids["cpu"]}
    assert len(functions) >= 20 and kept == functions
    assert len(ids["cpu"]) < len(ids["default"])


def test_a_tier_without_cells_keeps_everything():
    assert TIERS["default"].cells is None
    assert TIERS["default"].keeps("perf/test_anything.py::test_anything[x]", {})
    assert not TIERS["pr"].keeps("perf/test_end_to_end.py::test_forward[sdpa-small-fp32-ctx512-warm2]", {})
