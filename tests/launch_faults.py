"""A pytest plugin for the launcher tests: a deliberate fault in one rank of a launched run.

Loaded with `-p tests.launch_faults`. PERF_TEST_FAULT="<action>:<rank>:<n>" makes rank <rank>'s n-th
torch.distributed.all_reduce end its process with SIGKILL (action "kill": no report, as the
out-of-memory killer does) or raise (action "raise").
"""

from __future__ import annotations

import itertools
import os
import signal

import torch.distributed as dist

ACTIONS = ("kill", "raise")


def pytest_configure(config) -> None:
    spec = os.environ.get("PERF_TEST_FAULT")
    if not spec:
        return
    action, rank, nth = spec.split(":")
    if action not in ACTIONS:
        raise ValueError(f"PERF_TEST_FAULT: action {action!r}; accepted: {', '.join(ACTIONS)}")
    if os.environ.get("RANK") != rank:
        return
    all_reduce, calls = dist.all_reduce, itertools.count(1)

    def faulty_all_reduce(*args, **kwargs):
        if next(calls) == int(nth):
            if action == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise ArithmeticError(f"deliberate fault in rank {rank} at its all-reduce {nth}")
        return all_reduce(*args, **kwargs)

    dist.all_reduce = faulty_all_reduce
