"""Which kernels changed between a baseline and a current run: the explanation of a GPU time verdict.

Each benchmark stores a table of its costliest kernels in extra_info under EXTRA_INFO_KEY (written by
perf/harness/kernel_table.py, which the tools do not import): rows {"kernel": short name, "launches": per
call, "us": GPU microseconds per call}, costliest first, the rest summed into one "other (N kernels)" row.
Comparing the two runs' rows by kernel names the kernels behind a slowdown: one that is new, one launched
twice as often, one that takes longer. Stored results are input from files: bad rows give a reason, never an
exception.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# The extra_info entry of the table (perf/harness/kernel_table.py's EXTRA_INFO_KEY).
EXTRA_INFO_KEY = "gpu_kernels"
# Rows a table keeps before its "other" row (perf/harness/kernel_table.py's TOP_KERNELS), for the footnote.
TOP_KERNELS = 20
# A kernel with the same launches whose time moved by less than this share of its base time is unchanged.
UNCHANGED_SHARE = 0.005
LIMIT = 8  # kernels listed per benchmark
# The "other (N kernels)" row is compared under one key, whatever its count.
OTHER = "other"
_OTHER_ROW = re.compile(r"other \(\d+ kernels?\)")
# The table's columns, for the report; the cells of `explanation_rows` follow them.
HEADER = ("change us", "base us", "current us", "launches", "kernel")
WIDTHS = (10, 10, 10, 17)  # of the columns before the kernel name, in the terminal
MISSING = "-"  # the cell of a side that has no row for the kernel
NOT_LISTED = (
    f"{MISSING}: not among that run's top {TOP_KERNELS} kernels (so in its {OTHER!r} row), or not run at all"
)
BASELINE, CURRENT = "the baseline", "this run"
# Why a side has no table, where it says nothing of its own (no gpu_ms_absent).
NO_TABLE = {
    BASELINE: "the baseline has no kernel table (recorded before kernel tables were kept)",
    CURRENT: "this run has no kernel table (recorded without kernel tables)",
}


@dataclass(frozen=True)
class KernelChange:
    """One kernel's GPU microseconds and launches per call in each run; None where that run's table has
    no row for it (not among its top rows, or not run)."""

    kernel: str
    base_us: float | None  # None: not among the baseline's top rows
    current_us: float | None
    base_launches: float | None
    current_launches: float | None

    @property
    def change_us(self) -> float:
        """Current minus base microseconds per call; a missing side counts as 0."""
        return (self.current_us or 0.0) - (self.base_us or 0.0)

    @property
    def change_launches(self) -> float:
        """Current minus base launches per call; a missing side counts as 0."""
        return (self.current_launches or 0.0) - (self.base_launches or 0.0)

    @property
    def unchanged(self) -> bool:
        """The same launches in both runs and a time within UNCHANGED_SHARE of the base time."""
        if self.base_us is None or self.current_us is None or self.base_launches != self.current_launches:
            return False
        return self.change_us == 0 or abs(self.change_us) < UNCHANGED_SHARE * self.base_us


# --------------------------------------------------------------------------- reading the rows
def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_amount(value: object) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and value >= 0


def _row_problem(row: object) -> str | None:
    """What is wrong with one stored row, or None."""
    if not isinstance(row, dict):
        return f"is {_brief(row)}, not a dict"
    kernel = row.get("kernel")
    if not isinstance(kernel, str) or not kernel:
        return f"has kernel {_brief(kernel)}, not a name"
    for field in ("launches", "us"):
        if not _is_amount(row.get(field)):
            return f"({kernel!r}) has {field} {_brief(row.get(field))}, not a number >= 0"
    return None


def _key(kernel: str) -> str:
    return OTHER if _OTHER_ROW.fullmatch(kernel) else kernel


def _table(rows: object, side: str) -> dict[str, dict] | str:
    """Key -> row of one side's stored rows, or why they cannot be read."""
    if rows is None:
        return NO_TABLE[side]
    damaged = f"{side}'s kernel table is damaged"
    if not isinstance(rows, list):
        return f"{damaged}: it is {_brief(rows)}, not a list of rows"
    table: dict[str, dict] = {}
    for i, row in enumerate(rows):
        problem = _row_problem(row)
        if problem is not None:
            return f"{damaged}: row {i} {problem}"
        key = _key(row["kernel"])
        if key in table:
            return f"{damaged}: row {i} repeats kernel {row['kernel']!r}"
        table[key] = row
    return table


def _side_rows(info: object) -> object:
    return info.get(EXTRA_INFO_KEY) if isinstance(info, dict) else None


