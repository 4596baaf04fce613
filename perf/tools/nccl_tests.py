"""The suite's NCCL bus bandwidth beside nccl-tests' at the same sizes: how close torch.distributed's
collectives, as the suite measures them, come to NCCL's own benchmark on the same machine.

    ./build/all_reduce_perf -b 8 -e 8G -f 2 -g 2 -d bfloat16 > all_reduce_bf16.log
    python -m perf.tools.nccl_tests --results results.json all_reduce_bf16.log all_gather_bf16.log

Each log is what an nccl-tests binary printed. Its collective comes from its "Collective test
starting" line, or else from the file's name (all_reduce, all_gather, reduce_scatter, broadcast,
alltoall); its world size from its "#  Rank" lines. A row is compared where the suite measured the
same collective, dtype, placement (nccl-tests' out-of-place and in-place columns), world size and
bytes (nccl-tests' size: the larger of a rank's two buffers, as the suite's size_bytes). Both
compute bus bandwidth the same way, so the ratio reads as the share of NCCL's ceiling the suite
reaches. Exit codes: 0 printed, 2 refused (one line on stderr saying why).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from perf.tables.format import Column, fmt, header, line
from perf.tools.results import GateError, load_results

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


COLUMNS = (
    Column("collective", 15, "<"),
    Column("dtype", 9, "<"),
    Column("placement", 13, "<"),
    Column("world", 5),
    Column("size", 12),
    Column("suite GB/s", 10),
    Column("nccl-tests GB/s", 15),
    Column("suite/nccl", 10),
    Column("#wrong", 9),
)


def _key(row: Row) -> tuple:
    return row.collective, row.dtype, row.placement, row.world_size


def table(suite: Iterable[Row], nccl: Iterable[Row]) -> list[str]:
    """Every size both measured, then each case's peak on both sides; none if nothing matches."""
    theirs = {(*_key(r), r.size_bytes): r for r in nccl}
    pairs = [(r, theirs[(*_key(r), r.size_bytes)]) for r in suite if (*_key(r), r.size_bytes) in theirs]
    if not pairs:
        return []
    lines = [header(COLUMNS)]
    peaks: dict[tuple, tuple[float, float]] = {}
    for ours, ref in sorted(pairs, key=lambda pair: (*_key(pair[0]), pair[0].size_bytes)):
        wrong = f"{fmt(ours.wrong, 'd')}/{fmt(ref.wrong, 'd')}"
        cells = [
            *map(str, _key(ours)),
            str(ours.size_bytes),
            f"{ours.busbw_gbps:.2f}",
            f"{ref.busbw_gbps:.2f}",
        ]
        lines.append(line(COLUMNS, [*cells, fmt(_ratio(ours.busbw_gbps, ref.busbw_gbps), ".2f"), wrong]))
        best = peaks.get(_key(ours), (0.0, 0.0))
        peaks[_key(ours)] = (max(best[0], ours.busbw_gbps), max(best[1], ref.busbw_gbps))
    for key, (ours, ref) in peaks.items():
        cells = [*map(str, key), "peak", f"{ours:.2f}", f"{ref:.2f}", fmt(_ratio(ours, ref), ".2f"), ""]
        lines.append(line(COLUMNS, cells))
    return lines


def _ratio(ours: float, ref: float) -> float | None:
    return ours / ref if ref else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m perf.tools.nccl_tests", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--results", required=True, type=Path, help="a result file of the suite's collectives"
    )
    parser.add_argument("logs", nargs="+", type=Path, help="nccl-tests' output, one binary's run per file")
    options = parser.parse_args(argv)
    try:
        nccl = [row for path in options.logs for row in parse_log(path)]
        suite = suite_rows(options.results)
        if not suite:
            raise GateError(f"--results {options.results}: no NCCL collective results in it")
        lines = table(suite, nccl)
        if not lines:
            measured = sorted({_key(r) for r in nccl})
            raise GateError(
                f"no size measured by both: the logs hold {measured}, the results "
                f"{sorted({_key(r) for r in suite})} (collective, dtype, placement, world size)"
            )
    except GateError as err:
        print(f"perf.tools.nccl_tests: error: {err}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
