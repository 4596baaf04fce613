"""docs/suites.md's table of options against the options the run has: the plugin's own are listed, every
option listed exists, and every option a suite declares (perf/cases/) has the help that `python -m
perf.listing --options` and `pytest --help` show: a new suite's options need no row in the table."""

from __future__ import annotations

import re
from pathlib import Path

from perf.tiers import AXES, FLAGS

ROOT = Path(__file__).resolve().parents[1]
# Options the plugin adds itself (perf/plugin/options.py, history.py), beside the declared ones.
PLUGIN_OPTIONS = {
    "device", "tier", "benchmark-tables", "allocators", "memory-snapshot", "gpu-time", "history",
}  # fmt: skip


def listed() -> set[str]:
    """The options of the table's first column: `--name` or `--name VALUE`."""
    return set(re.findall(r"^\| `--([a-z0-9-]+)[^`]*` \|", (ROOT / "docs" / "suites.md").read_text(), re.M))


def test_the_options_table_lists_the_runs_own_options_and_no_option_that_does_not_exist():
    declared = {axis.option for axis in AXES if axis.option} | {flag.option for flag in FLAGS}
    missing = sorted(PLUGIN_OPTIONS - listed())
    assert not missing, f"docs/suites.md lists no row for --{', --'.join(missing)}"
    unknown = sorted(listed() - declared - PLUGIN_OPTIONS)
    assert not unknown, f"docs/suites.md lists --{', --'.join(unknown)}, which no suite declares"


def test_every_declared_option_says_what_it_takes():
    helps = {axis.option: axis.help for axis in AXES if axis.option} | {f.option: f.help for f in FLAGS}
    bare = sorted(option for option, text in helps.items() if len(text.strip()) < 10)
    assert not bare, f"--{', --'.join(bare)}: no help saying what the option takes (perf/cases/)"
