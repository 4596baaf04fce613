"""The regression gate: compare a benchmark run with a stored baseline, failing only on slowdowns that
are larger than a threshold, larger than the runs' own noise, and still there when measured again.

    python -m perf.tools.gate                            # run perf/; this machine's newest baseline
    python -m perf.tools.gate -- -k forward --tier full  # pytest arguments after --
    python -m perf.tools.gate --baseline OLD.json --current NEW.json
    python -m perf.tools.gate --base main -- --tier pr  # A/B: main and this tree in turn (running/ab.py)

Exit codes: 0 no regression, 1 at least one regression, 2 no verdict (bad input, failed pytest run).

The command parses its options and calls down the tools' floors, each module once, in order: the two runs,
read or measured (perf/tools/running/sides.py); each benchmark's thresholds and the rule judging it
(perf/tools/judging/); the suspects measured again (perf/tools/running/remeasure.py); one category per
benchmark; the verdict (perf/tools/reporting/gate_output.py). With --against history the baseline comes from
perf/history, asked before the run (is there a history of this GPU?) and after it (the baseline of the run's
benchmarks).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from perf.storage import BASELINES, FILE, FOLDER
from perf.tools.judging.changes import Rule, compare, with_noise
from perf.tools.judging.noise_thresholds import NoiseThresholds, noise_thresholds
from perf.tools.judging.outcome import classify
from perf.tools.judging.paired_rule import FIRST_PAIRS, MAX_PAIRS
from perf.tools.judging.paired_rule import THRESHOLD as AB_THRESHOLD
from perf.tools.judging.regression_rule import HOST_BOUND_THRESHOLD, THRESHOLD, Z
from perf.tools.reading.destinations import checked
from perf.tools.reading.errors import GateError, ToolParser, settle, tool_main
from perf.tools.reading.results import Results, this_machine
from perf.tools.reading.timings import HOST_BOUND_SHARE
from perf.tools.reporting import ab_verdict, gate_output
from perf.tools.reporting.verdict import LISTS
from perf.tools.running.ab import run_ab
from perf.tools.running.remeasure import confirm
from perf.tools.running.runs import Runner, is_selection, run_pytest
from perf.tools.running.sides import current_results, stored_sides
from perf.tools.running.worktrees import runner_in

# Gate options of the stored-baseline comparison that the A/B does not use: given with --base, refused.
UNUSED = ("--baseline", "--current", "--remeasure", "--list", "--host-bound-threshold")


# --------------------------------------------------------------------------- command line
def _parser() -> argparse.ArgumentParser:
    parser = ToolParser(
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
        "baselines/<gpu>/noise.json where it exists; off: --threshold for every GPU time); with --base, "
        "the run-to-run spreads that bound the A/B's standard errors",
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
        default=MAX_PAIRS,
        help=f"with --base: pairs of runs at most, the first two (ABBA) for all, the rest for the undecided "
        f"({MAX_PAIRS})",
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


def _given(option: str, argv: Sequence[str]) -> bool:
    """Whether the gate's own arguments (before --) name `option`."""
    return any(a == option or a.startswith(f"{option}=") for a in argv)


def _ab_options(options: argparse.Namespace, argv: Sequence[str]) -> None:
    """Refuse what --base cannot take, in one line; the threshold defaults to the A/B's own."""
    unused = [option for option in UNUSED if _given(option, argv)]
    if unused:
        raise GateError(
            f"--base measures base and head here and judges them by their pairs; {unused[0]} is not used "
            "with it (docs/gate.md: A/B mode)"
        )
    if options.max_pairs < FIRST_PAIRS:
        raise GateError(f"--max-pairs {options.max_pairs}: accepted is an integer >= {FIRST_PAIRS} (ABBA)")
    if not _given("--threshold", argv):
        options.threshold = AB_THRESHOLD


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
        _ab_options(options, argv[:split])
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
    checked(options.markdown, "--markdown")
    checked(options.save, "--save", FOLDER if options.base is not None else FILE)
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


# --------------------------------------------------------------------------- the verdict
def _against_history(
    options: argparse.Namespace, runner: Runner, machine: Callable[[str], str]
) -> tuple[Results, Results, NoiseThresholds]:
    """--against history: the history is opened and asked for runs of this GPU model before the suite runs
    (the check handed to current_results), so that a run is never made for nothing; then the baseline of the
    run's benchmarks and their thresholds come from it."""
    from perf.history.baseline import against_history, opened, require_runs  # imports the database library

    with opened(options.history) as history:
        accept = functools.partial(require_runs, history, branch=options.history_branch)
        current = current_results(options.current, options.pytest_args, options.save, runner, machine, accept)
        baseline, thresholds = against_history(history, current, options.history_branch, options.threshold)
    return baseline, current, thresholds


def _judge(
    options: argparse.Namespace, runner: Runner, baselines_dir: Path, machine: Callable[[str], str]
) -> int:
    """Read or run both sides, judge each benchmark, measure suspects again, print the verdict."""
    if options.against == "history":
        # The history's baseline is of the current run's GPU (history_baseline): one processor.
        baseline, current, thresholds = _against_history(options, runner, machine)
    else:
        baseline, current = stored_sides(
            options.baseline,
            options.current,
            options.pytest_args,
            options.save,
            runner,
            baselines_dir,
            machine,
        )
        thresholds = noise_thresholds(options.noise, baseline, options.threshold, baselines_dir)
    rule = with_noise(Rule(options.threshold, options.z, options.host_bound_threshold), thresholds)
    own_run = options.current is None
    comparison = compare(baseline, current, rule, remeasurable=own_run)
    if own_run:
        regressions, not_persisted = confirm(
            comparison.suspects, runner, options.pytest_args, baseline.gpu_methods, options.remeasure, rule
        )
    else:
        regressions, not_persisted = comparison.suspects, []
    remeasured = options.remeasure if own_run and comparison.suspects else 0
    outcome = classify(comparison, regressions, not_persisted, baseline, current, own_run, remeasured)
    here = "this run" + (f" (kept in {options.save})" if options.save else "")
    sources = (str(baseline.path), str(options.current or here))
    settle()  # a verdict printed is the verdict returned, whatever signal arrives now
    gate_output.show(
        outcome, rule, baseline, current, sources, thresholds, options.listing, options.markdown, options.link
    )
    if outcome.too_few_compared() is not None:
        return 2  # its decision line says why: a pass of what was not compared means nothing
    return 1 if regressions else 0


def _ab(options: argparse.Namespace, runner_for: Callable[[Path], Runner]) -> int:
    """`gate --base REF`: base and this tree measured in turn and judged by their pairs, then the verdict."""
    ab = run_ab(
        options.base,
        options.pytest_args,
        threshold=options.threshold,
        z=options.z,
        max_pairs=options.max_pairs,
        save=options.save,
        noise=options.noise,
        runner_for=runner_for,
    )
    settle()
    return ab_verdict.show(ab, options.markdown, options.link)


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
            return _ab(options, runner_for)
        return _judge(options, runner, baselines_dir, machine)

    return tool_main("perf.tools.gate", judge)


if __name__ == "__main__":
    sys.exit(main())
