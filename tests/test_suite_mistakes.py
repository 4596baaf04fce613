"""A contributor's mistakes in a suite, each said in one line naming it: a suite declared wrongly under
perf/cases/ stops every pytest run (perf/plugin/options.py), not with the plugin's import traceback; a
benchmark argument that is no fixture and no axis's names the nearest arguments (perf/plugin/parametrize.py),
not pytest's bare "fixture not found". Each runs in a copy of the repository's code with the mistake in it."""

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


def _copy_with(tmp_path: Path, name: str, text: str) -> Path:
    """The repository's code copied under `tmp_path`, with `text` written to `name` in it."""
    copy = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("perf", "model", "kernels", "parallel"):
        shutil.copytree(ROOT / part, copy / part, ignore=ignore)
    for file in ("conftest.py", "pytest.ini", "pyproject.toml"):
        shutil.copy(ROOT / file, copy / file)
    (copy / name).write_text(text)
    return copy


def _collect(copy: Path, target: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", target],
        cwd=copy, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_broken_declaration_is_one_line(tmp_path):
    proc = _collect(_copy_with(tmp_path, "perf/cases/broken.py", BROKEN), "perf/test_norm.py")
    said = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert said == ["perf: a suite declared under perf/cases/ cannot be used: axes declared by more than one "
                    "suite: norm_widths"], said  # fmt: skip


def test_a_misspelt_argument_names_the_nearest_ones(tmp_path):
    misspelt = "def test_norm_again(bench, norm_widht):\n    pass\n"
    proc = _collect(_copy_with(tmp_path, "perf/test_misspelt.py", misspelt), "perf/test_misspelt.py")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "test_norm_again: argument 'norm_widht' is no fixture and no axis's argument; did you mean norm_width"
        in proc.stdout
    ), proc.stdout
    assert "fixture 'norm_widht' not found" not in proc.stdout
