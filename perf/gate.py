"""The regression gate: compare a benchmark run with a stored baseline, failing only on slowdowns that
are larger than a threshold, larger than the runs' own noise, and still there when measured again.

    python -m perf.gate                             # run perf/; compare with this machine's newest baseline
    python -m perf.gate -- -k forward --tier full   # pytest arguments after --
    python -m perf.gate --baseline OLD.json --current NEW.json

Exit codes: 0 no regression, 1 at least one regression, 2 no verdict (bad input, failed pytest run).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASELINES = ROOT / "baselines"

# The median of n normal samples has a standard error of sqrt(pi / 2) * sigma / sqrt(n).
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)  # 1.2533
# The interquartile range of a normal distribution is 1.349 sigma; unlike the standard deviation it
# is not inflated by the few slow rounds (a collection pass, a clock change) that most runs have.
IQR_PER_SIGMA = 1.349

# The defaults of the rule: the relative slowdown that matters, and the noise bound in standard errors.
THRESHOLD = 0.05
Z = 3.0

# A benchmark is host-bound when one call keeps the host busy for at least this share of the call's
# median time (extra_info host_ms against median_ms): the GPU then waits on Python and kernel
# launches, and the time follows the host's CPU. Over three back-to-back runs of each part of the
# default suite on lent H100s, such benchmarks moved by 14-15% (median) and up to 2.0x, GPU-bound
# ones by 0.7-0.75% (median).
# They are judged at a threshold of their own; slowdowns between the two thresholds are listed.
HOST_BOUND_SHARE = 0.8
HOST_BOUND_THRESHOLD = 0.25
HOST_BOUND_SLOWER = "host-bound slower"  # the verdict of a host-bound slowdown within its threshold

# pytest exit codes that are not a failed run: 0 all passed or skipped, 5 nothing collected.
PYTEST_OK = (0, 5)

# Runs `python -m pytest ARGS --benchmark-json=PATH`; returns pytest's exit code.
Runner = Callable[[Sequence[str], Path], int]


class GateError(ValueError):
    """Input on which the gate refuses a verdict: it says why and exits 2, it never passes."""


# --------------------------------------------------------------------------- the rule
@dataclass(frozen=True)
class Timing:
    """One benchmark of one run: its median and the standard error of that median, in seconds."""

    median_s: float
    se_s: float | None  # None: fewer than 2 rounds, too few to estimate a spread
    host_bound: bool = False  # see HOST_BOUND_SHARE


def is_host_bound(extra_info: object) -> bool:
    """Whether the suite recorded a host time per call of at least HOST_BOUND_SHARE of the median."""
    if not isinstance(extra_info, dict):
        return False
    host_ms, median_ms = extra_info.get("host_ms"), extra_info.get("median_ms")
    numbers = all(isinstance(v, int | float) and v > 0 for v in (host_ms, median_ms))
    return numbers and host_ms >= HOST_BOUND_SHARE * median_ms


def median_standard_error(stats: Mapping[str, Any]) -> float | None:
    """A robust standard error of the median from a run's own rounds (pytest-benchmark's stats).

    sigma comes from the IQR (IQR / 1.349), or from the standard deviation where the IQR is 0 or
    missing (few rounds, or rounds identical to the timer's resolution).
    """
    rounds = stats.get("rounds") or 0
    if rounds < 2:
        return None  # one round tells nothing about the spread: only the threshold applies
    iqr = stats.get("iqr") or 0.0
    sigma = iqr / IQR_PER_SIGMA if iqr > 0 else stats.get("stddev") or 0.0
    return MEDIAN_SE_FACTOR * sigma / math.sqrt(rounds)


def noise_bound(baseline: Timing, current: Timing, z: float) -> float | None:
    """Seconds of median difference that the two runs' noise explains at z standard errors."""
    if baseline.se_s is None or current.se_s is None:
        return None
    return z * math.hypot(baseline.se_s, current.se_s)


def classify(baseline: Timing, current: Timing, threshold: float, z: float) -> str:
    """'slower', 'faster' or 'unchanged': the one rule of the gate.

    A change counts only when it is large enough to matter AND too large to be noise:
    - matter: the ratio of medians leaves [1 - threshold, 1 + threshold] (5% by default), so
      that a real but tiny difference of a very steady benchmark does not fail a change;
    - noise: the difference of medians exceeds z standard errors of that difference, each run's
      standard error taken from its own rounds (`median_standard_error`). A benchmark with a wide
      spread (a launch-bound step, a shared host) then needs a larger move to count, while a
      steady one is judged by the threshold alone. With z = 3 about 1 in 740 comparisons of
      unchanged code pass the bound on the slow side by chance, before re-measurement.
    Where either run has fewer than 2 rounds there is no spread to compare with, and the threshold
    alone decides.
    """
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be > 0 and < 1; got {threshold}")
    if not 0 < z < math.inf:
        raise ValueError(f"z must be a positive number; got {z}")
    difference = current.median_s - baseline.median_s
    bound = noise_bound(baseline, current, z)
    beyond_noise = bound is None or abs(difference) > bound
    ratio = current.median_s / baseline.median_s
    if ratio > 1 + threshold and beyond_noise:
        return "slower"
    if ratio < 1 - threshold and beyond_noise:
        return "faster"
    return "unchanged"


def judge(
    baseline: Timing,
    current: Timing,
    threshold: float,
    z: float,
    host_threshold: float = HOST_BOUND_THRESHOLD,
) -> str:
    """`classify` with the host-bound rule: a slowdown of a benchmark host-bound in the baseline is
    'slower' only beyond `host_threshold`; within it, it is HOST_BOUND_SLOWER (listed, never failing).

    The baseline decides, not the current run: a change that makes a GPU-bound benchmark wait on
    the host (a synchronization, Python work per step) is judged at the normal threshold.
    """
    verdict = classify(baseline, current, threshold, z)
    if verdict != "slower" or not baseline.host_bound:
        return verdict
    return "slower" if classify(baseline, current, host_threshold, z) == "slower" else HOST_BOUND_SLOWER


# --------------------------------------------------------------------------- result files
@dataclass(frozen=True)
class Results:
    """A pytest-benchmark JSON file: where it was recorded and its timings by pytest node id."""

    path: Path
    machine: str  # the GPU model, or 'the CPU (<model>)' for CPU runs
    timings: dict[str, Timing]
    # The whole file as read, for readers that need more than timings (reports, combining parts).
    document: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


def recorded_on(perf_info: object) -> str | None:
    """The processor a result belongs to: the GPU model, or the CPU model for CPU runs."""
    if not isinstance(perf_info, dict):
        return None
    gpu = perf_info.get("gpu")
    if isinstance(gpu, dict) and gpu.get("name"):
        return str(gpu["name"])
    return f"the CPU ({perf_info.get('cpu_model', 'unknown model')})"


def folder_name(processor: str) -> str:
    """The folder under baselines/ of a GPU model, or of 'cpu <model>': lower case, other runs as '-'."""
    return re.sub(r"[^a-z0-9]+", "-", processor.lower()).strip("-")


def machine_folder(perf_info: Mapping[str, Any]) -> str:
    """The baselines/ folder that results with this machine_info.perf belong in."""
    gpu = perf_info.get("gpu")
    if isinstance(gpu, dict) and gpu.get("name"):
        return folder_name(str(gpu["name"]))
    return folder_name(f"cpu {perf_info.get('cpu_model', 'unknown model')}")


def load_results(path: Path, role: str) -> Results:
    """Read a result file; `role` ('--baseline', '--current', 're-measurement') names it in errors."""
    where = f"{role} {path}"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise GateError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise GateError(f"{where}: cannot be read ({err})") from None
    except json.JSONDecodeError as err:
        raise GateError(f"{where}: not valid JSON, truncated or damaged ({err})") from None
    benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benchmarks, list) or not benchmarks:
        raise GateError(
            f"{where}: no benchmarks in it; a timed run (without --benchmark-disable) with "
            "--benchmark-json=FILE writes them"
        )
    machine_info = data.get("machine_info")
    machine = recorded_on(machine_info.get("perf") if isinstance(machine_info, dict) else None)
    if machine is None:
        raise GateError(f"{where}: no machine_info.perf, so the GPU it ran on is unknown")
    timings = {}
    for i, entry in enumerate(benchmarks):
        stats = entry.get("stats") if isinstance(entry, dict) else None
        median = stats.get("median") if isinstance(stats, dict) else None
        name = entry.get("fullname") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not isinstance(median, int | float) or not median > 0:
            raise GateError(f"{where}: benchmark #{i} has no fullname or no positive stats.median")
        host_bound = is_host_bound(entry.get("extra_info"))
        timings[name] = Timing(float(median), median_standard_error(stats), host_bound)
    return Results(path, machine, timings, data)


