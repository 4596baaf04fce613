"""How often the gate's rules fail unchanged code, and how often they catch a planted slowdown: each rule
replayed on a same-code corpus (runs of one commit on one GPU model, baselines/<gpu>/same-code/).

    python -m perf.tools.calibrate                          # every GPU's corpus, every rule
    python -m perf.tools.calibrate baselines/nvidia-h200/same-code --rules ab --deals 200
    python -m perf.tools.calibrate store --name 2026-11-28-a runs/*.json   # a new set of the corpus
    python -m perf.tools.calibrate live --plant plant.diff --clean 3 --planted 3 --save live/ -- --tier pr

Rules (perf/tools/judging/replay.py): `ab` the A/B over ABBA deals of a sitting's runs, `stored` a stored
baseline with its noise file and re-measured suspects, in the same sitting and in another, `files` the same
without re-measurement (two stored files), `history` each 12 runs against the next. Each prints the share of
gate runs with any false slower over every benchmark and kernel, per benchmark verdict, and the share of
planted slowdowns caught. `live` runs the A/B itself on this machine, clean and with a patch planted
(perf/tools/running/live_ab.py), and prints the same two figures. Exit codes: 0 replayed (or stored, or run
live), 2 refused: no corpus, one that mixes commits, GPUs or methods, or too few runs for a rule asked for (it
says what is missing and replays nothing), or a plant that does not apply (nothing run).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from perf import storage
from perf.storage import BASELINES, compact_json, machine_folder, write_new, write_whole
from perf.tools.judging import paired_rule, replay
from perf.tools.judging.noise_spread import SD_RUNS, noise_document
from perf.tools.judging.noise_thresholds import Noise, noise_of
from perf.tools.judging.plants import LARGEST_KERNEL, SMALLEST_KERNEL, Plant
from perf.tools.judging.window_rule import WINDOW
from perf.tools.reading.corpus import FOLDER, Corpus, check_alike, corpus_folders, load_corpus, set_folders
from perf.tools.reading.destinations import checked
from perf.tools.reading.errors import GateError, ToolParser, tool_main
from perf.tools.reading.parts import NAME
from perf.tools.reading.results import Results, load_results
from perf.tools.reporting import calibration
from perf.tools.running import live_ab

RULES = ("ab", "stored", "files", "history")
PROFILES = ("cross", "same", "none")
WHOLE_PLANTS = (Plant(1.01), Plant(1.015), Plant(1.02), Plant(1.03))
KERNEL_PLANTS = (Plant(1.02, SMALLEST_KERNEL), Plant(1.02, LARGEST_KERNEL))
REMEASURE = 2  # the gate's default re-measurements of a suspect


def _parser() -> argparse.ArgumentParser:
    parser = ToolParser(
        prog="python -m perf.tools.calibrate",
        description=__doc__.split("\n\n")[0],
        epilog="python -m perf.tools.calibrate store --name SET RUN.json ... stores runs as a new set of the "
        "corpus of their GPU (baselines/<gpu>/same-code/SET/).",
    )
    parser.add_argument(
        "corpora", nargs="*", type=Path, metavar="CORPUS", help="corpus folders (default: all)"
    )
    parser.add_argument("--rules", default=",".join(RULES), help=f"comma-separated, of {', '.join(RULES)}")
    parser.add_argument("--deals", type=int, metavar="N", help="A/B deals per set at most, drawn at random")
    parser.add_argument("--no-plants", action="store_true", help="false alarms only, no planted slowdowns")
    parser.add_argument("--markdown", type=Path, metavar="FILE", help="also write the table in Markdown")
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        help="the A/B's noise profile: from the other sets (cross, the default with two sets or more), from "
        "the set itself (same, the default with one), or none",
    )
    return parser


def _store_parser() -> argparse.ArgumentParser:
    parser = ToolParser(prog="python -m perf.tools.calibrate store", description="store runs as a corpus set")
    parser.add_argument("--name", required=True, help="the set's name: letters, digits, '_', '.', '-'")
    parser.add_argument("runs", nargs="+", type=Path, help="result files of runs made back to back")
    parser.add_argument("--baselines", type=Path, default=BASELINES, help=argparse.SUPPRESS)
    return parser


def store(argv: Sequence[str]) -> int:
    """A new set of the corpus of the runs' GPU: compact files NN.json in time order, never an overwrite."""
    options = _store_parser().parse_args(argv)
    if not NAME.fullmatch(options.name):
        raise GateError(f"--name {options.name!r}: use letters, digits, '_', '.' and '-'")
    runs = sorted(
        (load_results(path, "run") for path in options.runs),
        key=lambda r: str(r.document.get("datetime", "")),
    )
    check_alike(runs, "the runs")
    folder = options.baselines / machine_folder(runs[0].document["machine_info"]["perf"]) / FOLDER
    if folder.is_dir() and set_folders(folder):
        check_alike([*load_corpus(folder).sets[0].runs[:1], *runs], f"the runs with the corpus {folder}")
    target = folder / options.name
    if target.exists():
        raise GateError(f"{target} exists: a corpus set is never overwritten; give another --name")
    try:
        for i, run in enumerate(runs, 1):
            write_new(target / f"{i:02d}.json", compact_json(dict(run.document)))
    except OSError as err:
        raise GateError(f"cannot write {target} ({err.strerror or err})") from None
    print(f"stored {len(runs)} runs in {target}")
    return 0


