"""docs/suites.md's table of options against the options the run has: every declared option (the suites'
axes and flags, perf/cases/) and the plugin's own are listed, and every option listed exists."""

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


def test_the_options_table_lists_every_option_the_run_has_and_no_other():
    declared = {axis.option for axis in AXES if axis.option} | {flag.option for flag in FLAGS}
    missing = sorted((declared | PLUGIN_OPTIONS) - listed())
    assert not missing, f"docs/suites.md lists no row for --{', --'.join(missing)}"
    unknown = sorted(listed() - declared - PLUGIN_OPTIONS)
    assert not unknown, f"docs/suites.md lists --{', --'.join(unknown)}, which no suite declares"
