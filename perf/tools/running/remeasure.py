"""The gate's suspects measured again, alone: each round runs the benchmarks still suspect (by node id, with
the run's own pytest options) and judges them by the gate's rule (perf/tools/judging/changes.py); a suspect
is a regression only if it is slower in every round, on the same figure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perf.tools.judging.changes import Change, Rule, judged_again, with_ratios
from perf.tools.reading.results import align_to
from perf.tools.running.runs import Runner, is_selection, measure


def confirm(
    suspects: Sequence[Change],
    runner: Runner,
    pytest_args: Sequence[str],
    methods: Mapping[str, str],
    times: int,
    rule: Rule,
) -> tuple[list[Change], list[Change]]:
    """(regressions, did not persist): a suspect is a regression only if every one of `times`
    re-measurements shows it a suspect too, on the same figure. Each round re-runs only the benchmarks still
    suspect, with the options among `pytest_args` (not their selection), and reads their GPU figures by the
    baseline's `methods`."""
    flags = [a for a in pytest_args if not is_selection(a)]
    remaining = list(suspects)
    ratios: dict[tuple[str, str], list[float]] = {(c.name, c.figure): [] for c in suspects}
    not_persisted: list[Change] = []
    for _ in range(times):
        if not remaining:
            break
        names = list(dict.fromkeys(c.name for c in remaining))
        again = align_to(measure(runner, [*names, *flags], "re-measurement"), methods)
        remaining, gone = judged_again(remaining, again, rule, ratios)
        not_persisted += gone
    return with_ratios(remaining, ratios), with_ratios(not_persisted, ratios)
