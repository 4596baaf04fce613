"""Every suite of perf/, listed from the code: its file, the question it answers (the file's docstring)
and, per tier, the values of the axes its benchmarks take (the declarations of perf/cases/).

    python -m perf.listing                 every tier
    python -m perf.listing --tier default  one tier
    python -m perf.listing --options       every suite's options, with their help

docs/suites.md explains the suites; this lists them, so that a new suite is listed once its file exists.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from perf.cases.declare import TIER_NAMES, Axis, Derived
from perf.tiers import PARAMETERS, SUITES, TIERS

PERF = Path(__file__).resolve().parent
MOST_VALUES_SHOWN = 6  # more are counted, not listed


def suite_files() -> list[Path]:
    return sorted(PERF.glob("test_*.py"))


def question(path: Path) -> str:
    """The first paragraph of the file's docstring, on one line."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


def axes_of(path: Path) -> list[Axis | Derived]:
    """The tier's axes that the file's benchmarks (functions test_*) take as arguments, in id order."""
    arguments = {
        arg.arg
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
        for arg in node.args.args
    }
    return [axis for axis in PARAMETERS if axis.param in arguments]


def shown(axis: Axis | Derived, values: tuple | None) -> str:
    if values is None:
        return "chosen by the device (its memory, its GPU count)"
    labels = [axis.label(v) if axis.label is not None else str(v) for v in values]
    if len(labels) > MOST_VALUES_SHOWN:
        return f"{len(labels)} values ({', '.join(labels[:2])}, ...)"
    return ", ".join(labels) or "none"


def lines(tiers: list[str]) -> list[str]:
    out = []
    for path in suite_files():
        out.append(f"perf/{path.name}: {question(path)}")
        for name in tiers:
            tier = TIERS[name]
            axes = "; ".join(
                f"{axis.param} {shown(axis, getattr(tier, axis.name))}" for axis in axes_of(path)
            )
            out.append(f"  {name}: {axes or 'no tier axes'}")
    return out


def options() -> list[str]:
    """Every option the suites declare (an axis's or a flag's), its help and its suite, one a line."""
    out = []
    for suite in SUITES:
        named = [(f"--{a.option}", a.help) for a in suite.axes if isinstance(a, Axis) and a.option]
        named += [(f"--{f.option}", f.help) for f in suite.flags]
        out += [f"{option:<28} {text} (suite {suite.name})" for option, text in named]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.listing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tier", action="append", choices=TIER_NAMES, help="a tier to show (repeatable)")
    parser.add_argument("--options", action="store_true", help="the suites' options instead, with their help")
    args = parser.parse_args(argv)
    print("\n".join(options() if args.options else lines(args.tier or list(TIER_NAMES))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
