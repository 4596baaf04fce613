"""Running the benchmarks from a tool: pytest in the repository root writing a result file, read back
as `Results`; a failed run or one without benchmarks is a GateError, never a verdict."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from perf.storage import ROOT
from perf.tools.results import GateError, Results, load_results

# pytest exit codes that are not a failed run: 0 all passed or skipped, 5 nothing collected.
PYTEST_OK = (0, 5)

# Runs `python -m pytest ARGS --benchmark-json=PATH`; returns pytest's exit code.
Runner = Callable[[Sequence[str], Path], int]


def run_pytest(args: Sequence[str], json_path: Path) -> int:
    """The default runner: pytest in the repository root, its output on this terminal."""
    command = [sys.executable, "-m", "pytest", *args, f"--benchmark-json={json_path}"]
    return subprocess.run(command, cwd=ROOT, check=False).returncode


def is_selection(arg: str) -> bool:
    """A path or node id under perf/ among the pytest arguments (`perf/test_matmul.py::test_matmul[n256]`):
    it replaces the default perf/. Anything else (an option, a -k expression) is passed as it is."""
    return arg.startswith("perf/") and (ROOT / arg.split("::")[0]).exists()


def with_selection(args: Sequence[str]) -> list[str]:
    """The pytest arguments, with perf/ in front unless they name paths or node ids under it."""
    return list(args) if any(map(is_selection, args)) else ["perf/", *args]


def measure(runner: Runner, args: Sequence[str], role: str, save: Path | None = None) -> Results:
    """Run the benchmarks and read their results; `save` keeps a copy of the result file."""
    with tempfile.TemporaryDirectory(prefix="perf-run-") as folder:
        json_path = Path(folder) / "results.json"
        code = runner(list(args), json_path)
        shown = " ".join(["pytest", *args])
        if code not in PYTEST_OK:
            raise GateError(f"`{shown}` failed with exit code {code}; no verdict on a failed run")
        if not json_path.is_file():
            raise GateError(f"`{shown}` ran no benchmark (exit code {code}); check the selection")
        results = load_results(json_path, role)
        if save is not None:
            try:
                save.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(json_path, save)
            except OSError as err:
                raise GateError(f"--save {save}: cannot write the results ({err.strerror or err})") from None
        return results