# --------------------------------------------------------------------------- comparing
def kernel_changes(
    baseline_rows: object, current_rows: object, limit: int = LIMIT
) -> list[KernelChange] | str:
    """The kernels whose GPU time per call changed most (by |change_us|, then by launch change), at most
    `limit`, excluding unchanged rows (|change| < 0.5% of the kernel's base time and equal launches) — or,
    when a breakdown cannot be made, the reason as a string."""
    if limit < 0:
        raise ValueError(f"limit: an int >= 0 is accepted; got {limit!r}")
    base = _table(baseline_rows, BASELINE)
    if isinstance(base, str):
        return base
    current = _table(current_rows, CURRENT)
    if isinstance(current, str):
        return current
    changes = []
    for key in base.keys() | current.keys():
        old, new = base.get(key), current.get(key)
        change = KernelChange(
            kernel=(new or old)["kernel"],
            base_us=float(old["us"]) if old else None,
            current_us=float(new["us"]) if new else None,
            base_launches=float(old["launches"]) if old else None,
            current_launches=float(new["launches"]) if new else None,
        )
        if not change.unchanged:
            changes.append(change)
    # Largest change first; the name last, so that the order is the same in every process.
    changes.sort(key=lambda c: (-abs(c.change_us), -abs(c.change_launches), c.kernel))
    return changes[:limit]


def changes_between(baseline_info: object, current_info: object) -> list[KernelChange] | str:
    """`kernel_changes` of two runs' extra_info of one benchmark, or why there are none."""
    return kernel_changes(_side_rows(baseline_info), _side_rows(current_info))


def no_breakdown_reason(baseline_info: object, current_info: object) -> str | None:
    """Why the kernels of one benchmark cannot be compared between the two runs' extra_info, or None."""
    for info, side in ((baseline_info, BASELINE), (current_info, CURRENT)):
        absent = info.get("gpu_ms_absent") if isinstance(info, dict) else None
        if _side_rows(info) is None and isinstance(absent, str) and absent:
            return f"{side} has no kernel table: {absent}"
    found = kernel_changes(_side_rows(baseline_info), _side_rows(current_info))
    return found if isinstance(found, str) else None


# --------------------------------------------------------------------------- showing
def _us(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}"


def _launches(value: float | None) -> str:
    return MISSING if value is None else f"{value:.3f}".rstrip("0").rstrip(".")


def _gpu_ms(info: object) -> float | None:
    value = info.get("gpu_ms") if isinstance(info, dict) else None
    return float(value) if _is_amount(value) else None


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.3f}"


def _cells(change: KernelChange) -> list[str]:
    launches = f"{_launches(change.base_launches)} -> {_launches(change.current_launches)}"
    return [f"{change.change_us:+.2f}", _us(change.base_us), _us(change.current_us), launches, change.kernel]


def explanation_rows(
    baseline_info: object, current_info: object, limit: int = LIMIT
) -> list[list[str]] | str:
    """The table of `explanation_lines` as cells in HEADER's order (header excluded), for the Markdown and
    HTML report; or the reason there is none."""
    reason = no_breakdown_reason(baseline_info, current_info)
    if reason is not None:
        return reason
    found = kernel_changes(_side_rows(baseline_info), _side_rows(current_info), limit)
    return found if isinstance(found, str) else [_cells(change) for change in found]


def busy_time(baseline_info: object, current_info: object) -> str:
    """Both runs' GPU busy time per call and its change, e.g. 'GPU busy time 0.133 -> 0.193 ms per call
    (+45.1%)'."""
    base_ms, current_ms = (_gpu_ms(info) for info in (baseline_info, current_info))
    share = f" ({current_ms / base_ms - 1:+.1%})" if base_ms and current_ms else ""
    return f"GPU busy time {_ms(base_ms)} -> {_ms(current_ms)} ms per call{share}"


def _fit(kernel: str, room: int) -> str:
    """A kernel's name in `room` characters: its start and its last 6 (the hash of a shortened name)."""
    room = max(room, 24)
    return kernel if len(kernel) <= room else f"{kernel[: room - 7]}…{kernel[-6:]}"


def explanation_lines(
    name: str, baseline_info: object, current_info: object, limit: int = LIMIT, width: int | None = None
) -> list[str]:
    """Lines for the gate's terminal output: a heading naming the benchmark and its GPU ms per call, base
    -> current, then the kernels that changed most in a fixed-width table; or a single line saying why
    there is no breakdown. A heading longer than `width` puts the GPU time on a line of its own."""
    rows = explanation_rows(baseline_info, current_info, limit)
    if isinstance(rows, str):
        return [f"no kernel breakdown for {name}: {rows}"]
    busy = busy_time(baseline_info, current_info)
    lines = [f"kernels of {name}: {busy}"]
    if width is not None and len(lines[0]) > width:
        lines = [f"kernels of {name}:", f"    {busy}"]
    if not rows:
        lines.append(f"    no kernel changed by {UNCHANGED_SHARE:.1%} of its time or more, nor in launches")
        return lines

    def line(cells: list[str] | tuple[str, ...]) -> str:
        numbers = "  ".join(cell.rjust(w) for cell, w in zip(cells, WIDTHS, strict=False))
        start = f"    {numbers}  "
        return start + (cells[-1] if width is None else _fit(cells[-1], width - len(start)))

    lines += [line(HEADER), *(line(cells) for cells in rows)]
    if any(MISSING in (cells[1], cells[2]) for cells in rows):
        lines.append(f"    {NOT_LISTED}")
    return lines
