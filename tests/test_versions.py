"""The releases the suite accepts (perf/plugin/versions.py): a package outside its pyproject.toml range stops
the run before anything runs, in one line naming the installed and the accepted releases."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from perf.plugin import versions

ROOT = Path(__file__).resolve().parent.parent


def test_a_release_outside_its_range_is_named_with_the_range():
    installed = metadata.version("pytest")
    accepted = [
        "pytest-xdist>=3.5",
        "no-such-package>=1",
        "pytest<1; python_version<'3'",
    ]  # in range, absent, n/a
    found = versions.out_of_range(["pytest<9", *accepted])
    assert found == [
        f"pytest {installed} is installed; this suite accepts pytest<9 "
        "(pyproject.toml; `make env` installs an accepted release)"
    ]


def test_a_pytest_benchmark_outside_the_range_stops_the_run_in_one_line(tmp_path):
    """A pytest-benchmark 4.0.0 found first on the path (its metadata only): pytest exits 4 saying so."""
    info = tmp_path / "pytest_benchmark-4.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pytest-benchmark\nVersion: 4.0.0\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "perf/test_matmul.py", "--collect-only"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "ERROR: pytest-benchmark 4.0.0 is installed; this suite accepts pytest-benchmark>=5.1,<6 "
        "(pyproject.toml; `make env` installs an accepted release)"
    ]
