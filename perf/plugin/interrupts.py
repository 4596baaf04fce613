"""An interrupt (Ctrl-C, SIGINT) always ends the run as interrupted, wherever it lands.

Python raises KeyboardInterrupt wherever the main thread is when the signal's handler runs. Where that is
a weakref or finalizer callback (torch.compile starting, a tensor freed) Python prints the exception and
drops it, and code that catches BaseException can drop it too: the run would go on and store its
results as whole. Here the handler also records the signal; the run then ends as interrupted at the next
test boundary, or at its end, whatever became of the exception, and the test it arrived in is left out
of the partial results (perf/plugin/result_files.py).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

# The node id of the test running when each interrupt arrived (None: between tests), in order.
_arrived: list[str | None] = []
_running: list[str] = []  # the test running now, if any
_ended: list[bool] = []  # set once the session's results are stored
LATE = (
    "perf: an interrupt after the run ended and its results were stored: they stand; "
    "another interrupt stops the clean-up"
)


STARTING = "perf: interrupted while pytest was starting; nothing was run and nothing written"
_configured: list[bool] = []  # set once pytest is configured: from then on it ends an interrupted session


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    if not _configured:  # pytest still loading its plugins and the conftest's imports: nothing to keep
        print(STARTING, file=sys.stderr, flush=True)
        os._exit(pytest.ExitCode.INTERRUPTED)  # as an interrupted session ends, without a traceback
    if _ended and not _arrived:  # the clean-up after a finished run: said, not raised, the first time
        _arrived.append(None)
        print(LATE, file=sys.stderr, flush=True)
        return
    _arrived.append(_running[-1] if _running else None)
    raise KeyboardInterrupt


def received() -> bool:
    """Whether an interrupt arrived during this run."""
    return bool(_arrived)


def tests_interrupted() -> set[str]:
    """The tests an interrupt arrived in: their results are not whole, whatever their outcome."""
    return {name for name in _arrived if name is not None}


def exit_status(session: pytest.Session, exitstatus: int) -> int:
    """The session's exit status, INTERRUPTED where an interrupt arrived and was dropped on its way."""
    if received() and exitstatus != pytest.ExitCode.INTERRUPTED:
        session.exitstatus = pytest.ExitCode.INTERRUPTED  # what pytest returns once the session ends
        return pytest.ExitCode.INTERRUPTED
    return exitstatus


def _raise_if_dropped() -> None:
    if received():
        where = _arrived[0] or "between tests"
        raise KeyboardInterrupt(
            f"an interrupt (SIGINT) arrived in {where} and was dropped there (inside a callback, or caught); "
            "the run ends as interrupted"
        )


def _install() -> None:
    """Record interrupts where Python's own handler is in place (not where SIGINT is ignored, as in a
    background job, or handled by the caller)."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    if in_main_thread and signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _on_interrupt):
        signal.signal(signal.SIGINT, _on_interrupt)


def _ours() -> bool:
    """Whether this plugin's handler is SIGINT's (only the main thread may change it)."""
    return (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is _on_interrupt
    )


def uninstall() -> None:
    """Python's own handler back, where this plugin was registered and then blocked (`-p no:...` after
    pytest.ini's -p): its pytest_configure will not run, so it must not act on interrupts."""
    if _ours():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _quiet(previous: Callable[[Any], None]) -> Callable[[Any], None]:
    """An unraisable hook that drops the KeyboardInterrupt of a recorded interrupt (raised inside a weakref
    or finalizer callback, where Python cannot raise it): the run ends as interrupted all the same, so no
    traceback is printed for it; everything else goes to `previous`."""
    if getattr(previous, "perf_quiet", False):
        return previous

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and received():
            return
        previous(unraisable)

    hook.perf_quiet = True  # type: ignore[attr-defined]
    return hook


def _exiting() -> None:
    """The last exit handler (registered first): the run's exit status is decided, so an interrupt in the
    interpreter's own shutdown is ignored, where Python's default would end the process by the signal."""
    if _ours():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def pytest_addoption(parser: pytest.Parser) -> None:
    """The first hook this plugin gets, as pytest registers it (pytest.ini's first -p: before the other
    plugins and the conftest's imports): from here an interrupt at any moment is caught, to the process's
    end, and the unraisable hook likewise until pytest sets its own."""
    _install()
    sys.unraisablehook = _quiet(sys.unraisablehook)
    atexit.register(_exiting)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    _arrived.clear()
    _ended.clear()
    _configured.append(True)  # the handler is in place since pytest_addoption


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """After pytest's own unraisable hook is in place (its pytest_configure): wrapped to drop ours."""
    sys.unraisablehook = _quiet(sys.unraisablehook)


@pytest.hookimpl(tryfirst=True)
def pytest_terminal_summary() -> None:
    """The session's results are stored by now: pytest-benchmark writes them in pytest_sessionfinish,
    before the terminal summary. An interrupt from here on (the summary, pytest's last garbage
    collections, the interpreter's exit) no longer changes them, so the first is said in one line
    instead of a traceback, and the run keeps its exit status."""
    if not _arrived:
        _ended.append(True)


def pytest_unconfigure(config: pytest.Config) -> None:
    pytest_terminal_summary()  # where no terminal summary was written (-p no:terminal)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """An interrupt that reached pytest ends the session itself; one that was dropped ends it here."""
    _raise_if_dropped()
    _running.append(item.nodeid)
    try:
        result = yield
    finally:
        _running.pop()
    _raise_if_dropped()
    return result
