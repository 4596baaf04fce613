"""A pytest plugin (-p) that interrupts its own process while pytest is still starting, as a Ctrl-C in the
first second of a run does (tests/test_interrupt_paths.py)."""

import os
import signal
import time

os.kill(os.getpid(), signal.SIGINT)
time.sleep(5)  # the handler runs here
