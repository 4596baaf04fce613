"""Running the benchmarks from a tool: pytest in the repository root writing a result file, read back
as `Results`; a failed run or one without benchmarks is a GateError, an interrupted one `Interrupted`
(perf/tools/reading/errors.py), never a verdict.

The child pytest runs in a process group of its own, and each interrupt (or termination) the tool
receives is passed to it once: pytest then ends its session itself, storing what it measured as
partial and saying so, instead of being killed by the tool mid-write.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

from perf.storage import ROOT, partial_name
from perf.tools.reading.errors import GateError, Interrupted
from perf.tools.reading.results import Results, load_results
from perf.tools.running import scratch

# pytest exit codes that are not a failed run: 0 all passed or skipped, 5 nothing collected.
PYTEST_OK = (0, 5)
PYTEST_INTERRUPTED = 2
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies

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


def _dies_with_parent() -> None:
    """In the child, before pytest starts: SIGTERM to it when the tool that started it dies, however it
    dies (SIGKILL included), so that no pytest goes on holding the GPU (Linux's parent-death signal)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def run_pytest_in(tree: Path, args: Sequence[str], json_path: Path) -> int:
    """pytest started in `tree` (a checkout: its pytest.ini makes it the import root) by this Python, its
    output on this terminal; returns pytest's exit code. KeyboardInterrupt once it has ended where an
    interrupt or a termination was passed on to it, whatever its exit code: a tool told to stop gives no
    verdict (a pytest ended by SIGTERM exits -15, which would read as a failed run). The child dies with
    the tool: killed (its process group) where the tool leaves this function any other way, and sent
    SIGTERM by the system where the tool is killed outright."""
    return run_child([sys.executable, "-m", "pytest", *args, f"--benchmark-json={json_path}"], tree)


def run_child(command: Sequence[str], cwd: Path, output: IO | None = None) -> int:
    """`command` run in `cwd`, its output on this terminal or into `output`, dying with the tool and passed
    each interrupt once as run_pytest_in describes; returns its exit code."""
    # A Ctrl-C reaches it from here only (its own process group).
    process = subprocess.Popen(
        command, cwd=cwd, process_group=0, preexec_fn=_dies_with_parent, stdout=output, stderr=output
    )
    try:
        with forwarding_signals(process) as forwarded:
            code = process.wait()
    finally:
        if process.poll() is None:  # the tool is leaving without it: an error here, a second signal
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
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
    scratch.remove_abandoned()
    folder: Path | None = scratch.made("perf-run-")
    json_path = save or folder / "results.json"
    before = file_stamp(json_path)
    try:
        shown = " ".join(["pytest", *args])
        try:
            code = runner(list(args), json_path)
        except KeyboardInterrupt:  # passed on to pytest (run_pytest_in), or a runner that lets it through
            folder, ended = ended_before_interrupt(json_path, before, f"`{shown}`", folder, save)
            if ended is not None:
                raise ended from None
            code = PYTEST_INTERRUPTED
        if code not in PYTEST_OK:
            partial = partial_name(json_path)
            kept = f"its partial results are in {partial}" if partial.is_file() else "it stored no results"
            if partial.is_file():
                folder = _kept(folder, save)
            if code == PYTEST_INTERRUPTED:
                raise Interrupted(f"`{shown}` was interrupted; {kept}")
            raise GateError(f"`{shown}` failed with exit code {code}; no verdict on a failed run ({kept})")
        if not json_path.is_file():
            raise GateError(f"`{shown}` ran no benchmark (exit code {code}); check the selection")
        return load_results(json_path, role)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def file_stamp(path: Path) -> int | None:
    """The file's modification time (ns), or None where there is none: tells a file a run wrote."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def ended_before_interrupt(
    json_path: Path, before: int | None, what: str, folder: Path | None, save: Path | None
) -> tuple[Path | None, Interrupted | None]:
    """After an interrupt: where the run had stored its results whole before it came, they stand: the scratch
    `folder` kept for the user (None returned for it, so that the caller leaves it) and the Interrupted to
    raise that says where they are; else (`folder`, None)."""
    if file_stamp(json_path) in (None, before):
        return folder, None
    said = f"{what} was interrupted after it ended; its results are kept in {json_path}"
    return _kept(folder, save), Interrupted(said)


def _kept(folder: Path | None, save: Path | None) -> Path | None:
    """The scratch folder where it holds results kept for the user: no longer removed (None is returned for
    `folder`); with `save` the results are there and the folder goes as usual."""
    if folder is not None and save is None:
        scratch.kept(folder)
        return None
    return folder
