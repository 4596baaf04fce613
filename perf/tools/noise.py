"""A runner's noise: each benchmark's run-to-run spread, stored per GPU, and the GPU-time thresholds the
gate takes from it.

    python -m perf.tools.noise -- --tier pr                # the selection 3 times back to back
    python -m perf.tools.noise --runs 5 --keep runs/ -- --tier pr
    python -m perf.tools.noise --from r1.json r2.json r3.json   # runs already made, on one GPU

It writes baselines/<gpu>/noise.json (or --out FILE), whole or not at all. A benchmark's spread is the
largest ratio between two of its runs' medians, less one, per figure (GPU time, wall time). Its
threshold of a figure is then max(floor, k x spread): k is the smallest factor with which every run,
left out in turn, lies within the threshold that the other runs' spread gives (at least 1, so that the
noise runs never fail against each other; at most K_MAX), one k per figure. A benchmark is recorded as
host-bound where a run measured its host time at HOST_BOUND_SHARE of its median or more, or where its
wall time moved by more than HOST_SPREAD_FACTOR times its GPU time did (and more than the wall floor):
its wall time follows the host. perf/tools/noise_thresholds.py reads the file.
Exit codes: 0 written, 2 nothing written (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perf.storage import recorded_on_cpu, write_whole
from perf.tools.noise_thresholds import FORMAT, Noise, load_noise, noise_path
from perf.tools.regression_rule import GPU, GPU_FLOOR, WALL, WALL_FLOOR
from perf.tools.results import (
    ISOLATED,
    GateError,
    Results,
    aligned,
    check_same_machine,
    load_results,
    this_machine,
)
from perf.tools.runs import Runner, measure, pytest_device, run_pytest, tool_main, with_selection

RUNS = 3
K_MIN, K_MAX = 1.0, 4.0
# Wall time that moved across the runs by more than this many times its GPU time did follows the host.
HOST_SPREAD_FACTOR = 3.0


def spread(medians: Sequence[float]) -> float:
    """The largest ratio between two of the medians, less one: how far two runs fell apart."""
    return max(medians) / min(medians) - 1


def figures_by_benchmark(runs: Sequence[Results]) -> dict[str, dict[str, list[float]]]:
    """Per benchmark in every run, its medians in seconds per figure that every run has."""
    common = [name for name in runs[0].timings if all(name in run.timings for run in runs[1:])]
    found: dict[str, dict[str, list[float]]] = {}
    for name in common:
        figures = [run.figures(name) for run in runs]
        found[name] = {
            figure: [f[figure].median_s for f in figures]
            for figure in (GPU, WALL)
            if all(figure in f for f in figures)
        }
    return found


def choose_k(gpu_medians: Mapping[str, Sequence[float]], floor: float = GPU_FLOOR) -> tuple[float, dict]:
    """The smallest k in [K_MIN, K_MAX] with which each run, left out in turn, is within max(floor, k x
    the others' spread) of every other run; with its basis (how many cases, the one that set it)."""
    needed, worst = K_MIN, None
    cases = 0
    for name, medians in gpu_medians.items():
        if len(medians) < 3:
            continue
        for i, left_out in enumerate(medians):
            others = [m for j, m in enumerate(medians) if j != i]
            apart = max(max(left_out / m, m / left_out) for m in others) - 1
            cases += 1
            if apart <= floor:
                continue  # the floor covers it whatever k is
            base = spread(others)
            k = apart / base if base > 0 else float("inf")
            if k > needed:
                needed, worst = k, name
    chosen = min(K_MAX, needed)
    basis = {
        "left_out_cases": cases,
        "needed": None if needed == float("inf") else round(needed, 3),
        "set_by": worst,
        "capped": needed > K_MAX,
    }
    return round(chosen, 3), basis


def host_bound_in(runs: Sequence[Results], name: str, medians: Mapping[str, Sequence[float]]) -> bool:
    """Whether the runs showed the benchmark host-bound: a host time at HOST_BOUND_SHARE of its median in
    any run, or a wall time that moved beyond the wall floor and HOST_SPREAD_FACTOR times its GPU time."""
    if any(run.timings[name].host_bound for run in runs):
        return True
    if GPU not in medians:
        return False
    wall = spread(medians[WALL])
    return wall > WALL_FLOOR and wall > HOST_SPREAD_FACTOR * spread(medians[GPU])


def noise_document(runs: Sequence[Results], command: str) -> dict[str, Any]:
    """The noise file's content from `runs` of one selection on one GPU (at least 2)."""
    if len(runs) < 2:
        raise GateError(f"noise needs at least 2 runs of the selection; got {len(runs)}")
    for run in runs[1:]:
        check_same_machine(runs[0], run, f"run {run.path}")
    runs = aligned(runs)  # GPU figures of one method (perf/tools/results.py)
    figures = figures_by_benchmark(runs)
    if not figures:
        raise GateError("the runs have no benchmark in common; run the same selection each time")
    gpu = {name: f[GPU] for name, f in figures.items() if GPU in f}
    if not gpu:
        raise GateError(
            "no benchmark has GPU time in every run (CPU runs, or runs under nsys): a noise file "
            "sets GPU-time thresholds and would set none; nothing written"
        )
    methods = {name: {run.gpu_methods.get(name, ISOLATED) for run in runs} for name in gpu}
    mixed = sorted(name for name, found in methods.items() if len(found) > 1)
    if mixed:
        raise GateError(
            f"{mixed[0]}: its GPU time was measured by different methods in the runs "
            f"({', '.join(sorted(methods[mixed[0]]))}); run the same code and --gpu-time each time"
        )
    k, basis = choose_k(gpu)
    k_wall, wall_basis = choose_k({name: f[WALL] for name, f in figures.items()}, WALL_FLOOR)
    benchmarks = {}
    for name, found in figures.items():
        entry: dict[str, Any] = {}
        for figure, medians in found.items():
            entry[f"{figure}_ms"] = [round(m * 1e3, 6) for m in medians]
            entry[f"{figure}_spread"] = round(spread(medians), 6)
        if name in methods:
            entry["gpu_method"] = next(iter(methods[name]))
        entry["host_bound"] = host_bound_in(runs, name, found)
        benchmarks[name] = entry
    first = runs[0].document
    return {
        "format": FORMAT,
        "gpu": runs[0].machine,
        "machine_info": first.get("machine_info", {}),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "runs": [
            {
                "file": str(run.path),
                "datetime": run.document.get("datetime"),
                "commit": run.document.get("commit_info"),
            }
            for run in runs
        ],
        "floor": GPU_FLOOR,
        "k": k,
        "k_basis": basis,
        "wall_floor": WALL_FLOOR,
        "k_wall": k_wall,
        "k_wall_basis": wall_basis,
        "benchmarks": benchmarks,
    }


# --------------------------------------------------------------------------- command line
def distribution(noise: Noise) -> list[str]:
    """The thresholds the file gives, per figure, as a distribution over its benchmarks."""
    lines = []
    for figure, what in ((GPU, "GPU-time"), (WALL, "wall-time")):
        known = noise.figures.get(figure)
        if known is None:
            continue
        values = sorted(t.value for t in map(known.threshold, known.spread) if t is not None)
        if not values:
            lines.append(f"no benchmark with {what} in every run: the gate judges it at --threshold")
            continue
        at_floor = sum(v <= known.floor for v in values)
        quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
        lines.append(
            f"k = {known.k:g}; {what} thresholds of {len(values)} benchmarks: {at_floor} at the floor "
            f"({known.floor:.1%}), {sum(v <= 0.02 for v in values)} at 2% or less; "
            f"median {statistics.median(values):.2%}, "
            f"quartiles {quartiles[0]:.2%} / {quartiles[2]:.2%}, largest {values[-1]:.2%}"
        )
    host_bound = sum(noise.host_bound.values())
    lines.append(f"{host_bound} benchmark(s) host-bound in these runs: their wall time follows the host")
    return lines


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise GateError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
