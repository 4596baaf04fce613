"""python -m perf.history: record result files into the results database, and list its runs.

`import FILE...` records each file in a transaction of its own (a run recorded before is stored once;
a refused file is one line and the others still import), `runs` lists the recorded runs, newest first.
The database is --db, else $PERF_HISTORY, else .benchmarks/history.sqlite (perf/history/store.py).
Other subcommands live in modules of their own (COMMANDS), imported only when named.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

from perf.history.store import DEFAULT_URL, URL_VARIABLE, History, HistoryError, RunInfo, connect
from perf.storage import folder_name
from perf.tools.reading.errors import GateError, Interrupted, tool_main

PROG = "python -m perf.history"
# Subcommands in modules of their own. Each has HELP (one line), add_arguments(parser) and
# run(args) -> exit code; args.db is the --db given, or None (store.connect resolves it).
COMMANDS = {"trends": "perf.history.trends", "steps": "perf.history.steps"}


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of at least 1")
    return value


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The command line; of the modules in COMMANDS, only the one `argv` names is imported."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        metavar="URL",
        help=f"the results database: a file path, sqlite:///PATH or postgresql://USER:PASSWORD@HOST/DB "
        f"(default: ${URL_VARIABLE}, else {DEFAULT_URL})",
    )
    parser = argparse.ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    recording = commands.add_parser("import", parents=[common], help="record result files (JSON)")
    recording.add_argument("files", nargs="+", type=Path, metavar="FILE")
    recording.set_defaults(run=import_files)

    listing = commands.add_parser("runs", parents=[common], help="list the recorded runs, newest first")
    listing.add_argument(
        "--gpu", metavar="NAME", help="only runs on this GPU model (or its baselines/ folder)"
    )
    listing.add_argument("--limit", type=positive, metavar="N", help="only the newest N runs")
    listing.set_defaults(run=list_runs)

    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    for name, module_name in COMMANDS.items():
        if importlib.util.find_spec(module_name) is None:
            continue  # not written yet
        if name != chosen:
            commands.add_parser(name, help=f"(see {PROG} {name} --help)")
            continue
        module = importlib.import_module(module_name)
        if not hasattr(module, "add_arguments"):
            continue  # not a subcommand yet: argparse names the choices
        extension = commands.add_parser(name, parents=[common], help=getattr(module, "HELP", None))
        module.add_arguments(extension)
        extension.set_defaults(run=module.run)
    return parser


def import_files(args: argparse.Namespace) -> int:
    """Record each file; exit 2 where any was refused."""
    counts = {"recorded": 0, "already recorded": 0, "refused": 0}
    with connect(args.db) as history:
        for done, path in enumerate(args.files):
            try:
                outcome = history.import_file(path)
            except HistoryError as err:
                print(f"{PROG}: error: {err}", file=sys.stderr)
                counts["refused"] += 1
                continue
            except KeyboardInterrupt:
                raise Interrupted(
                    f"{done} of {len(args.files)} files handled; {path} was not recorded"
                ) from None
            if outcome.new:
                print(f"{path}: recorded {outcome.benchmarks} benchmarks as run #{outcome.run_id}")
                counts["recorded"] += 1
            else:
                print(f"{path}: already recorded as run #{outcome.run_id}")
                counts["already recorded"] += 1
        if len(args.files) > 1:
            summary = ", ".join(f"{count} {what}" for what, count in counts.items())
            print(f"{len(args.files)} files: {summary} ({history.url})")
    return 2 if counts["refused"] else 0


def list_runs(args: argparse.Namespace) -> int:
    """One line per recorded run (dirty ones included, marked), newest first."""
    with connect(args.db, create=False) as history:
        gpu = None if args.gpu is None else gpu_named(history, args.gpu)
        found = history.runs(gpu=gpu, include_dirty=True, limit=args.limit)
        if not found:
            print(f"no runs recorded{f' on {gpu}' if gpu else ''} in {history.url}")
        for run in found:
            print(run_line(run))
    return 0


def gpu_named(history: History, name: str) -> str:
    """The GPU model `name` names: itself, or the model whose baselines/ folder it is."""
    known = history.gpus()
    if name in known:
        return name
    matching = [gpu for gpu in known if folder_name(gpu) == folder_name(name)]
    if len(matching) == 1:
        return matching[0]
    raise HistoryError(
        f"--gpu {name}: no runs of it in {history.url}; recorded: {', '.join(known) or 'none'}"
    )


def run_line(run: RunInfo) -> str:
    """Two lines of a run, each within about 120 columns: what and where, then the file it came from."""
    commit = f"{run.branch or '?'} {(run.commit or '?')[:10]}{' (dirty)' if run.dirty else ''}"
    return (
        f"#{run.run_id:<5} {run.started_at:%Y-%m-%d %H:%M} UTC  {run.gpu} on {run.runner or '?'}  {commit}  "
        f"tier {run.tier or '?'}  {run.benchmarks} benchmarks  gpu time {run.gpu_method or 'none'}\n"
        f"       from {run.source}"
    )


def db_after_command(argv: Sequence[str]) -> list[str]:
    """`--db URL` (or `--db=URL`) given before the command moved after it, where the command takes it."""
    argv = list(argv)
    moved: list[str] = []
    while argv and argv[0].startswith("--db"):
        take = 1 if "=" in argv[0] else 2
        moved, argv = moved + argv[:take], argv[take:]
    return argv[:1] + moved + argv[1:] if argv else moved


def main(argv: Sequence[str] | None = None) -> int:
    argv = db_after_command(sys.argv[1:] if argv is None else argv)

    def body() -> int:
        args = build_parser(argv).parse_args(argv)
        try:
            return args.run(args)
        except HistoryError as err:
            raise GateError(str(err)) from None  # tool_main's one line and exit 2

    return tool_main(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
