"""The regression gate: compare a benchmark run with a stored baseline, failing only on slowdowns that
are larger than a threshold, larger than the runs' own noise, and still there when measured again.

    python -m perf.tools.gate                            # run perf/; this machine's newest baseline
    python -m perf.tools.gate -- -k forward --tier full  # pytest arguments after --
    python -m perf.tools.gate --baseline OLD.json --current NEW.json

Exit codes: 0 no regression, 1 at least one regression, 2 no verdict (bad input, failed pytest run).
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from perf.storage import BASELINES, ROOT
from perf.tools.regression_rule import (
    GPU,
    HOST_BOUND_SHARE,
    HOST_BOUND_SLOWER,
    HOST_BOUND_THRESHOLD,
    THRESHOLD,
    WALL,
    Timing,
    Z,
    judge_figure,
    noise_bound,
    verdicts,
)
from perf.tools.results import (
    GateError,
    Results,
    check_same_machine,
    load_results,
    newest_baseline,
    this_machine_slug,
)

# pytest exit codes that are not a failed run: 0 all passed or skipped, 5 nothing collected.
PYTEST_OK = (0, 5)

# Runs `python -m pytest ARGS --benchmark-json=PATH`; returns pytest's exit code.
Runner = Callable[[Sequence[str], Path], int]


# --------------------------------------------------------------------------- comparison
@dataclass(frozen=True)
class Change:
    name: str  # pytest node id
    baseline: Timing
    current: Timing
    noise_s: float | None  # the bound of `noise_bound`; None when only the threshold applied
    remeasured: tuple[float, ...] = ()  # ratios of the re-measurements, in order
    figure: str = WALL  # which of the benchmark's figures changed: WALL or GPU

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
    # Benchmarks judged on wall time alone, by why their GPU time could not be compared.
    wall_only: dict[str, list[str]] = field(default_factory=dict)


def gpu_missing_reason(baseline: Results, current: Results, name: str) -> str | None:
    """Why the GPU times of a benchmark in both runs cannot be compared, or None if they can."""
    if name not in baseline.gpu_timings:
        return f"the baseline has no GPU time: {baseline.gpu_absent.get(name, 'not recorded')}"
    if name not in current.gpu_timings:
        return f"this run has no GPU time: {current.gpu_absent.get(name, 'not recorded')}"
    return None


def compare(
    baseline: Results,
    current: Results,
    threshold: float,
    z: float,
    host_threshold: float = HOST_BOUND_THRESHOLD,
) -> Comparison:
    """Every benchmark of both runs judged on each figure both have (`verdicts`); one Change per
    benchmark and figure that moved."""
    suspects, improvements, host_bound = [], [], []
    wall_only: dict[str, list[str]] = {}
    common = [name for name in current.timings if name in baseline.timings]
    for name in common:
        before, after = baseline.figures(name), current.figures(name)
        for figure, verdict in verdicts(before, after, threshold, z, host_threshold).items():
            change = Change(
                name, before[figure], after[figure], noise_bound(before[figure], after[figure], z), (), figure
            )
            if verdict == "slower":
                suspects.append(change)
            elif verdict == "faster":
                improvements.append(change)
            elif verdict == HOST_BOUND_SLOWER:
                host_bound.append(change)
        reason = gpu_missing_reason(baseline, current, name)
        if reason is not None:
            wall_only.setdefault(reason, []).append(name)
    return Comparison(
        compared=len(common),
        suspects=sorted(suspects, key=lambda c: -c.ratio),
        improvements=sorted(improvements, key=lambda c: c.ratio),
        host_bound=sorted(host_bound, key=lambda c: -c.ratio),
        new=sorted(name for name in current.timings if name not in baseline.timings),
        missing=sorted(name for name in baseline.timings if name not in current.timings),
        wall_only=wall_only,
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
    is a suspect too, on the same figure. Each round re-runs only the benchmarks still suspect."""
    remaining = list(suspects)
    ratios: dict[tuple[str, str], list[float]] = {(c.name, c.figure): [] for c in suspects}
    not_persisted: list[Change] = []
    for _ in range(times):
        if not remaining:
            break
        again = remeasure(list(dict.fromkeys(c.name for c in remaining)))
        still = []
        for change in remaining:
            timing = again.figures(change.name).get(change.figure) if change.name in again.timings else None
            if timing is None:
                # Skipped, not collected or without that figure this time: nothing showed it to be
                # noise, so it stays a suspect; a gate must not pass because a figure went missing.
                still.append(change)
                continue
            ratios[change.name, change.figure].append(timing.median_s / change.baseline.median_s)
            verdict = judge_figure(change.figure, change.baseline, timing, threshold, z, host_threshold)
            (still if verdict == "slower" else not_persisted).append(change)
        remaining = still

    def with_ratios(changes: list[Change]) -> list[Change]:
        return [replace(c, remeasured=tuple(ratios[c.name, c.figure])) for c in changes]

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
# Benchmarks judged on wall time alone are named where a reason covers at most this many (a profiler
# failure in one benchmark); beyond it (a baseline recorded before GPU time) they are counted.
LISTED_PER_REASON = 10