def _live_parser() -> argparse.ArgumentParser:
    parser = ToolParser(
        prog="python -m perf.tools.calibrate live",
        description="A/Bs of HEAD on this machine, clean and with a slowdown planted, alternating",
        epilog="Arguments after -- go to the gate's pytest (docs/gate.md).",
    )
    parser.add_argument(
        "--plant", type=Path, required=True, metavar="DIFF", help="the slowdown: a unified diff"
    )
    parser.add_argument("--clean", type=int, default=3, metavar="N", help="clean A/Bs, >= 0 (3)")
    parser.add_argument("--planted", type=int, default=3, metavar="N", help="planted A/Bs, >= 0 (3)")
    parser.add_argument("--save", type=Path, required=True, metavar="DIR", help="each gate's log and runs")
    parser.add_argument("--markdown", type=Path, metavar="FILE", help="also write the table in Markdown")
    return parser


def live(argv: Sequence[str]) -> int:
    """The live A/Bs, then their figures."""
    split = argv.index("--") if "--" in argv else len(argv)
    options = _live_parser().parse_args(argv[:split])
    for name in ("clean", "planted"):
        if getattr(options, name) < 0:
            raise GateError(f"--{name} {getattr(options, name)}: accepted is a whole number >= 0")
    if options.clean + options.planted == 0:
        raise GateError("--clean 0 --planted 0: nothing to run; ask for at least one A/B")
    checked(options.save, "--save", storage.FOLDER)
    checked(options.markdown, "--markdown")
    done = live_ab.run_live(
        options.plant, argv[split + 1 :], clean=options.clean, planted=options.planted, save=options.save
    )
    for line in calibration.live_summary(done):
        print(line)
    if options.markdown is not None:
        write_whole(options.markdown, calibration.live_markdown(done, "Live A/Bs").encode())
    return 0


def _rules(value: str) -> list[str]:
    rules = [r.strip() for r in value.split(",") if r.strip()]
    unknown = [r for r in rules if r not in RULES]
    if unknown or not rules:
        raise GateError(f"--rules {value}: accepted is a comma-separated list of {', '.join(RULES)}")
    return rules


def missing(corpus: Corpus, rules: Sequence[str]) -> list[str]:
    """What each rule needs that the corpus lacks, one line each."""
    largest = max(len(s.runs) for s in corpus.sets)
    needs = {
        "ab": (largest >= replay.RUNS_PER_DEAL, f"a set of {replay.RUNS_PER_DEAL} runs (ABBA)"),
        "stored": (
            largest >= replay.NOISE_RUNS + 1 + REMEASURE + 1,
            f"a set of {replay.NOISE_RUNS + REMEASURE + 2} runs (baseline, {replay.NOISE_RUNS} noise runs, "
            f"a run and {REMEASURE} re-measurements)",
        ),
        "files": (largest >= replay.NOISE_RUNS + 2, f"a set of {replay.NOISE_RUNS + 2} runs"),
        "history": (corpus.runs > WINDOW, f"{WINDOW + 1} runs ({WINDOW} of history and one to judge)"),
    }
    return [
        f"{corpus.path}: `{rule}` needs {needs[rule][1]}; its largest set has {largest}, all {corpus.runs}"
        for rule in rules
        if not needs[rule][0]
    ]