def check_same_machine(baseline: Results, current: Results, current_label: str) -> None:
    """`current_label` names the current results in the message: '--current FILE' or 'this run'."""
    if baseline.machine != current.machine:
        raise GateError(
            f"{current_label} was recorded on {current.machine}, --baseline {baseline.path} on "
            f"{baseline.machine}; results of different processors are not comparable"
        )


def newest_baseline(baselines_dir: Path, slug: str) -> Path:
    """The newest stored result of one machine's folder (baselines/README.md names them NNNN_name.json)."""
    stored = sorted((baselines_dir / slug).glob("[0-9][0-9][0-9][0-9]_*.json"))
    if not stored:
        raise GateError(
            f"no stored baseline for {slug} in {baselines_dir / slug}/; save one with `make baseline` "
            "or give --baseline FILE"
        )
    return stored[-1]


def this_machine_slug() -> str:
    from perf import harness  # torch is imported only when the machine must be asked

    return harness.machine_slug(harness.resolve_device("auto"))


# --------------------------------------------------------------------------- comparison
@dataclass(frozen=True)
class Change:
    name: str  # pytest node id
    baseline: Timing
    current: Timing
    noise_s: float | None  # the bound of `noise_bound`; None when only the threshold applied
    remeasured: tuple[float, ...] = ()  # ratios of the re-measurements, in order

    @property
    def ratio(self) -> float:
        return self.current.median_s / self.baseline.median_s


