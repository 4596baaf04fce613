"""A runner's noise: each benchmark's run-to-run spread, stored per GPU, and the GPU-time thresholds the
gate takes from it.

    python -m perf.tools.noise -- --tier pr                # the selection 3 times back to back
    python -m perf.tools.noise --runs 5 --keep runs/ -- --tier pr
    python -m perf.tools.noise --from r1.json r2.json r3.json   # runs already made, on one GPU

It writes baselines/<gpu>/noise.json (or --out FILE), whole or not at all. A benchmark's spread is the
largest ratio between two of its runs' medians, less one. Its GPU-time threshold is then
max(GPU_FLOOR, k x spread): k is the smallest factor with which every run, left out in turn, lies
within the threshold that the other runs' spread gives (at least 1, so that the noise runs never fail
against each other; at most K_MAX). Exit codes: 0 written, 2 nothing written (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perf.storage import BASELINES, ROOT, machine_folder, recorded_on_cpu, write_whole
from perf.tools.regression_rule import GPU, GPU_FLOOR, WALL, Threshold
from perf.tools.results import GateError, Results, check_same_machine, load_results, this_machine
from perf.tools.runs import Runner, measure, pytest_device, run_pytest, tool_main, with_selection

NOISE_FILE = "noise.json"
FORMAT = "perf-noise/1"
RUNS = 3
K_MIN, K_MAX = 1.0, 4.0


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


def noise_document(runs: Sequence[Results], command: str) -> dict[str, Any]:
    """The noise file's content from `runs` of one selection on one GPU (at least 2)."""
    if len(runs) < 2:
        raise GateError(f"noise needs at least 2 runs of the selection; got {len(runs)}")
    for run in runs[1:]:
        check_same_machine(runs[0], run, f"run {run.path}")
    figures = figures_by_benchmark(runs)
    if not figures:
        raise GateError("the runs have no benchmark in common; run the same selection each time")
    gpu = {name: f[GPU] for name, f in figures.items() if GPU in f}
    if not gpu:
        raise GateError(
            "no benchmark has GPU time in every run (CPU runs, or runs under nsys): a noise file "
            "sets GPU-time thresholds and would set none; nothing written"
        )
    k, basis = choose_k(gpu)
    benchmarks = {}
    for name, found in figures.items():
        entry: dict[str, Any] = {}
        for figure, medians in found.items():
            entry[f"{figure}_ms"] = [round(m * 1e3, 6) for m in medians]
            entry[f"{figure}_spread"] = round(spread(medians), 6)
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
        "benchmarks": benchmarks,
    }


# --------------------------------------------------------------------------- reading, thresholds
@dataclass(frozen=True)
class Noise:
    """A noise file as the gate uses it."""

    path: Path
    gpu: str
    k: float
    floor: float
    runs: int
    gpu_spread: dict[str, float]  # per benchmark with GPU time in every run
    created: str = ""

    def threshold(self, name: str) -> Threshold | None:
        """The benchmark's GPU-time threshold, or None where the file does not know it."""
        if name not in self.gpu_spread:
            return None
        noise = self.k * self.gpu_spread[name]
        if noise <= self.floor:
            return Threshold(self.floor, "floor")
        return Threshold(noise, f"noise {self.k:g} x {self.gpu_spread[name]:.2%}")


