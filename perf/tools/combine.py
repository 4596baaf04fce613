"""Store the parts of one suite run, measured in several pytest invocations, as one baseline file.

    pytest perf/test_end_to_end.py ... --benchmark-json=part1.json
    pytest perf/test_attention.py --benchmark-json=part2.json
    python -m perf.tools.combine --name h100-default part1.json part2.json

A full default run takes longer than CI jobs and lent machines often let one command run (NOTES.md:
Measurements behind comments in the code). The parts must come from one machine (the same GPU,
driver, CUDA, torch and triton) and one commit, and no benchmark may be in two parts. The file goes to
baselines/<gpu>/NNNN_<name>.json, the next free number: the newest baseline, the one
`--benchmark-compare` and the gate use. Nothing is overwritten. Exit codes: 0 stored, 2 refused (one
line on stderr saying why), 130 interrupted (nothing written).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from perf.storage import BASELINES
from perf.tools.reading.errors import GateError, tool_main
from perf.tools.reading.parts import NAME, combine, store
from perf.tools.reading.results import load_results


def main(argv: Sequence[str] | None = None, baselines: Path = BASELINES) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.tools.combine", description=__doc__.split("\n")[0])
    parser.add_argument("--name", required=True, help="the baseline's name: letters, digits, '_', '.', '-'")
    parser.add_argument("parts", nargs="+", type=Path, help="pytest-benchmark JSON files of one run")
    options = parser.parse_args(argv)

    def store_parts() -> int:
        if not NAME.fullmatch(options.name):
            raise GateError(f"--name {options.name!r}: use letters, digits, '_', '.' and '-'")
        try:
            path = store(combine(options.parts), options.name, baselines)
        except OSError as err:
            raise GateError(f"cannot write the baseline: {err}") from None
        print(f"stored {len(load_results(path, 'baseline').timings)} benchmarks in {path}")
        return 0

    return tool_main("perf.tools.combine", store_parts)


if __name__ == "__main__":
    sys.exit(main())