@dataclass(frozen=True)
class Comparison:
    compared: int
    suspects: list[Change]  # slower beyond threshold and noise, not yet measured again
    improvements: list[Change]
    host_bound: list[Change]  # host-bound and slower within their own threshold: listed (see `judge`)
    new: list[str]  # in the current run only
    missing: list[str]  # in the baseline only


def compare(
    baseline: Results,
    current: Results,
    threshold: float,
    z: float,
    host_threshold: float = HOST_BOUND_THRESHOLD,
) -> Comparison:
    suspects, improvements, host_bound = [], [], []
    common = [name for name in current.timings if name in baseline.timings]
    for name in common:
        before, after = baseline.timings[name], current.timings[name]
        verdict = judge(before, after, threshold, z, host_threshold)
        change = Change(name, before, after, noise_bound(before, after, z))
        if verdict == "slower":
            suspects.append(change)
        elif verdict == "faster":
            improvements.append(change)
        elif verdict == HOST_BOUND_SLOWER:
            host_bound.append(change)
    return Comparison(
        compared=len(common),
        suspects=sorted(suspects, key=lambda c: -c.ratio),
        improvements=sorted(improvements, key=lambda c: c.ratio),
        host_bound=sorted(host_bound, key=lambda c: -c.ratio),
        new=sorted(name for name in current.timings if name not in baseline.timings),
        missing=sorted(name for name in baseline.timings if name not in current.timings),
    )


def confirm(
    suspects: Sequence[Change],
    baseline: Results,
    remeasure: Callable[[list[str]], Results],
    times: int,
    threshold: float,
    z: float,
    host_threshold: float = HOST_BOUND_THRESHOLD,
) -> tuple[list[Change], list[Change]]:
    """(regressions, did not persist): a suspect is a regression only if every re-measurement of it
    is a suspect too. Each round re-runs only those still suspect."""
    remaining = list(suspects)
    ratios: dict[str, list[float]] = {c.name: [] for c in suspects}
    not_persisted: list[Change] = []
    for _ in range(times):
        if not remaining:
            break
        again = remeasure([c.name for c in remaining]).timings
        still = []
        for change in remaining:
            timing = again.get(change.name)
            if timing is None:
                # Skipped or not collected this time: nothing showed it to be noise, so it stays a
                # suspect; a gate must not pass because a benchmark stopped running.
                still.append(change)
                continue
            ratios[change.name].append(timing.median_s / change.baseline.median_s)
            slower = judge(change.baseline, timing, threshold, z, host_threshold) == "slower"
            (still if slower else not_persisted).append(change)
        remaining = still

    def with_ratios(changes: list[Change]) -> list[Change]:
        return [Change(c.name, c.baseline, c.current, c.noise_s, tuple(ratios[c.name])) for c in changes]

    return with_ratios(remaining), with_ratios(not_persisted)


