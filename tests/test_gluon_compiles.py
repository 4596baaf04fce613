"""The Gluon kernels compile for Hopper (sm_90) with this machine's Triton, GPU or not
(scripts/compile_gluon.py): a renamed Gluon API, a layout error or shared memory over the limit fails
here rather than on a GPU runner; and a kernel that does not fit is reported as failing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernels.flash_attention_triton import gluon_forward

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not gluon_forward.HAVE_GLUON, reason="needs Triton's Gluon (Triton 3.5 on)")


def compile_gluon(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/compile_gluon.py", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_every_kernel_compiles_at_every_head_dim_within_shared_memory():
    done = compile_gluon(ROOT, "--dtypes", "bf16")
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    # forward, the persistent forward and backward; head dims 64/80/96/128; causal and full
    assert len(lines) == 3 * 4 * 2
    assert all(" OK " in line and "shared=" in line for line in lines), done.stdout


def test_a_kernel_over_the_shared_memory_limit_fails(tmp_path):
    for part in ("kernels", "scripts"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    module = tmp_path / "kernels/flash_attention_triton/gluon_forward.py"
    source = module.read_text()
    assert "NUM_STAGES=num_stages or _stages(head_dim, is_causal)" in source
    module.write_text(source.replace("num_stages or _stages(head_dim, is_causal)", "8"))  # 8 K/V stages
    done = compile_gluon(tmp_path, "--kernels", "forward", "--head-dims", "128", "--dtypes", "fp16")
    assert done.returncode == 1
    assert done.stdout.count("FAIL shared memory") == 2, done.stdout + done.stderr[-2000:]
    assert compile_gluon(tmp_path, "--head-dims", "6x").returncode == 2  # bad arguments
