"""The errors the tools raise, and how a command line ends on them: a refusal (GateError) is one line and
exit 2, an interrupt (Interrupted, or a Ctrl-C) one line and EXIT_INTERRUPTED, never a traceback and never a
verdict."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable

# The exit code of a tool that was interrupted, as a shell gives a command ended by SIGINT.
EXIT_INTERRUPTED = 128 + signal.SIGINT


class GateError(ValueError):
    """Input on which the gate refuses a verdict: it says why and exits 2, it never passes."""


class ToolParser(argparse.ArgumentParser):
    """The tools' argument parser: a bad option is a GateError, one line and exit 2 as every other refusal,
    instead of argparse's usage text and exit."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise GateError(message)


class Interrupted(Exception):
    """A tool's run ended by an interrupt: it says what was kept, the tool ends with EXIT_INTERRUPTED."""


STOPPING = (signal.SIGINT, signal.SIGTERM)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def settle() -> None:
    """From here to the end of the command its verdict is printed and returned: a Ctrl-C or SIGTERM no longer
    changes either (both ignored until tool_main returns)."""
    if _in_main_thread():
        for sig in STOPPING:
            signal.signal(sig, signal.SIG_IGN)


def tool_main(prog: str, body: Callable[[], int]) -> int:
    """Run a tool's command line: a refusal (or a file system's error) is one line and exit 2, an
    interrupt one line and EXIT_INTERRUPTED, with no traceback and no file half-written (every file is
    written whole)."""
    handlers = {sig: signal.getsignal(sig) for sig in STOPPING} if _in_main_thread() else {}
    try:
        code = body()
        sys.stdout.flush()  # here, so that a reader gone away is seen here
        return code
    except BrokenPipeError:  # the reader went away (`| head -1`): it had what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 0
    except GateError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except Interrupted as err:
        print(f"{prog}: interrupted: {err}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; nothing was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as err:  # a file system's refusal that no check foresaw: still one line, no traceback
        where = f"{err.filename}: " if err.filename else ""
        print(f"{prog}: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    finally:
        for sig, handler in handlers.items():  # as the caller had them (settle() ignored them)
            signal.signal(sig, handler)
