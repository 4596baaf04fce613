"""The two runs the gate compares, before anything is judged: the baseline, a stored result file (given, or
this machine's newest), and the current results, a file (--current) or a run of the selection here. Every
input that can be checked is checked before the suite runs; the two are returned with their GPU figures
taken by one method (perf/tools/reading/results.py) and of one processor, or a GateError says why not."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from perf.tools.reading.errors import GateError
from perf.tools.reading.results import (
    Results,
    aligned,
    check_same_machine,
    load_results,
    newest_baseline,
    this_machine_slug,
)
from perf.tools.running.runs import Runner, measure, pytest_device, with_selection


def current_results(
    current: Path | None,
    pytest_args: Sequence[str],
    save: Path | None,
    runner: Runner,
    machine: Callable[[str], str],
    accept: Callable[[str], None],
) -> Results:
    """The results to judge: the file `current`, or a run here of the selection in `pytest_args` (its result
    file kept at `save`), once `accept` has taken the processor the run would be on (`machine` of its
    --device): it raises where that processor has nothing to be compared with, so nothing runs for
    nothing."""
    if current is not None:
        return load_results(current, "--current")
    accept(machine(pytest_device(pytest_args)))
    return measure(runner, with_selection(pytest_args), "--current", save=save)


def stored_sides(
    baseline: Path | None,
    current: Path | None,
    pytest_args: Sequence[str],
    save: Path | None,
    runner: Runner,
    baselines_dir: Path,
    machine: Callable[[str], str],
) -> tuple[Results, Results]:
    """(baseline, current): the result file `baseline` (None: this machine's newest in `baselines_dir`)
    and `current_results`, aligned on their GPU-time methods; refused where they are of two processors."""
    base = load_results(baseline or newest_baseline(baselines_dir, this_machine_slug()), "--baseline")

    def same_processor(here: str) -> None:
        if here != base.machine:
            raise GateError(
                f"--baseline {base.path} was recorded on {base.machine}, "
                f"this run would be on {here}; "
                "results of different processors are not comparable (nothing was run)"
            )

    found = current_results(current, pytest_args, save, runner, machine, same_processor)
    base, found = aligned([base, found])  # GPU figures of one method (perf/tools/reading/results.py)
    check_same_machine(base, found, f"--current {current}" if current else "this run")
    return base, found