def load_noise(path: Path) -> Noise:
    """Read a noise file; GateError naming it and what is wrong where it cannot be used."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise GateError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GateError(f"{path}: cannot be read as JSON ({err})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GateError(f"{path}: not a noise file of this suite (format {FORMAT!r} expected)")
    k, floor, benchmarks = data.get("k"), data.get("floor"), data.get("benchmarks")
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in (k, floor))
    if not numbers or not isinstance(benchmarks, dict) or not isinstance(data.get("gpu"), str):
        raise GateError(f"{path}: damaged (k, floor, gpu or benchmarks missing or not valid)")
    spreads = {}
    for name, entry in benchmarks.items():
        value = entry.get("gpu_spread") if isinstance(entry, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            spreads[name] = float(value)
    runs = data.get("runs")
    return Noise(
        path,
        data["gpu"],
        float(k),
        float(floor),
        len(runs) if isinstance(runs, list) else 0,
        spreads,
        str(data.get("created", "")),
    )


def noise_path(results: Results, baselines_dir: Path = BASELINES) -> Path:
    """Where the noise file of the GPU that `results` ran on is kept: beside its baselines."""
    info = results.document.get("machine_info", {})
    perf = info.get("perf") if isinstance(info, dict) else None
    return baselines_dir / machine_folder(perf if isinstance(perf, dict) else {}) / NOISE_FILE


@dataclass
class GpuThresholds:
    """Each benchmark's GPU-time threshold: from the noise file where it knows the benchmark, else the
    fallback (--threshold); notes say which file was used, or why none was."""

    fallback: float
    noise: Noise | None = None
    notes: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # benchmarks the noise file does not know

    def __call__(self, name: str) -> Threshold:
        found = self.noise.threshold(name) if self.noise is not None else None
        if found is not None:
            return found
        if self.noise is not None and name not in self.unknown:
            self.unknown.append(name)
        return Threshold(self.fallback, "--threshold")

    def summary(self) -> list[str]:
        lines = list(self.notes)
        if self.unknown:
            lines.append(
                f"{len(self.unknown)} benchmark(s) not in the noise file (new since it was measured, or "
                f"without GPU time there): GPU time judged at --threshold {self.fallback:.0%}"
            )
        return lines


def gpu_thresholds(
    option: str | None, baseline: Results, fallback: float, baselines_dir: Path = BASELINES
) -> GpuThresholds:
    """The thresholds of --noise: 'off', a file, or (None) the noise file beside the baseline's GPU's
    baselines. A missing, damaged or other GPU's file is a note and the fallback, never a failure."""
    fall_back = f"GPU time judged at --threshold {fallback:.0%}"
    path = Path(option) if option and option != "off" else noise_path(baseline, baselines_dir)
    shown = path.relative_to(ROOT) if path.is_absolute() and path.is_relative_to(ROOT) else path
    if option == "off":
        return GpuThresholds(fallback, notes=[f"noise: off (--noise off); {fall_back}"])
    if option is None and not path.is_file():
        return GpuThresholds(
            fallback, notes=[f"noise: no {shown}: {fall_back} (`make noise` measures it)"]
        )
    try:
        noise = load_noise(path)
    except GateError as err:
        return GpuThresholds(fallback, notes=[f"noise: not used, {err}; {fall_back}"])
    if noise.gpu != baseline.machine:
        return GpuThresholds(
            fallback,
            notes=[
                f"noise: not used, {shown} was measured on {noise.gpu}, the baseline on {baseline.machine}; "
                f"{fall_back}"
            ],
        )
    if not noise.gpu_spread:  # written before such files were refused: it sets no threshold
        return GpuThresholds(
            fallback, notes=[f"noise: not used, {shown} has no benchmark with GPU time; {fall_back}"]
        )
    note = (
        f"noise: {shown} ({noise.runs} runs, {noise.created or 'undated'}): GPU time judged at "
        f"max({noise.floor:.1%}, {noise.k:g} x its run-to-run spread)"
    )
    return GpuThresholds(fallback, noise, notes=[note])


# --------------------------------------------------------------------------- command line
def distribution(noise: Noise) -> list[str]:
    """The thresholds the file gives, as a distribution over its benchmarks."""
    values = sorted(t.value for t in map(noise.threshold, noise.gpu_spread) if t is not None)
    if not values:
        return ["no benchmark with GPU time in every run: the gate judges every GPU time at --threshold"]
    at_floor = sum(v <= noise.floor for v in values)
    quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return [
        f"k = {noise.k:g}; GPU-time thresholds of {len(values)} benchmarks: {at_floor} at the floor "
        f"({noise.floor:.1%}), {sum(v <= 0.02 for v in values)} at 2% or less; "
        f"median {statistics.median(values):.2%}, "
        f"quartiles {quartiles[0]:.2%} / {quartiles[2]:.2%}, largest {values[-1]:.2%}"
    ]


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