def _row(change: Change) -> str:
    before, after = change.baseline.median_s * 1e3, change.current.median_s * 1e3
    noise = "-" if change.noise_s is None else f"{change.noise_s * 1e3:.3f}"
    remeasured = ",".join(f"{r:.3f}" for r in change.remeasured) or "-"
    return (
        f"  {change.figure:<6} {before:>10.3f} {after:>10.3f} {change.ratio:>7.3f} {noise:>9} "
        f"{remeasured:>13}  {change.name}"
    )


def _wall_only_lines(wall_only: dict[str, list[str]]) -> list[str]:
    if not wall_only:
        return []
    count = sum(map(len, wall_only.values()))
    lines = [f"judged on wall time alone, {count} benchmark(s) without GPU time to compare:"]
    for reason, names in wall_only.items():
        lines.append(f"  {len(names)}: {reason}")
        if len(names) <= LISTED_PER_REASON:
            lines += [f"    {name}" for name in names]
    return lines


def report(
    comparison: Comparison,
    regressions: list[Change],
    not_persisted: list[Change],
    threshold: float,
    z: float,
    host_threshold: float = HOST_BOUND_THRESHOLD,
) -> list[str]:
    header = (
        f"  {'figure':<6} {'base ms':>10} {'current ms':>10} {'ratio':>7} {'noise ms':>9} "
        f"{'re-measured':>13}  benchmark"
    )
    lines = []
    sections = (
        (f"regressions (slower by more than {threshold:.0%} and than the noise bound)", regressions),
        ("improvements (listed, never failing)", comparison.improvements),
        ("did not persist (slower once, not when measured again: noise)", not_persisted),
        (
            f"host-bound, wall time slower by more than {threshold:.0%} but not {host_threshold:.0%} "
            "(listed, never failing: the host's Python and launches set it; see --host-bound-threshold)",
            comparison.host_bound,
        ),
    )
    for title, changes in sections:
        if changes:
            lines += [f"{title}:", header, *(_row(c) for c in changes)]
    for title, names in (("new (not in the baseline)", comparison.new), ("missing", comparison.missing)):
        if names:
            lines += [f"{title}:", *(f"  {name}" for name in names)]
    lines += _wall_only_lines(comparison.wall_only)
    counts = (
        f"{comparison.compared} compared, {len(comparison.improvements)} faster, "
        f"{len(not_persisted)} did not persist, {len(comparison.host_bound)} host-bound slower, "
        f"{len(comparison.new)} new, {len(comparison.missing)} missing, "
        f"{sum(map(len, comparison.wall_only.values()))} without GPU time; "
        f"threshold {threshold:.0%}, z {z:g}, host-bound {host_threshold:.0%}"
    )
    if regressions:
        by_figure = {f: sum(c.figure == f for c in regressions) for f in (GPU, WALL)}
        named = ", ".join(f"{n} in {figure} time" for figure, n in by_figure.items() if n)
        verdict = f"FAIL: {len(regressions)} regression{'s' * (len(regressions) != 1)} ({named})"
    else:
        verdict = "PASS"
    return [*lines, f"{verdict} ({counts})"]


# --------------------------------------------------------------------------- command line
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise GateError(message)  # one line and exit 2, as every other refusal


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m perf.tools.gate",
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
        print(f"perf.tools.gate: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
