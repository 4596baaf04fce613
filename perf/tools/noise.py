"""A runner's noise: each benchmark's run-to-run spread, stored per GPU, and the GPU-time thresholds the
gate takes from it.

    python -m perf.tools.noise -- --tier pr                # the selection 3 times back to back
    python -m perf.tools.noise --runs 5 --keep runs/ -- --tier pr
    python -m perf.tools.noise --from r1.json r2.json r3.json   # runs already made, on one GPU

It writes baselines/<gpu>/noise.json (or --out FILE), whole or not at all: per benchmark its spread of
each figure (GPU time, wall time), the factor k of each figure and whether its runs showed it host-bound
(perf/tools/judging/noise_spread.py says how), from which perf/tools/judging/noise_thresholds.py gives the
gate each benchmark's thresholds, max(floor, k x spread).
Exit codes: 0 written, 2 nothing written (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from perf.storage import FOLDER, recorded_on_cpu, write_whole
from perf.tools.judging.noise_spread import noise_document
from perf.tools.judging.noise_thresholds import load_noise, noise_path
from perf.tools.reading.destinations import checked
from perf.tools.reading.errors import GateError, ToolParser, tool_main
from perf.tools.reading.results import Results, load_results, this_machine
from perf.tools.reporting.noise_summary import distribution
from perf.tools.running.runs import Runner, measure, pytest_device, run_pytest, with_selection

RUNS = 3


def _parser() -> argparse.ArgumentParser:
    parser = ToolParser(
        prog="python -m perf.tools.noise",
        description=__doc__.split("\n\n")[0],
        epilog="Arguments after -- go to pytest, as for the gate.",
    )
    parser.add_argument(
        "--runs", type=int, default=RUNS, metavar="N", help=f"runs back to back, >= 2 ({RUNS})"
    )
    parser.add_argument(
        "--from",
        dest="sources",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="result files of runs already made, instead of running",
    )
    parser.add_argument(
        "--out", type=Path, metavar="FILE", help="where to write (default: baselines/<gpu>/noise.json)"
    )
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep each run's result file in DIR")
    return parser


def _runs(
    options: argparse.Namespace, pytest_args: list[str], runner: Runner, machine: Callable[[str], str]
) -> tuple[list[Results], str]:
    """The runs the noise comes from, and the command that gave them."""
    if options.sources:
        if pytest_args or options.keep:
            raise GateError("--from reads runs already made: pytest arguments and --keep need a run")
        runs = [load_results(path, "--from") for path in options.sources]
        return runs, "python -m perf.tools.noise --from " + " ".join(map(str, options.sources))
    if options.runs < 2:
        raise GateError(f"--runs {options.runs}: accepted is an integer >= 2")
    here = machine(pytest_device(pytest_args))
    if recorded_on_cpu(here):
        raise GateError(
            f"no CUDA GPU in use ({here}): a noise file holds GPU-time spreads, which a CPU run has none "
            "of; run it on the GPU runner (nothing was run)"
        )
    args = with_selection(pytest_args)
    runs = []
    for i in range(options.runs):
        keep = options.keep / f"run{i + 1}.json" if options.keep else None
        print(f"perf.tools.noise: run {i + 1} of {options.runs}: pytest {' '.join(args)}", flush=True)
        runs.append(measure(runner, args, f"run {i + 1}", save=keep))
    return runs, " ".join(["python -m perf.tools.noise --runs", str(options.runs), "--", *pytest_args])


def main(
    argv: Sequence[str] | None = None,
    *,
    runner: Runner = run_pytest,
    machine: Callable[[str], str] = this_machine,
) -> int:
    """The command line; `machine` names the processor a run here on a --device would be recorded on."""
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)

    def write() -> int:
        options = _parser().parse_args(argv[:split])
        checked(options.out, "--out")
        checked(options.keep, "--keep", FOLDER)
        runs, command = _runs(options, argv[split + 1 :], runner, machine)
        document = noise_document(runs, command)
        out = options.out or noise_path(runs[0])
        try:
            write_whole(out, (json.dumps(document, indent=1) + "\n").encode())
        except OSError as err:
            raise GateError(f"cannot write the noise file {out} ({err.strerror or err})") from None
        noise = load_noise(out)
        print(
            f"perf.tools.noise: {len(document['benchmarks'])} benchmarks over {len(runs)} runs "
            f"written to {out}"
        )
        for line in distribution(noise):
            print(f"perf.tools.noise: {line}")
        return 0

    return tool_main("perf.tools.noise", write)


if __name__ == "__main__":
    sys.exit(main())
