"""Every `tier.<name>` the suite's code reads names a declared axis, a computed argument or a Tier field:
a misspelt or removed axis fails here, before any benchmark runs, naming the file, the line and the names
accepted (the tier's lookup is by name, so nothing else would catch it before that code runs)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from perf.tiers import DERIVED, TIERS, Tier

ROOT = Path(__file__).resolve().parents[1]
KNOWN = (
    set(TIERS["default"].values)
    | set(DERIVED)
    | {f.name for f in dataclasses.fields(Tier)}
    | {name for name in vars(Tier) if not name.startswith("_")}
)


def lookups(source: str) -> list[tuple[int, str]]:
    """(line, name) of every attribute read of a variable or attribute called `tier` or `*_tier`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            owner = node.value
            owner_name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
            if owner_name == "tier" or owner_name.endswith("_tier"):
                found.append((node.lineno, node.attr))
    return found


def test_every_tier_lookup_in_the_code_names_something_a_tier_has():
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: tier.{name}"
        for path in sorted([*(ROOT / "perf").rglob("*.py"), *(ROOT / "tests").glob("*.py")])
        for line, name in lookups(path.read_text())
        if name not in KNOWN
    ]
    assert not wrong, f"{', '.join(wrong)} name no axis; a tier has {', '.join(sorted(KNOWN))}"


def test_the_scan_finds_a_misspelt_axis():
    source = "def test_x(tier, config):\n    tier.presets\n    tier.presetz\n    config.perf_tier.seqz\n"
    assert [name for _, name in lookups(source) if name not in KNOWN] == ["presetz", "seqz"]


def test_an_unknown_axis_read_at_run_time_names_the_tier_and_the_axes_it_has():
    with pytest.raises(AttributeError, match=r"tier 'cpu' has no axis 'presetz'; it has .*presets"):
        _ = TIERS["cpu"].presetz
