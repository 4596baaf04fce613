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
import sys
from collections.abc import Sequence
from pathlib import Path

from perf.tools.reading.errors import GateError
from perf.tools.reading.nccl_logs import case_key, parse_log, suite_rows
from perf.tools.reporting.nccl_table import table


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
            measured = sorted({case_key(r) for r in nccl})
            raise GateError(
                f"no size measured by both: the logs hold {measured}, the results "
                f"{sorted({case_key(r) for r in suite})} (collective, dtype, placement, world size)"
            )
    except GateError as err:
        print(f"perf.tools.nccl_tests: error: {err}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
