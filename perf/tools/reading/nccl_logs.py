"""nccl-tests' logs, and the suite's NCCL collective results, read as rows of one kind
(`python -m perf.tools.nccl_tests`).

Each log is what an nccl-tests binary printed. Its collective comes from its "Collective test starting"
line, or else from the file's name (all_reduce, all_gather, reduce_scatter, broadcast, alltoall); its world
size from its "#  Rank" lines; each size gives a row per placement (nccl-tests' out-of-place and in-place
columns). The suite's rows come from a result file's extra_info. Both compute bus bandwidth the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from perf.tools.reading.errors import GateError
from perf.tools.reading.results import load_results

# nccl-tests' binaries by the suite's collective names.
BINARIES = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast",
    "alltoall": "all_to_all",
}
# nccl-tests' type names by the suite's dtype names (as results record them).
TYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64"}
PLACEMENTS = ("out_of_place", "in_place")
STARTING = re.compile(r"Collective test starting:\s*(\w+)_perf")
RANK = re.compile(r"^#\s+Rank\s+\d+\s")


@dataclass(frozen=True)
class Row:
    """One size of one nccl-tests log, in one placement."""

    collective: str
    dtype: str
    placement: str
    world_size: int
    size_bytes: int
    busbw_gbps: float
    wrong: int | None  # None where nccl-tests did not check (-c 0: "N/A")


def _collective(text: str, path: Path) -> str:
    found = STARTING.search(text)
    names = [found.group(1)] if found else [n for n in BINARIES if path.name.startswith(n)]
    if not names or names[0] not in BINARIES:
        raise GateError(
            f"{path}: which collective it measured is not said (no 'Collective test starting' line) and "
            f"its name starts with none of {', '.join(BINARIES)}"
        )
    return BINARIES[names[0]]


def parse_log(path: Path) -> list[Row]:
    """The rows of one nccl-tests log, out-of-place and in-place apart."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise GateError(f"{path}: cannot be read ({err})") from None
    collective = _collective(text, path)
    world_size = sum(bool(RANK.match(raw)) for raw in text.splitlines())
    if not world_size:
        raise GateError(f"{path}: no '#  Rank N ...' lines, so its world size is not known")
    rows = []
    for raw in text.splitlines():
        fields = raw.split()
        if raw.lstrip().startswith("#") or len(fields) < 11 or not fields[0].isdigit():
            continue
        dtype = TYPES.get(fields[2])
        if dtype is None:
            continue
        size = int(fields[0])
        for placement, (_time, _algbw, busbw, wrong) in zip(
            PLACEMENTS, (fields[-8:-4], fields[-4:]), strict=True
        ):
            try:
                rows.append(Row(collective, dtype, placement, world_size, size, float(busbw), _wrong(wrong)))
            except ValueError:
                raise GateError(f"{path}: cannot read the row {raw.strip()!r}") from None
    if not rows:
        raise GateError(f"{path}: no rows of sizes and bandwidths (is it nccl-tests' output?)")
    return rows


def _wrong(field: str) -> int | None:
    return None if field == "N/A" else int(field)


def suite_rows(results_path: Path) -> list[Row]:
    """The suite's NCCL collective results in a result file, as rows."""
    document = load_results(results_path, "--results").document
    rows = []
    needed = ("collective", "dtype", "placement", "world_size", "size_bytes", "busbw_gbps")
    for entry in document.get("benchmarks", []):
        info = entry.get("extra_info") or {}
        if info.get("backend") != "nccl" or any(info.get(key) is None for key in needed):
            continue
        rows.append(
            Row(
                info["collective"], info["dtype"], info["placement"], info["world_size"],
                info["size_bytes"], info["busbw_gbps"], info.get("wrong_elements"),
            )
        )  # fmt: skip
    return rows


def case_key(row: Row) -> tuple:
    """The case a row measures, the same on both sides: collective, dtype, placement, world size."""
    return row.collective, row.dtype, row.placement, row.world_size