# --------------------------------------------------------------------------- running pytest
def run_pytest(args: Sequence[str], json_path: Path) -> int:
    """The default runner: pytest in the repository root, its output on this terminal."""
    command = [sys.executable, "-m", "pytest", *args, f"--benchmark-json={json_path}"]
    return subprocess.run(command, cwd=ROOT, check=False).returncode


def is_selection(arg: str) -> bool:
    """A path or node id under perf/ among the pytest arguments (`perf/test_matmul.py::test_matmul[n256]`):
    it replaces the default perf/. Anything else (an option, a -k expression) is passed as it is."""
    return arg.startswith("perf/") and (ROOT / arg.split("::")[0]).exists()


def measure(runner: Runner, args: Sequence[str], role: str, save: Path | None = None) -> Results:
    """Run the benchmarks and read their results; `save` keeps a copy of the result file."""
    with tempfile.TemporaryDirectory(prefix="perf-gate-") as folder:
        json_path = Path(folder) / "results.json"
        code = runner(list(args), json_path)
        shown = " ".join(["pytest", *args])
        if code not in PYTEST_OK:
            raise GateError(f"`{shown}` failed with exit code {code}; no verdict on a failed run")
        if not json_path.is_file():
            raise GateError(f"`{shown}` ran no benchmark (exit code {code}); check the selection")
        results = load_results(json_path, role)
        if save is not None:
            try:
                save.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(json_path, save)
            except OSError as err:
                raise GateError(f"--save {save}: cannot write the results ({err.strerror or err})") from None
        return results


# --------------------------------------------------------------------------- report
def _row(change: Change) -> str:
    before, after = change.baseline.median_s * 1e3, change.current.median_s * 1e3
    noise = "-" if change.noise_s is None else f"{change.noise_s * 1e3:.3f}"
    remeasured = ",".join(f"{r:.3f}" for r in change.remeasured) or "-"
    return f"  {before:>10.3f} {after:>10.3f} {change.ratio:>7.3f} {noise:>9} {remeasured:>13}  {change.name}"


def report(
    comparison: Comparison,
    regressions: list[Change],
    not_persisted: list[Change],
    threshold: float,
    z: float,
    host_threshold: float = HOST_BOUND_THRESHOLD,
) -> list[str]:
    header = (
        f"  {'base ms':>10} {'current ms':>10} {'ratio':>7} {'noise ms':>9} {'re-measured':>13}  benchmark"
    )
    lines = []
    sections = (
        (f"regressions (slower by more than {threshold:.0%} and than the noise bound)", regressions),
        ("improvements (listed, never failing)", comparison.improvements),
        ("did not persist (slower once, not when measured again: noise)", not_persisted),
        (
            f"host-bound, slower by more than {threshold:.0%} but not {host_threshold:.0%} (listed, never "
            "failing: the host's Python and launches set their time; see --host-bound-threshold)",
            comparison.host_bound,
        ),
    )
    for title, changes in sections:
        if changes:
            lines += [f"{title}:", header, *(_row(c) for c in changes)]
    for title, names in (("new (not in the baseline)", comparison.new), ("missing", comparison.missing)):
        if names:
            lines += [f"{title}:", *(f"  {name}" for name in names)]
    counts = (
        f"{comparison.compared} compared, {len(comparison.improvements)} faster, "
        f"{len(not_persisted)} did not persist, {len(comparison.host_bound)} host-bound slower, "
        f"{len(comparison.new)} new, {len(comparison.missing)} missing; "
        f"threshold {threshold:.0%}, z {z:g}, host-bound {host_threshold:.0%}"
    )
    verdict = f"FAIL: {len(regressions)} regression{'s' * (len(regressions) != 1)}" if regressions else "PASS"
    return [*lines, f"{verdict} ({counts})"]


