"""perf/tools/calibrate.py and the replays behind it (perf/tools/judging/replay.py) on made-up corpora: a
corpus is stored compact and refused where it mixes commits, GPUs or methods; a rule is replayed on every
deal and counts its false alarms per gate; a planted slowdown is caught; a looser rule fails more."""

from __future__ import annotations

import pytest

from perf.tools import calibrate
from perf.tools.judging import replay
from perf.tools.judging.plants import LARGEST_KERNEL, SMALLEST_KERNEL, Plant, planted, target_kernel
from perf.tools.reading.corpus import load_corpus
from perf.tools.reading.results import load_results
from tests.corpus_samples import BENCHMARKS, write_set

CELL = "perf/test_attention.py::test_attention[cell0]"


@pytest.fixture
def corpus(tmp_path):
    """Two sets of one commit: 8 runs back to back, 6 at another time; steady clocks."""
    root = tmp_path / "nvidia-h200" / "same-code"
    write_set(root / "a", 8, seed=1, clock_sd=0.001)
    write_set(root / "b", 6, seed=2, first=9, clock_sd=0.001)
    return root


def runs_of(folder):
    return [load_results(p, "run") for p in sorted(folder.glob("*.json"))]


def test_store_writes_a_set_compact_in_time_order_and_never_overwrites(tmp_path, capsys):
    made = write_set(tmp_path / "made", 4, compact=False)
    baselines = tmp_path / "baselines"
    argv = ["store", "--name", "s1", *map(str, reversed(made)), "--baselines", str(baselines)]
    assert calibrate.main(argv) == 0
    stored = sorted((baselines / "nvidia-h200" / "same-code" / "s1").glob("*.json"))
    assert [p.name for p in stored] == ["01.json", "02.json", "03.json", "04.json"]
    assert b'"perf_compact"' in stored[0].read_bytes()
    assert load_results(stored[0], "x").timings == load_results(made[0], "x").timings
    assert calibrate.main(argv) == 2
    assert "exists: a corpus set is never overwritten" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"commit": "b" * 40}, "differs in its commit (bbbbbbbbbbbb, the others aaaaaaaaaaaa)"),
        ({"gpu": "NVIDIA H100"}, "differs in its GPU (NVIDIA H100, the others NVIDIA H200)"),
        ({"tier": "default"}, "differs in its method (tier default"),
        ({"dirty": True}, "with uncommitted changes; a corpus holds runs of one clean commit"),
    ],
)
def test_a_corpus_mixing_commits_gpus_or_methods_is_refused_in_one_line(tmp_path, capsys, change, said):
    root = tmp_path / "same-code"
    write_set(root / "a", 5)
    write_set(root / "b", 1, first=6, **change)
    assert calibrate.main([str(root)]) == 2
    err = capsys.readouterr().err
    assert said in err and "06.json" in err and err.count("\n") == 1


