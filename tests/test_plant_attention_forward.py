"""scripts/plant_attention_forward.py: its patch applies to this checkout, and the planted forward gives the
same results while running the forward again on the share of (batch, head) pairs asked for, at least one
(Triton's interpreter on the CPU, in a copy of this checkout's kernels)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "plant_attention_forward.py"
CHECK = """
import torch
from kernels.flash_attention_triton import launch
calls, unplanted = [], launch._unplanted_forward
def counted(q, k, v, is_causal):
    calls.append(tuple(q.shape))
    return unplanted(q, k, v, is_causal)
launch._unplanted_forward = counted
torch.manual_seed(0)
q, k, v = (torch.randn(2, 3, 16, 16) for _ in range(3))
out, lse = launch.attention_forward(q, k, v, True)
expected, _ = unplanted(q, k, v, True)
assert torch.equal(out, expected)
print(calls)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("share", "again"), [(0.02, 1), (0.5, 3)])
def test_the_planted_forward_runs_again_on_its_share_and_changes_no_result(tmp_path, share, again):
    diff = tmp_path / "plant.diff"
    written = subprocess.run(
        [sys.executable, str(SCRIPT), "--share", str(share)], capture_output=True, text=True
    )
    assert written.returncode == 0, written.stderr
    diff.write_text(written.stdout)
    tree = tmp_path / "tree"  # this checkout's kernels, as the patch was made of them
    shutil.copytree(ROOT / "kernels", tree / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "apply", str(diff)], cwd=tree, check=True)
    done = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=tree, capture_output=True, text=True, timeout=300,
        env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(tree)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str([(2, 3, 16, 16), (1, again, 16, 16)])


@pytest.mark.parametrize("share", ["0", "1.5", "-0.1"])
def test_a_share_outside_0_to_1_is_refused_in_one_line(share):
    done = subprocess.run([sys.executable, str(SCRIPT), "--share", share], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1].endswith(f"--share {float(share)}: accepted is a fraction in (0, 1]")
