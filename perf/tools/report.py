"""A report of one benchmark run, or of a run against its baseline: Markdown, HTML and PNG plots.

    python -m perf.tools.report RESULT.json                        # into reports/<RESULT's name>/
    python -m perf.tools.report RESULT.json --baseline OLD.json    # and current against baseline
    python -m perf.tools.report RESULT.json --out DIR

RESULT is what `pytest perf/ --benchmark-json=FILE` or `--benchmark-save=NAME` writes. DIR gets
report.md and report.html (the same content; the HTML needs nothing but the PNGs beside it) and a PNG
per plot that the results have data for (perf/tools/reporting/plots.py).

Result files are read and refused as the regression gate does (perf/tools/gate.py): missing, damaged,
without benchmarks or machine info, or a baseline from another processor. Exit codes: 0 report
written, 2 none written (bad input, a folder that cannot be written), with one line on stderr.

The command reads both files (perf/tools/reading/), takes the gate's rule and the runner's noise file
(perf/tools/judging/), and writes the report (perf/tools/reporting/document.py).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from perf.storage import BASELINES, FOLDER, recorded_on_cpu
from perf.tools.judging.changes import Rule, with_noise
from perf.tools.judging.noise_thresholds import noise_thresholds
from perf.tools.judging.regression_rule import HOST_BOUND_THRESHOLD, THRESHOLD, Z
from perf.tools.reading.destinations import checked
from perf.tools.reading.errors import GateError, ToolParser, tool_main
from perf.tools.reading.results import check_same_machine, load_results
from perf.tools.reporting.document import written
from perf.tools.reporting.gate_output import CPU_NOTE

REPORT_DIR = Path("reports")  # ignored by git (.gitignore: /reports/)


def _parser() -> argparse.ArgumentParser:
    parser = ToolParser(prog="python -m perf.tools.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path, metavar="RESULT.json", help="pytest-benchmark result JSON")
    parser.add_argument("--baseline", type=Path, metavar="FILE", help="result JSON to compare with")
    parser.add_argument(
        "--out", type=Path, metavar="DIR", help=f"folder of the report (default: {REPORT_DIR}/<RESULT name>)"
    )
    parser.add_argument(
        "--threshold",
        type=float,
        metavar="FRACTION",
        default=THRESHOLD,
        help=f"relative change marked slower or faster, in (0, 1) ({THRESHOLD})",
    )
    parser.add_argument("--z", type=float, default=Z, help=f"noise bound in standard errors, > 0 ({Z})")
    parser.add_argument(
        "--host-bound-threshold",
        type=float,
        metavar="FRACTION",
        default=HOST_BOUND_THRESHOLD,
        help="the wall-time threshold of benchmarks host-bound in the baseline, in (0, 1) "
        f"({HOST_BOUND_THRESHOLD})",
    )
    parser.add_argument(
        "--noise",
        metavar="FILE|off",
        help="the runner's noise file, which sets each benchmark's GPU-time threshold as in the gate "
        "(default: baselines/<gpu>/noise.json where it exists; off: --threshold for every GPU time)",
    )
    return parser


def _options(argv: Sequence[str]) -> argparse.Namespace:
    options = _parser().parse_args(list(argv))
    if not 0 < options.threshold < 1:
        raise GateError(f"--threshold {options.threshold:g}: accepted is a fraction > 0 and < 1, e.g. 0.05")
    if not 0 < options.z < math.inf:
        raise GateError(f"--z {options.z:g}: accepted is a positive number of standard errors, e.g. 3")
    if not 0 < options.host_bound_threshold < 1:
        raise GateError(
            f"--host-bound-threshold {options.host_bound_threshold:g}: "
            "accepted is a fraction > 0 and < 1, e.g. 0.3"
        )
    if options.out is None:
        options.out = REPORT_DIR / options.result.stem
    checked(options.out, "--out", FOLDER)
    return options


def main(argv: Sequence[str] | None = None, baselines_dir: Path = BASELINES) -> int:
    """The command line; returns the exit code (0 report written, 2 none, 130 interrupted). `baselines_dir`
    holds the noise files."""

    def write() -> int:
        options = _options(sys.argv[1:] if argv is None else argv)
        current = load_results(options.result, "result")
        baseline, thresholds, notes = None, None, []
        if options.baseline is not None:
            baseline = load_results(options.baseline, "--baseline")
            check_same_machine(baseline, current, f"result {options.result}")
            # The GPU-time thresholds the gate would take: the runner's noise file where there is one.
            thresholds = noise_thresholds(options.noise, baseline, options.threshold, baselines_dir)
            notes = thresholds.summary()
        on_cpu = recorded_on_cpu(current.machine)
        if on_cpu:  # in the report as beside the gate's verdict
            notes = [*notes, CPU_NOTE]
        rule = Rule(options.threshold, options.z, options.host_bound_threshold)
        if thresholds is not None:
            rule = with_noise(rule, thresholds)
        paths = written(current, baseline, options.out, rule, notes)
        print(f"report: {' and '.join(map(str, paths))}")
        if on_cpu:
            print(CPU_NOTE)
        return 0

    return tool_main("perf.tools.report", write)


if __name__ == "__main__":
    sys.exit(main())
