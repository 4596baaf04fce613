"""What a gate's log says of its A/B: the verdict's first line and the kernels named (perf/tools/running/
live_ab.py writes the logs, perf/tools/reporting/calibration.py tabulates them)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CLEAN, PLANTED = "clean", "planted"
VERDICT = re.compile(r"^(PASS|FAIL|NO VERDICT)\b.*$", re.MULTILINE)
KERNEL_NAMED = re.compile(r"^\s+kernel (\S+): [\d.]+x its time per call", re.MULTILINE)


@dataclass(frozen=True)
class LiveAB:
    """One A/B as it ended."""

    kind: str  # CLEAN or PLANTED
    number: int  # 1, 2, ... in the order run
    exit_code: int
    verdict: str  # the gate's first verdict line, or why there was none
    kernels: tuple[str, ...]  # kernels the kernel rule named
    seconds: float
    log: Path

    @property
    def failed(self) -> bool:
        return self.exit_code == 1


def read_gate_log(kind: str, number: int, code: int, seconds: float, log: Path) -> LiveAB:
    """One A/B as its gate's log and exit code tell it."""
    text = log.read_text(errors="replace") if log.exists() else ""
    found = VERDICT.search(text)
    verdict = found.group(0) if found else f"no verdict (the gate exited {code}; see {log})"
    kernels = tuple(dict.fromkeys(KERNEL_NAMED.findall(text)))
    return LiveAB(kind, number, code, verdict, kernels, seconds, log)