# --------------------------------------------------------------------------- command line
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise GateError(message)  # one line and exit 2, as every other refusal


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m perf.gate",
        description=__doc__.split("\n\n")[0],
        epilog="Arguments after -- go to pytest: a -k expression, options (--tier, --device), paths or node "
        "ids under perf/ in place of perf/. Suspects are measured again by node id with the same options.",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="FILE",
        help="result JSON to compare with (default: newest in baselines/<machine>/)",
    )
    parser.add_argument(
        "--current",
        type=Path,
        metavar="FILE",
        help="result JSON of the run to judge, instead of running pytest perf/ here; nothing can be "
        "re-run then, so every suspect counts as a regression",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        metavar="FRACTION",
        default=THRESHOLD,
        help=f"relative slowdown that matters, in (0, 1) ({THRESHOLD:g})",
    )
    parser.add_argument(
        "--save",
        type=Path,
        metavar="FILE",
        help="keep the result JSON of the run here (for a report or a CI artifact)",
    )
    parser.add_argument(
        "--host-bound-threshold",
        type=float,
        metavar="FRACTION",
        default=HOST_BOUND_THRESHOLD,
        help="relative slowdown that matters for benchmarks host-bound in the baseline (the host "
        f"busy for {HOST_BOUND_SHARE * 100:.0f}%% of a call or more), in (0, 1) ({HOST_BOUND_THRESHOLD:g}); "
        "smaller ones are listed",
    )
    parser.add_argument("--z", type=float, default=Z, help=f"noise bound in standard errors, > 0 ({Z:g})")
    parser.add_argument(
        "--remeasure", type=int, metavar="N", default=2, help="times a suspect is measured again, >= 0 (2)"
    )
    return parser


def _options(argv: Sequence[str]) -> argparse.Namespace:
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    options = _parser().parse_args(argv[:split])
    options.pytest_args = argv[split + 1 :]
    if not 0 < options.threshold < 1:
        raise GateError(f"--threshold {options.threshold:g}: accepted is a fraction > 0 and < 1, e.g. 0.05")
    if not 0 < options.host_bound_threshold < 1:
        raise GateError(
            f"--host-bound-threshold {options.host_bound_threshold:g}: "
            "accepted is a fraction > 0 and < 1, e.g. 0.3"
        )
    if not 0 < options.z < math.inf:
        raise GateError(f"--z {options.z:g}: accepted is a positive number of standard errors, e.g. 3")
    if options.remeasure < 0:
        raise GateError(f"--remeasure {options.remeasure}: accepted is an integer >= 0")
    if options.current is not None and options.save is not None:
        raise GateError("--save keeps the results of the gate's own run; with --current there is none")
    if options.current is not None and options.pytest_args:
        raise GateError(
            "pytest arguments after -- need a run of the gate's own; leave them out with --current"
        )
    return options


def _judge(options: argparse.Namespace, runner: Runner, baselines_dir: Path) -> int:
    baseline_path = options.baseline or newest_baseline(baselines_dir, this_machine_slug())
    baseline = load_results(baseline_path, "--baseline")
    if options.current is not None:
        current = load_results(options.current, "--current")
    else:
        args = options.pytest_args
        selection = args if any(map(is_selection, args)) else ["perf/", *args]
        current = measure(runner, selection, "--current", save=options.save)
    check_same_machine(baseline, current, f"--current {options.current}" if options.current else "this run")
    host_threshold = options.host_bound_threshold
    comparison = compare(baseline, current, options.threshold, options.z, host_threshold)
    if options.current is not None:
        regressions, not_persisted = comparison.suspects, []
    else:
        flags = [a for a in options.pytest_args if not is_selection(a)]

        def remeasure(names: list[str]) -> Results:
            return measure(runner, [*names, *flags], "re-measurement")

        regressions, not_persisted = confirm(
            comparison.suspects,
            baseline,
            remeasure,
            options.remeasure,
            options.threshold,
            options.z,
            host_threshold,
        )
    print(f"baseline: {baseline.path} ({baseline.machine})")
    print(f"current:  {options.current or 'this run'} ({current.machine})")
    print(
        "\n".join(
            report(comparison, regressions, not_persisted, options.threshold, options.z, host_threshold)
        )
    )
    return 1 if regressions else 0


def main(
    argv: Sequence[str] | None = None, *, runner: Runner = run_pytest, baselines_dir: Path = BASELINES
) -> int:
    """The command line; returns the exit code (0 pass, 1 regression, 2 no verdict)."""
    try:
        options = _options(sys.argv[1:] if argv is None else argv)
        return _judge(options, runner, baselines_dir)
    except GateError as err:
        print(f"perf.gate: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
