"""Benchmarks run in a child pytest by tests/test_result_files.py and tests/test_tool_interrupts.py: two that
finish, then one that STOP cuts off in the middle of its timed rounds:
- interrupt: a KeyboardInterrupt; failure: an exception; none: nothing, it runs through;
- dropped: a real SIGINT inside a weakref callback, where Python prints the KeyboardInterrupt and drops it;
- wait: it touches the file MARKER and waits for a signal from outside;
- late: a real SIGINT once the run has ended and stored its results, as the interpreter exits."""

import atexit
import os
import signal
import time
import weakref
from pathlib import Path

import torch

from perf.harness import Work


def test_first(bench):
    a = torch.randn(32, 32)
    bench.run(lambda: a @ a, work=Work(flops=2 * 32**3), warmup_steps=1)


def test_second(bench):
    a = torch.randn(48, 48)
    bench.run(lambda: a @ a, work=Work(flops=2 * 48**3), warmup_steps=1)


class _Freed:
    """An object whose weakref callback sends this process a SIGINT."""


def _interrupt_inside_callback(ref: weakref.ref) -> None:
    _interrupt_now()  # inside the callback: Python prints and drops the KeyboardInterrupt


def _interrupt_now() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the handler runs here


def test_cut_off(bench):
    calls = []
    stop = os.environ.get("STOP", "interrupt")
    if stop == "late":
        atexit.register(_interrupt_now)

    def fn():
        calls.append(1)
        if len(calls) == 4 and stop == "dropped":
            freed = _Freed()
            keep = weakref.ref(freed, _interrupt_inside_callback)
            del freed  # the callback runs now
            assert keep() is None
        elif len(calls) > 3 and stop == "wait":
            Path(os.environ["MARKER"]).touch()
            time.sleep(60)
        elif len(calls) > 3 and stop in ("interrupt", "failure"):  # in its timed rounds, after the warm-up
            raise KeyboardInterrupt if stop == "interrupt" else RuntimeError("a failure mid-measurement")

    bench.run(fn, work=Work(), warmup_steps=1)
