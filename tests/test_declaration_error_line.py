"""A suite declared wrongly under perf/cases/ stops every pytest run of the repository in one line naming
the mistake (perf/plugin/options.py), not with the plugin's import traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A second suite declaring an axis the norm suite declares.
BROKEN = """
from perf.cases.declare import Axis, Suite

SUITES = (Suite("broken", axes=(Axis("norm_widths", default=(8,), help="twice"),)),)
"""


def test_a_broken_declaration_is_one_line(tmp_path):
    copy = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("perf", "model", "kernels", "parallel"):
        shutil.copytree(ROOT / part, copy / part, ignore=ignore)
    for name in ("conftest.py", "pytest.ini"):
        shutil.copy(ROOT / name, copy / name)
    (copy / "perf" / "cases" / "broken.py").write_text(BROKEN)
    env = {**os.environ, "PYTHONPATH": str(copy), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
         "perf/test_norm.py"],
        cwd=copy, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    said = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert said == ["perf: a suite declared under perf/cases/ cannot be used: axes declared by more than one "
                    "suite: norm_widths"], said  # fmt: skip
