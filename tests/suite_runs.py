"""A suite's benchmark file run in a child pytest on the CPU, as a user runs it: its results and output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_suite(tmp_path: Path, benchmark_file: str, *options: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The child's process and its results by benchmark name (extra_info), {} where it wrote none."""
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", benchmark_file, "-q", "-p", "no:cacheprovider",
            "--benchmark-max-time=0.02", f"--benchmark-json={out}", *options,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    results = json.loads(out.read_text())["benchmarks"] if out.exists() else []
    return proc, {b["name"]: b["extra_info"] for b in results}
