"""Each benchmark's kernels: the GPU time and launches per call of its costliest kernels, by name.

GPU busy time (perf/harness/gpu_time.py) says that a benchmark got slower on the device, not where. The
activities of its profiled calls name every kernel, copy and memset; summed by name and divided by the
number of calls they make a small table, stored in the benchmark's extra_info under EXTRA_INFO_KEY, so that
a baseline carries it and the gate and the report can say which kernels changed
(perf/tools/reading/kernel_changes.py reads it; the tools never import this module).

CUPTI's kernel names are C++ signatures of up to a few hundred characters; `short_name` keeps the kernel's
name and template arguments without namespaces or parameter list, the same in every process.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The extra_info entry holding the table: a list of {"kernel": str, "launches": float, "us": float}.
EXTRA_INFO_KEY = "gpu_kernels"
# Rows kept per benchmark; the rest are summed into one "other (N kernels)" row.
TOP_KERNELS = 20
# Short names longer than this are cut at CUT characters and told apart by a hash of the full name.
MAX_NAME = 90
CUT = 80
# Digits of the sha1 of a full name that tell two cut or colliding names apart.
HASH_DIGITS = 6
DECIMALS = 3  # of launches and microseconds: enough, and the stored files stay small

# A namespace qualifier: `at::`, `(anonymous namespace)::`; not `Foo<int>::` (a member of a class template).
_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|\b[A-Za-z_]\w*)::")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Activity:
    """One device activity: a kernel, a copy or a memset, in device-clock nanoseconds."""

    name: str
    start_ns: int
    end_ns: int


def name_hash(name: str) -> str:
    """The first HASH_DIGITS hex digits of sha1(name): the same in every process, unlike hash()."""
    return hashlib.sha1(name.encode()).hexdigest()[:HASH_DIGITS]


def _without_parameters(name: str) -> str:
    """`name` without the trailing parameter list of a function signature: a balanced `(...)` at the end
    right after an identifier or `>`. `Memcpy HtoD (Pageable -> Device)` is no signature and stays."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            before = name[i - 1] if i > 0 else ""
            return name[:i] if before and (before.isalnum() or before in "_>") else name
    return name  # unbalanced: leave it as CUPTI wrote it


def short_name(name: str) -> str:
    """A readable short form of a CUDA kernel name as CUPTI reports it: without a leading `void`, the
    parameter list and namespaces, `> >` as `>>`; over MAX_NAME characters, cut and hashed. E.g.
    `void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, ...>(...)`
    -> `vectorized_elementwise_kernel<4, CUDAFunctor_add<BFloat16>, array<char*, 3ul>>`."""
    short = name.strip().removeprefix("void ")
    short = _without_parameters(short)
    short = _QUALIFIER.sub("", short)
    short = _SPACES.sub(" ", short).strip()
    while "> >" in short:
        short = short.replace("> >", ">>")
    if len(short) > MAX_NAME:
        short = f"{short[:CUT]}…{name_hash(name)}"
    return short


def kernel_totals(per_call: Sequence[Sequence[Activity]]) -> dict[str, tuple[int, int]]:
    """Per full kernel name (copies and memsets included): its launches and nanoseconds over all calls."""
    totals: dict[str, tuple[int, int]] = {}
    for call in per_call:
        for activity in call:
            launches, ns = totals.get(activity.name, (0, 0))
            totals[activity.name] = (launches + 1, ns + activity.end_ns - activity.start_ns)
    return totals


def kernel_rows(
    totals: Mapping[str, tuple[int, int]], calls: int, top: int = TOP_KERNELS
) -> list[dict[str, Any]]:
    """The table of `kernel_totals` over `calls` calls: launches and microseconds per call, costliest
    first, the first `top` rows, then one "other (N kernels)" row summing the N others where there are any."""
    if calls < 1:
        raise ValueError(f"kernel_rows needs at least one call; got {calls!r}")
    if top < 0:
        raise ValueError(f"top: an int >= 0 is accepted; got {top!r}")
    # Costliest first; equal times by name, so that the table is the same in every process.
    names = sorted(totals, key=lambda n: (-totals[n][1], n))
    shorts = unique_short_names(names)
    rows = [_row(shorts[n], *totals[n], calls) for n in names[:top]]
    rest = names[top:]
    if rest:
        rest_launches = sum(totals[n][0] for n in rest)
        rest_ns = sum(totals[n][1] for n in rest)
        rows.append(_row(f"other ({len(rest)} kernels)", rest_launches, rest_ns, calls))
    return rows


def kernel_table(per_call: Sequence[Sequence[Activity]], top: int = TOP_KERNELS) -> list[dict[str, Any]]:
    """Per kernel name, its launches and microseconds per call over the calls of `per_call` (one list of
    activities per call): `kernel_rows` of `kernel_totals`. A call without activities counts in the
    division; no calls at all is a ValueError.
    """
    if not per_call:
        raise ValueError("kernel_table needs the activities of at least one call; got none")
    return kernel_rows(kernel_totals(per_call), len(per_call), top)


def unique_short_names(names: Sequence[str]) -> dict[str, str]:
    """Full name -> short name; full names whose short names collide get ` #` and their hash appended."""
    shorts = {name: short_name(name) for name in names}
    counts: dict[str, int] = {}
    for short in shorts.values():
        counts[short] = counts.get(short, 0) + 1
    return {
        name: f"{short} #{name_hash(name)}" if counts[short] > 1 else short for name, short in shorts.items()
    }


def _row(kernel: str, launches: int, total_ns: int, calls: int) -> dict[str, Any]:
    return {
        "kernel": kernel,
        "launches": round(launches / calls, DECIMALS),
        "us": round(total_ns / 1e3 / calls, DECIMALS),
    }
