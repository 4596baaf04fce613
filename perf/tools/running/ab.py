"""The gate's A/B mode (`gate --base REF`): the base commit and the working tree measured alternately on
this machine, each benchmark judged by perf/tools/judging/paired_rule.py.

Base is checked out beside this tree (perf/tools/running/worktrees.py) and run by the same Python with the
same pytest arguments: ABBA first, then, for the benchmarks still UNKNOWN only (by node id), further BA / AB
pairs up to --max-pairs. Head is the working tree as it is, uncommitted changes included. Benchmarks of one
side only are new or missing, and a run that fails on base (base cannot run the selection) is said, never
judged; a failed or interrupted run of head, or an interrupt anywhere, gives no verdict. What it measured
and found is an ABRun (perf/tools/reporting/ab_verdict.py shows it).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from perf.storage import BASELINES, ROOT, partial_name
from perf.tools.judging import paired_rule
from perf.tools.judging.kernel_shares import judged, to_measure_again
from perf.tools.judging.noise_thresholds import noise_profile
from perf.tools.judging.paired_rule import BASE, FIRST_PAIRS, HEAD, ABRun, order
from perf.tools.reading.errors import GateError, Interrupted
from perf.tools.reading.results import Results, load_results
from perf.tools.running import scratch, worktrees
from perf.tools.running.runs import (
    PYTEST_INTERRUPTED,
    PYTEST_OK,
    Runner,
    ended_before_interrupt,
    file_stamp,
    is_selection,
    measure,
    with_selection,
)

MAX_PAIRS = paired_rule.MAX_PAIRS


def _passed_only(partial: Path, kept: Path) -> Results | None:
    """The benchmarks whose test passed in a failed run's partial file, or None where it kept none."""
    try:
        document = json.loads(partial.read_text())
        document.get("perf", {}).pop("partial", None)
        if not document.get("benchmarks"):
            return None
        kept.write_text(json.dumps(document))
        return load_results(kept, "base")
    except (OSError, ValueError, AttributeError):
        return None  # a damaged partial file: nothing of that run is used


def measure_base(runner: Runner, args: Sequence[str], save: Path | None) -> tuple[Results | None, str | None]:
    """One run of base: (its results, None), or where pytest failed (a test failing at base, a path or node
    id base lacks, a module it cannot import) (the benchmarks that passed, if any, and what failed). An
    interrupt is `Interrupted`: the runner raises KeyboardInterrupt where one was passed on to pytest, so
    pytest's own exit code 2 means it stopped itself, at a collection error."""
    folder = scratch.made("perf-base-")
    json_path = save or folder / "results.json"
    before = file_stamp(json_path)
    shown = " ".join(["pytest", *args])
    try:
        try:
            code = runner(list(args), json_path)
        except KeyboardInterrupt:
            folder, ended = ended_before_interrupt(json_path, before, f"`{shown}` on base", folder, save)
            raise (ended or Interrupted(f"`{shown}` on base was interrupted")) from None
        if code == PYTEST_INTERRUPTED and not partial_name(json_path).is_file():
            return None, f"`{shown}` on base stopped at collection (exit code {code}): base cannot collect it"
        if code in PYTEST_OK:
            if json_path.is_file():
                return load_results(json_path, "base"), None
            return None, f"`{shown}` on base ran no benchmark (exit code {code})"
        kept = _passed_only(partial_name(json_path), folder / "passed.json")
        return kept, f"`{shown}` on base failed with exit code {code}"
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _save_path(save: Path | None, run: int, side: str) -> Path | None:
    return None if save is None else save / f"{run:02d}_{side}.json"


def run_ab(
    ref: str,
    pytest_args: Sequence[str],
    *,
    threshold: float = paired_rule.THRESHOLD,
    z: float = paired_rule.Z,
    max_pairs: int = paired_rule.MAX_PAIRS,
    save: Path | None = None,
    noise: str | None = None,
    repo: Path = ROOT,
    runner_for: Callable[[Path], Runner] = worktrees.runner_in,
    say: Callable[[str], None] = print,
    baselines_dir: Path = BASELINES,
) -> ABRun:
    """Measure base (`ref`) and head (`repo`'s working tree) in pairs and judge them; see the module. `noise`
    is --noise: the noise profile's file, 'off', or None for the one beside the GPU's baselines."""
    commit = worktrees.resolve_commit(ref, repo)  # a bad ref: one line, nothing run
    ab = ABRun(commit, worktrees.working_tree_state(repo), threshold, z, max_pairs)
    if worktrees.is_dirty(repo):
        say(f"head: the working tree as it is, {ab.head_state}")
    if save is not None:
        try:
            save.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise GateError(f"--save {save}: cannot be made a folder ({err.strerror or err})") from None
    flags = [a for a in pytest_args if not is_selection(a)]
    with worktrees.terminating_as_interrupt(), worktrees.checked_out(commit, repo) as tree:
        runners = {BASE: runner_for(tree), HEAD: runner_for(repo)}

        def one_pair(pair: int, args: Sequence[str]) -> None:
            for side in order(pair):
                path = _save_path(save, ab.started, side)
                ab.started += 1
                if side == HEAD:
                    ab.runs[HEAD].append(measure(runners[HEAD], args, "head", save=path))
                    continue
                results, failure = measure_base(runners[BASE], args, path)
                if failure is not None:
                    ab.base_failures.append(failure)
                if results is not None:
                    ab.runs[BASE].append(results)

        for pair in range(FIRST_PAIRS):
            one_pair(pair, with_selection(pytest_args))
        profile, ab.noise_note = noise_profile(
            noise, ab.runs[HEAD][0], baselines_dir, paired_rule.PROFILE_SPREAD
        )
        looks = max_pairs - FIRST_PAIRS + 1

        def judge() -> paired_rule.Paired:
            return judged(ab.runs[BASE], ab.runs[HEAD], threshold, z, noise=profile, looks=looks)

        ab.paired = judge()
        while ab.pairs < max_pairs and (again := to_measure_again(ab.paired, ab.runs[BASE], ab.runs[HEAD])):
            settled = len(ab.paired.named(paired_rule.UNKNOWN)) - len(again)
            say(
                f"A/B: {len(again)} undecided, measured again (pair {ab.pairs + 1} of at most {max_pairs})"
                + (f"; {settled} more cannot turn slower (head faster in a pair)" if settled else "")
            )
            ab.remeasured.append(len(again))
            one_pair(ab.pairs - 1, [*again, *flags])
            ab.paired = judge()
    return ab