def test_too_few_runs_says_what_is_missing_and_replays_nothing(tmp_path, capsys):
    write_set(tmp_path / "same-code" / "a", 3)
    assert calibrate.main([str(tmp_path / "same-code"), "--rules", "ab,history"]) == 2
    err = capsys.readouterr().err
    assert (
        "nothing replayed" in err and "`ab` needs a set of 4 runs" in err and "`history` needs 13 runs" in err
    )
    assert calibrate.main([str(tmp_path / "nowhere")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_ab_deals_are_every_abba_of_four_runs_in_time_order():
    deals = replay.ab_deals(6)
    assert len(deals) == 15 and deals[0] == (0, 1, 2, 3) and all(list(d) == sorted(d) for d in deals)
    assert len(replay.ab_deals(12, limit=40)) == 40
    assert replay._following((1, 2, 4, 5), 8) == [6, 7, 0, 3]


def test_a_kernel_plant_slows_that_kernel_and_adds_its_time(tmp_path):
    run = load_results(write_set(tmp_path, 1)[0], "run")
    table = run.kernel_tables[CELL]
    assert target_kernel(table, LARGEST_KERNEL) == "backward_kernel"
    assert target_kernel(table, SMALLEST_KERNEL) == "forward_kernel"  # row_dot is under 10%
    slowed = planted(run, Plant(1.02, SMALLEST_KERNEL), {CELL: "forward_kernel"})
    assert slowed.kernel_tables[CELL]["forward_kernel"] == pytest.approx(table["forward_kernel"] * 1.02)
    assert slowed.kernel_tables[CELL]["backward_kernel"] == table["backward_kernel"]
    added = table["forward_kernel"] * 0.02e-6
    assert slowed.gpu_timings[CELL].median_s == pytest.approx(run.gpu_timings[CELL].median_s + added)
    whole = planted(run, Plant(1.03), {})
    assert whole.timings[CELL].median_s == pytest.approx(run.timings[CELL].median_s * 1.03)
    assert whole.kernel_tables[CELL]["row_dot"] == pytest.approx(table["row_dot"] * 1.03)


def test_ab_replay_counts_false_alarms_per_gate_and_catches_plants(corpus):
    runs = load_corpus(corpus).sets[0].runs
    options = {"threshold": 0.01, "z": 3.0, "max_pairs": 4}
    clean = replay.replay_ab(runs, **options)
    assert clean.gates == 70 and clean.verdicts == 70 * len(BENCHMARKS)
    assert clean.failed == 0  # 0.2% own noise: nothing slower
    kernel = replay.replay_ab(runs, plant=Plant(1.05, SMALLEST_KERNEL), **options)
    assert kernel.verdicts == 70 * len(BENCHMARKS)  # each has a kernel of at least 10% share
    assert kernel.slower / kernel.verdicts > 0.9 and kernel.why["kernel"] > 0
    whole = replay.replay_ab(runs, plant=Plant(1.05), **options)
    assert whole.slower / whole.verdicts > 0.9
    # Further pairs measure only the undecided that may still turn slower, both sides of each pair.
    assert clean.again % 2 == 0 and clean.again <= 70 * 2 * 2 * len(BENCHMARKS)
    assert replay.replay_ab(runs, **(options | {"max_pairs": 2})).again == 0
    loose = replay.replay_ab(runs, **(options | {"threshold": 0.001, "z": 0.5}))
    assert loose.failed > 0  # a looser rule is seen to fail clean gates


def test_stored_and_history_replays_judge_every_pair_of_sittings(corpus):
    sets = [s.runs for s in load_corpus(corpus).sets]
    same = replay.replay_stored(sets[0], sets[0], same_set=True, remeasure=2)
    assert same.gates == 8 * 7  # each baseline against the 7 other runs, the rest its noise file
    assert replay.replay_stored(sets[0], sets[0], same_set=True, remeasure=2, noise_runs=3).gates == 8 * 4
    other = replay.replay_stored(sets[0], sets[1], same_set=False, remeasure=0)
    assert other.gates == 8 * 6 and other.rule == replay.FILES
    history = replay.replay_history([*sets[0], *sets[1]], window=12)
    assert history.gates == 2
    caught = replay.replay_history([*sets[0], *sets[1]], window=12, plant=Plant(1.2))
    assert caught.slower == caught.verdicts


def test_the_command_prints_a_row_per_rule_and_scenario(corpus, capsys, tmp_path):
    out = tmp_path / "table.md"
    argv = [str(corpus), "--rules", "ab,files", "--deals", "5", "--markdown", str(out)]
    assert calibrate.main(argv) == 0
    printed = capsys.readouterr().out
    assert "14 runs of aaaaaaaaaaaa" in printed
    assert printed.count("A/B ") == 1 + len(calibrate.WHOLE_PLANTS) + len(calibrate.KERNEL_PLANTS)
    assert "| stored files | clean |" in out.read_text()
    assert "again a gate" in printed


def test_the_history_rule_holds_clean_runs_of_one_percent_noise_and_catches_a_large_step(tmp_path):
    """Twelve runs estimate a spread loosely: the window's threshold is Student's, not 4 x the spread."""
    runs = [load_results(p, "run") for p in write_set(tmp_path, 112, clock_sd=0.01, own_sd=0.01, seed=3)]
    clean = replay.replay_history(runs)
    assert clean.gates == 100 and clean.failed <= 4  # a 1% chance a gate: 1 expected, 5 or more 0.4%
    assert replay.replay_history(runs, plant=Plant(1.15)).verdict_rate == 1.0