def profile_for(sets: Sequence[Sequence[Results]], i: int, how: str) -> Noise | None:
    """The noise profile the A/B on set `i` reads: from the other sets' runs (`cross`: as a runner's noise
    file, measured at another time), from the set itself (`same`: in-sample), or none."""
    if how == "none":
        return None
    others = [r for j, runs in enumerate(sets) if j != i for r in runs] if how == "cross" else list(sets[i])
    if len(others) < SD_RUNS:
        return None
    return noise_of(noise_document(others, "calibration profile"), Path(f"the corpus ({how})"))


def tallies(
    corpus: Corpus, rules: Sequence[str], deals: int | None, plants: bool, profile: str = "cross"
) -> list[replay.Tally]:
    """Every rule asked for on the corpus: clean first, then each plant; sets summed."""
    found: list[replay.Tally] = []
    sets = [s.runs for s in corpus.sets]
    profiles = [profile_for(sets, i, profile) for i in range(len(sets))]
    for rule in rules:
        scenarios = [None, *((*WHOLE_PLANTS, *KERNEL_PLANTS) if rule == "ab" else WHOLE_PLANTS)]
        for plant in scenarios if plants else [None]:
            parts = []
            if rule == "ab":
                parts = [
                    replay.replay_ab(
                        runs,
                        threshold=paired_rule.THRESHOLD,
                        z=paired_rule.Z,
                        max_pairs=paired_rule.MAX_PAIRS,
                        plant=plant,
                        deals=replay.ab_deals(len(runs), deals),
                        noise=profiles[i],
                    )
                    for i, runs in enumerate(sets)
                    if len(runs) >= replay.RUNS_PER_DEAL
                ]
            elif rule in ("stored", "files"):
                remeasure = REMEASURE if rule == "stored" else 0
                parts = [
                    replay.replay_stored(b, c, same_set=b is c, remeasure=remeasure, plant=plant)
                    for b in sets
                    for c in sets
                    if _stored_fits(b, c, remeasure)
                ]
            else:
                ordered = sorted(
                    (r for runs in sets for r in runs), key=lambda r: str(r.document.get("datetime", ""))
                )
                parts = [replay.replay_history(ordered, plant=plant)]
            found.append(replay.Tally.summed(parts))
    return found


def _stored_fits(baseline_set: Sequence, current_set: Sequence, remeasure: int) -> bool:
    """Whether a stored-baseline replay has its runs: a baseline, its noise runs, a run and its
    re-measurements, all distinct."""
    if baseline_set is current_set:
        return len(baseline_set) >= 1 + replay.NOISE_RUNS + 1 + remeasure
    return len(baseline_set) >= 1 + replay.NOISE_RUNS and len(current_set) >= 1 + remeasure


def calibrate(argv: Sequence[str]) -> int:
    options = _parser().parse_args(argv)
    rules = _rules(options.rules)
    if options.deals is not None and options.deals < 1:
        raise GateError(f"--deals {options.deals}: accepted is an integer >= 1")
    checked(options.markdown, "--markdown")
    folders = options.corpora or corpus_folders()
    if not folders:
        raise GateError(
            f"no corpus: store runs with `python -m perf.tools.calibrate store` ({BASELINES}/<gpu>/{FOLDER})"
        )
    corpora = [load_corpus(folder) for folder in folders]
    lacking = [line for corpus in corpora for line in missing(corpus, rules)]
    if lacking:
        able = [r for r in rules if not any(missing(corpus, [r]) for corpus in corpora)]
        hint = f" (--rules {','.join(able)} replays the others)" if able else ""
        raise GateError("nothing replayed: " + "; ".join(lacking) + hint)
    text = []
    for corpus in corpora:
        profile = options.profile or ("cross" if len(corpus.sets) > 1 else "same")
        print(f"corpus {corpus.describe()}; the A/B's noise profile: {profile}", flush=True)
        found = tallies(corpus, rules, options.deals, not options.no_plants, profile)
        for line in calibration.table(found):
            print(line)
        text.append(calibration.markdown(found, f"{corpus.describe()}"))
    if options.markdown is not None:
        try:
            write_whole(options.markdown, "\n".join(text).encode())
        except OSError as err:
            raise GateError(
                f"--markdown {options.markdown}: cannot be written ({err.strerror or err})"
            ) from None
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["store"]:
        return tool_main("perf.tools.calibrate", lambda: store(argv[1:]))
    if argv[:1] == ["live"]:
        return tool_main("perf.tools.calibrate", lambda: live(argv[1:]))
    return tool_main("perf.tools.calibrate", lambda: calibrate(argv))


if __name__ == "__main__":
    sys.exit(main())
