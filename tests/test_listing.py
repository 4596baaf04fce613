"""python -m perf.listing: every suite file of perf/ listed with its question and its tiers' values, and
docs/suites.md naming only suite files that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perf import listing
from perf.tiers import AXES, FLAGS

ROOT = Path(__file__).resolve().parents[1]


def test_every_suite_file_is_listed_with_the_question_its_docstring_asks():
    files = sorted(p.name for p in (ROOT / "perf").glob("test_*.py"))
    assert [p.name for p in listing.suite_files()] == files and "test_norm.py" in files
    for path in listing.suite_files():
        assert len(listing.question(path)) > 20, f"perf/{path.name} has no docstring saying what it measures"


def test_a_suite_shows_the_values_each_tier_gives_its_axes(capsys):
    assert listing.main(["--tier", "cpu", "--tier", "default"]) == 0
    out = capsys.readouterr().out
    block = out.split("perf/test_norm.py: ")[1].split("\nperf/")[0]
    assert "  cpu: precision fp32; norm_width 256; norm_provider model_rms, torch_rms, layer_norm" in block
    assert "  default: precision fp32, bf16; norm_width 1024, 2560, 8192;" in block
    # Many values are counted; values the device decides are said to be.
    assert "attention_shape 19 values (" in out
    assert "memory_preset chosen by the device" in out


def test_a_new_suite_file_is_listed_without_any_other_edit(tmp_path, monkeypatch):
    source = '"""How fast the new thing is, per width."""\n\n\ndef test_new(bench, norm_width, precision):\n'
    (tmp_path / "test_new.py").write_text(source + "    pass\n")
    monkeypatch.setattr(listing, "PERF", tmp_path)
    assert listing.lines(["cpu"]) == [
        "perf/test_new.py: How fast the new thing is, per width.",
        "  cpu: precision fp32; norm_width 256",
    ]


def test_an_unknown_tier_is_refused_naming_the_accepted_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        listing.main(["--tier", "nightly"])
    assert exit_.value.code == 2
    assert "invalid choice: 'nightly'" in capsys.readouterr().err


def test_docs_name_only_suite_files_that_exist():
    named = set(re.findall(r"\b(test_[a-z0-9_]+\.py)\b", (ROOT / "docs" / "suites.md").read_text()))
    existing = {p.name for p in (ROOT / "perf").glob("test_*.py")} | {
        p.name for p in (ROOT / "tests").glob("*.py")
    }
    assert named and not named - existing, (
        f"docs/suites.md names {sorted(named - existing)}, which do not exist"
    )


def test_the_options_listing_names_every_declared_option_with_its_help_and_suite(capsys):
    assert listing.main(["--options"]) == 0
    out = capsys.readouterr().out.splitlines()
    norm = next(line for line in out if line.startswith("--norm-widths "))
    assert "hidden widths of the norm suite" in norm and norm.endswith("(suite norm)")
    declared = {a.option for a in AXES if a.option} | {f.option for f in FLAGS}
    assert {line.split()[0].removeprefix("--") for line in out} == declared
