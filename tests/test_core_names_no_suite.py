"""The generic core of perf/ (the plugin, the harness, the tiers, storage, the generic tables) names no
suite: suites contribute their axes, checks, header lines, notes and tables through their declarations
(perf/cases/), so that adding one edits nothing here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from perf.tiers import SUITES

ROOT = Path(__file__).resolve().parents[1]
CORE = [
    *sorted((ROOT / "perf" / "plugin").glob("*.py")),
    *sorted((ROOT / "perf" / "harness").glob("*.py")),
    *(ROOT / "perf" / name for name in ("tiers.py", "storage.py")),
    *(ROOT / "perf" / "tables" / name for name in ("format.py", "summary.py", "declared.py", "derived.py")),
]


def suite_names() -> set[str]:
    """Every suite's name and the names of its own axes (argument, option), the shared suites' axes aside."""
    names = {suite.name for suite in SUITES}
    for suite in SUITES:
        if not suite.shared:
            for axis in suite.axes:
                names |= {
                    axis.name,
                    axis.param,
                    getattr(axis, "option", None),
                    getattr(axis, "filters", None),
                }
    return names - {None}


def named_suites(path: Path, names: set[str]) -> list[str]:
    """What `path` names of the suites: imports of a suite's cases module, and strings that are a name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("perf.cases."):
            if node.module != "perf.cases.declare":
                found.append(f"imports {node.module}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            found.append(f"names {node.value!r} (line {node.lineno})")
    return found


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_core_names_no_suite(path):
    found = named_suites(path, suite_names())
    assert not found, f"{path.relative_to(ROOT)}: " + "; ".join(found)


def test_the_check_finds_a_suite_named_in_the_core(tmp_path):
    module = tmp_path / "core.py"
    module.write_text('from perf.cases.memory import ALLOCATORS\nFIELD = "attention_provider"\n')
    assert named_suites(module, suite_names()) == [
        "imports perf.cases.memory",
        "names 'attention_provider' (line 2)",
    ]
