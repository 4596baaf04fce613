"""The regression gate: compare a benchmark run with a stored baseline, failing only on slowdowns that
are larger than a threshold, larger than the runs' own noise, and still there when measured again.

    python -m perf.tools.gate                            # run perf/; this machine's newest baseline
    python -m perf.tools.gate -- -k forward --tier full  # pytest arguments after --
    python -m perf.tools.gate --baseline OLD.json --current NEW.json
    python -m perf.tools.gate --base main -- --tier pr  # A/B: main and this tree in turn (perf/tools/ab.py)

Exit codes: 0 no regression, 1 at least one regression, 2 no verdict (bad input, failed pytest run).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from perf.storage import BASELINES, write_whole
from perf.tools import ab, ab_verdict
from perf.tools.changes import Rule, compare, confirm, with_noise
from perf.tools.noise_thresholds import NoiseThresholds, noise_thresholds
from perf.tools.outcome import LISTS, classify, describe
from perf.tools.regression_rule import HOST_BOUND_SHARE, HOST_BOUND_THRESHOLD, THRESHOLD, Z
from perf.tools.results import (
    GateError,
    Results,
    align_to,
    aligned,
    check_same_machine,
    load_results,
    newest_baseline,
    this_machine,
    this_machine_slug,
)
from perf.tools.runs import (
    Runner,
    is_selection,
    measure,
    pytest_device,
    run_pytest,
    tool_main,
    with_selection,
)
from perf.tools.verdict import report
from perf.tools.verdict_markdown import summary
from perf.tools.worktrees import runner_in


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
    parser.add_argument(
        "--noise",
        metavar="FILE|off",
        help="the runner's noise file, which sets each benchmark's GPU-time threshold (default: "
        "baselines/<gpu>/noise.json where it exists; off: --threshold for every GPU time)",
    )
    parser.add_argument(
        "--against",
        choices=("baseline", "history"),
        default="baseline",
        help="baseline: a stored result file (--baseline); history: the recent clean runs of a branch on "
        "this GPU model in the results database, with thresholds from their spread (docs/history.md)",
    )
    parser.add_argument(
        "--history",
        metavar="URL",
        help="with --against history: the results database (default: $PERF_HISTORY, else "
        ".benchmarks/history.sqlite)",
    )
    parser.add_argument(
        "--history-branch",
        metavar="BRANCH",
        default="main",
        help="with --against history: the branch whose runs make the baseline (main)",
    )
    parser.add_argument(
        "--base",
        metavar="REF",
        help="A/B: measure commit REF and this working tree in turn on this machine, instead of comparing "
        "with a stored baseline (docs/gate.md); --save is then a folder for every run's result file",
    )
    parser.add_argument(
        "--max-pairs",
        type=int,
        metavar="N",
        default=ab.MAX_PAIRS,
        help=f"with --base: pairs of runs at most, the first two (ABBA) for all, the rest for the undecided "
        f"({ab.MAX_PAIRS})",
    )
    parser.add_argument("--z", type=float, default=Z, help=f"noise bound in standard errors, > 0 ({Z:g})")
    parser.add_argument(
        "--remeasure", type=int, metavar="N", default=2, help="times a suspect is measured again, >= 0 (2)"
    )
    parser.add_argument(
        "--list",
        metavar="KINDS",
        default="",
        help=f"comma-separated, of {', '.join(LISTS)}: name those benchmarks one by one (by default they are "
        "counted): new ones, the baseline's not compared, those judged on wall time alone",
    )
    parser.add_argument(
        "--markdown",
        type=Path,
        metavar="FILE",
        help="also write the verdict in Markdown here, for GitHub's job summary: the decision, both runs, "
        "each regression with its kernels",
    )
    parser.add_argument(
        "--link",
        metavar="URL",
        help="where the kept verdict, results and report are (a CI run's artifacts), linked from --markdown",
    )
    return parser


def _listing(value: str) -> frozenset[str]:
    kinds = [kind.strip() for kind in value.split(",") if kind.strip()]
    unknown = [kind for kind in kinds if kind not in LISTS]
    if unknown:
        raise GateError(
            f"--list {value}: {unknown[0]!r} is not a kind; accepted is a comma-separated list of "
            f"{', '.join(LISTS)}, e.g. --list new,missing"
        )
    return frozenset(kinds)


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
    options.listing = _listing(options.list)
    if options.base is not None:
        ab.check_options(options, argv[:split])
    if options.markdown is not None and options.markdown.is_dir():
        raise GateError(f"--markdown {options.markdown}: a folder; give the file to write the summary to")
    if options.link is not None and options.markdown is None:
        raise GateError("--link URL goes into the Markdown summary; give --markdown FILE too")
    if options.against == "history":
        given = [flag for flag, value in (("--baseline", options.baseline), ("--base", options.base),
                 ("--noise", options.noise)) if value is not None]  # fmt: skip
        if given:
            raise GateError(f"{given[0]} and --against history name two baselines; give one")
    elif options.history is not None:
        raise GateError("--history URL is the database of --against history; give --against history too")
    if options.current is not None and options.save is not None:
        raise GateError("--save keeps the results of the gate's own run; with --current there is none")
    missing = [a for a in options.pytest_args if a.startswith("perf/") and not is_selection(a)]
    if missing:
        raise GateError(
            f"{missing[0]}: no such file or folder under perf/; give a path or node id that exists"
        )
    if options.current is not None and options.pytest_args:
        raise GateError(
            "pytest arguments after -- need a run of the gate's own; leave them out with --current"
        )
    return options


def _judge(
    options: argparse.Namespace, runner: Runner, baselines_dir: Path, machine: Callable[[str], str]
) -> int:
    if options.against == "history":
        from perf.history.baseline import judged_against_history  # imports the database library

        baseline, current, thresholds = judged_against_history(options, runner, machine)
        return _verdict(options, runner, baseline, current, thresholds)
    baseline_path = options.baseline or newest_baseline(baselines_dir, this_machine_slug())
    baseline = load_results(baseline_path, "--baseline")
    if options.current is not None:
        current = load_results(options.current, "--current")
    else:
        # Every input that can be checked is checked before the suite runs: the baseline's processor too.
        here = machine(pytest_device(options.pytest_args))
        if here != baseline.machine:
            raise GateError(
                f"--baseline {baseline.path} was recorded on {baseline.machine}, "
                f"this run would be on {here}; "
                "results of different processors are not comparable (nothing was run)"
            )
        current = measure(runner, with_selection(options.pytest_args), "--current", save=options.save)
    baseline, current = aligned([baseline, current])  # GPU figures of one method (perf/tools/results.py)
    thresholds = noise_thresholds(options.noise, baseline, options.threshold, baselines_dir)
    return _verdict(options, runner, baseline, current, thresholds)


def _verdict(
    options: argparse.Namespace,
    runner: Runner,
    baseline: Results,
    current: Results,
    thresholds: NoiseThresholds,
) -> int:
    """Judge `current` against `baseline` at `thresholds`, re-measure suspects, print the verdict."""
    check_same_machine(baseline, current, f"--current {options.current}" if options.current else "this run")
    rule = with_noise(Rule(options.threshold, options.z, options.host_bound_threshold), thresholds)
    comparison = compare(baseline, current, rule)
    if options.current is not None:
        regressions, not_persisted = comparison.suspects, []
    else:
        flags = [a for a in options.pytest_args if not is_selection(a)]

        def remeasure(names: list[str]) -> Results:
            return align_to(measure(runner, [*names, *flags], "re-measurement"), baseline.gpu_methods)

        regressions, not_persisted = confirm(comparison.suspects, remeasure, options.remeasure, rule)
    own_run = options.current is None
    remeasured = options.remeasure if own_run and comparison.suspects else 0
    outcome = classify(comparison, regressions, not_persisted, baseline, current, own_run, remeasured)
    here = "this run" + (f" (kept in {options.save})" if options.save else "")
    sides = (describe(baseline, str(baseline.path)), describe(current, str(options.current or here)))
    notes = thresholds.summary()
    print("\n".join(report(outcome, rule, baseline, current, sides, notes, options.listing)))
    if options.markdown is not None:
        text = summary(outcome, rule, baseline, current, sides, notes, options.link)
        try:
            write_whole(options.markdown, text.encode())
        except OSError as err:
            raise GateError(
                f"--markdown {options.markdown}: cannot be written ({err.strerror or err})"
            ) from None
    return 1 if regressions else 0


def main(
    argv: Sequence[str] | None = None,
    *,
    runner: Runner = run_pytest,
    baselines_dir: Path = BASELINES,
    machine: Callable[[str], str] = this_machine,
    runner_for: Callable[[Path], Runner] = runner_in,
) -> int:
    """The command line; returns the exit code (0 pass, 1 regression, 2 no verdict, 130 interrupted).
    `machine` names the processor a run here on a --device would be recorded on; `runner_for` gives the
    runner of a checkout (--base: the base commit's and this tree's)."""

    def judge() -> int:
        options = _options(sys.argv[1:] if argv is None else argv)
        if options.base is not None:
            return ab_verdict.main(options, runner_for)
        return _judge(options, runner, baselines_dir, machine)

    return tool_main("perf.tools.gate", judge)


if __name__ == "__main__":
    sys.exit(main())
