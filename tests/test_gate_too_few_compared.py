"""The gate gives no verdict on runs with too little in common (perf/tools/judging/outcome.py LEAST_COMPARED):
nothing compared, or fewer than half of what the current run selected, is exit 2 with the likely cause,
never a pass."""

from __future__ import annotations

from tests.gate_files import NAMES, compare_files, suite


def test_runs_with_no_benchmark_in_common_give_no_verdict(tmp_path, capsys):
    # Every benchmark renamed since the baseline: nothing compared is never a pass.
    current = {name.replace("perf/", "perf/renamed_"): s for name, s in suite().items()}
    code, out, _ = compare_files(tmp_path, capsys, suite(), current)
    n = len(NAMES)
    said = (
        f"NO VERDICT: only 0 of {2 * n} benchmarks compared ({n} not in the baseline, {n} of the baseline's "
        "without a result): renamed benchmarks, or another selection's baseline? "
        "--list new,missing names both sides"
    )
    assert code == 2 and out.splitlines()[0] == said and out.splitlines()[-1] == said, out
    assert "PASS" not in out


def test_a_run_that_lacks_most_of_the_baseline_gives_no_verdict(tmp_path, capsys):
    # The current file records no selection, so the baseline's benchmarks it lacks are missing: skipped or
    # failed. More missing than compared is no verdict; fewer is judged.
    base = suite()
    kept = dict(list(base.items())[: len(NAMES) // 2 - 1])
    code, out, _ = compare_files(tmp_path, capsys, base, kept)
    assert code == 2 and "skipped or failed" in out.splitlines()[-1], out
    code, out, _ = compare_files(tmp_path, capsys, base, dict(list(base.items())[: (len(NAMES) + 1) // 2]))
    assert code == 0 and out.splitlines()[-1].startswith("PASS: no regression"), out
