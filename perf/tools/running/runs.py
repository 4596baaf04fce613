"""Running the benchmarks from a tool: pytest in the repository root writing a result file, read back
as `Results`; a failed run or one without benchmarks is a GateError, an interrupted one `Interrupted`
(perf/tools/reading/errors.py), never a verdict.

The child pytest runs in a process group of its own, and each interrupt (or termination) the tool
receives is passed to it once: pytest then ends its session itself, storing what it measured as
partial and saying so, instead of being killed by the tool mid-write.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from perf.storage import ROOT, partial_name
from perf.tools.reading.errors import GateError, Interrupted
from perf.tools.reading.results import Results, load_results

# pytest exit codes that are not a failed run: 0 all passed or skipped, 5 nothing collected.
PYTEST_OK = (0, 5)
PYTEST_INTERRUPTED = 2

# Runs `python -m pytest ARGS --benchmark-json=PATH`; returns pytest's exit code.
Runner = Callable[[Sequence[str], Path], int]


@contextlib.contextmanager
def forwarding_signals(process: subprocess.Popen) -> Iterator[list[int]]:
    """While the block runs, SIGINT and SIGTERM received here go to `process` instead, once each; the block
    gets the list of those passed on."""
    forwarded: list[int] = []

    def forward(signum: int, frame: object) -> None:
        forwarded.append(signum)
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield forwarded
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_pytest_in(tree: Path, args: Sequence[str], json_path: Path) -> int:
    """pytest started in `tree` (a checkout: its pytest.ini makes it the import root) by this Python, its
    output on this terminal; returns pytest's exit code. KeyboardInterrupt once it has ended where an
    interrupt or a termination was passed on to it, whatever its exit code: a tool told to stop gives no
    verdict (a pytest ended by SIGTERM exits -15, which would read as a failed run)."""
    command = [sys.executable, "-m", "pytest", *args, f"--benchmark-json={json_path}"]
    process = subprocess.Popen(command, cwd=tree, process_group=0)  # a Ctrl-C reaches it from here only
    with forwarding_signals(process) as forwarded:
        code = process.wait()
    if forwarded:
        raise KeyboardInterrupt
    return code


def run_pytest(args: Sequence[str], json_path: Path) -> int:
    """The default runner: pytest in the repository root."""
    return run_pytest_in(ROOT, args, json_path)


def is_selection(arg: str) -> bool:
    """A path or node id under perf/ among the pytest arguments (`perf/test_matmul.py::test_matmul[n256]`):
    it replaces the default perf/. Anything else (an option, a -k expression) is passed as it is."""
    return arg.startswith("perf/") and (ROOT / arg.split("::")[0]).exists()


def with_selection(args: Sequence[str]) -> list[str]:
    """The pytest arguments, with perf/ in front unless they name paths or node ids under it."""
    return list(args) if any(map(is_selection, args)) else ["perf/", *args]


def pytest_device(args: Sequence[str]) -> str:
    """--device's value among pytest arguments ('auto' where it is not there)."""
    for i, arg in enumerate(args):
        if arg == "--device" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--device="):
            return arg.removeprefix("--device=")
    return "auto"


def measure(runner: Runner, args: Sequence[str], role: str, save: Path | None = None) -> Results:
    """Run the benchmarks and read their results. With `save` the run writes its result file there (whole,
    or its partial results beside it where it was stopped); without, into a temporary folder, kept only
    to hold such partial results."""
    if save is not None:
        try:
            save.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise GateError(f"{save}: cannot write into its folder ({err.strerror or err})") from None
    folder: Path | None = Path(tempfile.mkdtemp(prefix="perf-run-"))
    json_path = save or folder / "results.json"
    try:
        shown = " ".join(["pytest", *args])
        try:
            code = runner(list(args), json_path)
        except KeyboardInterrupt:  # a runner of its own that lets the interrupt through
            code = PYTEST_INTERRUPTED
        if code not in PYTEST_OK:
            partial = partial_name(json_path)
            kept = f"its partial results are in {partial}" if partial.is_file() else "it stored no results"
            if partial.is_file() and save is None:
                folder = None  # kept: the partial results are in it
            if code == PYTEST_INTERRUPTED:
                raise Interrupted(f"`{shown}` was interrupted; {kept}")
            raise GateError(f"`{shown}` failed with exit code {code}; no verdict on a failed run ({kept})")
        if not json_path.is_file():
            raise GateError(f"`{shown}` ran no benchmark (exit code {code}); check the selection")
        return load_results(json_path, role)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
