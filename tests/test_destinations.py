"""Destinations checked before anything runs (perf/tools/reading/destinations.py): a link loop, a broken link,
a folder where a file goes, a file where a folder goes, or a folder that cannot be made, refused by every
command in one line naming the option, with nothing run or written; a file system's error that no check
foresaw is one line too."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf.history.__main__ import main as history_main
from perf.storage import FILE, FOLDER, cannot_write
from perf.tools import bisect, calibrate, gate, noise, report
from perf.tools.reading.errors import tool_main
from tests.test_not_a_measurement import good, write


@pytest.fixture
def loop(tmp_path) -> Path:
    path = tmp_path / "loop"
    path.symlink_to(path)
    return path


def test_what_cannot_be_written_says_why(tmp_path, loop):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    broken = tmp_path / "broken"
    broken.symlink_to(tmp_path / "nowhere")
    assert cannot_write(loop) == f"{loop} is a link loop or a broken link"
    assert cannot_write(loop / "r.json") == f"{loop} is a link loop or a broken link"
    assert cannot_write(broken / "out", FOLDER) == f"{broken} is a link loop or a broken link"
    assert cannot_write(tmp_path) == f"{tmp_path} is a folder; give a file path"
    assert cannot_write(a_file, FOLDER) == f"{a_file} is a file; give a folder"
    assert cannot_write(a_file / "r.json") == f"cannot write into {a_file} ({a_file} is not a folder)"
    assert cannot_write(a_file / "deeper" / "r.json").endswith(f"({a_file} is not a folder)")
    before = set(tmp_path.iterdir())
    assert cannot_write(tmp_path / "new" / "r.json", FILE) is None
    assert cannot_write(tmp_path / "out", FOLDER) is None
    assert cannot_write(tmp_path / "r.json", FILE) is None
    assert set(tmp_path.iterdir()) == before  # the check leaves nothing behind


def _never_run(args, json_path) -> int:
    raise AssertionError("the suite ran although its destination was refused")


def _commands(tmp_path: Path, loop: Path) -> dict:
    clean = str(write(tmp_path / "clean.json", good()))
    db = str(tmp_path / "h.sqlite")
    return {
        "gate --save": lambda: gate.main(["--save", f"{loop}/r.json"], runner=_never_run),
        "gate --markdown": lambda: gate.main(
            ["--markdown", str(loop), "--baseline", clean], runner=_never_run
        ),
        "gate --base --save": lambda: gate.main(
            ["--base", "HEAD", "--save", str(loop)], runner_for=lambda tree: _never_run
        ),
        "bisect --save": lambda: bisect.main(["HEAD~1", "HEAD", "--save", str(loop), "--", "-k", "x"]),
        "noise --out": lambda: noise.main(["--out", str(loop), "--from", clean, clean]),
        "noise --keep": lambda: noise.main(["--keep", str(loop)], runner=_never_run),
        "report --out": lambda: report.main([clean, "--out", str(loop)]),
        "calibrate --markdown": lambda: calibrate.main(["--markdown", str(loop)]),
        "trends --out": lambda: history_main(["trends", "--db", db, "--out", str(loop)]),
        "runs --db": lambda: history_main(["runs", "--db", str(loop)]),
        "import --db sqlite:///": lambda: history_main(["import", "--db", f"sqlite:///{loop}", clean]),
    }


@pytest.mark.parametrize(
    "command",
    ["gate --save", "gate --markdown", "gate --base --save", "bisect --save", "noise --out", "noise --keep",
     "report --out", "calibrate --markdown", "trends --out", "runs --db", "import --db sqlite:///"],
)  # fmt: skip
def test_a_link_loop_is_refused_before_anything_runs(tmp_path, capsys, loop, command):
    if command == "trends --out":
        assert (
            history_main(
                ["import", "--db", str(tmp_path / "h.sqlite"), str(write(tmp_path / "r.json", good()))]
            )
            == 0
        )
        capsys.readouterr()
    code = _commands(tmp_path, loop)[command]()
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    [line] = err.splitlines()
    assert f"{loop}" in line and ("link loop" in line), line
    assert "Traceback" not in out + err


def test_a_file_systems_error_no_check_foresaw_is_one_line(capsys):
    def body() -> int:
        raise PermissionError(13, "Permission denied", "/somewhere/results.json")

    assert tool_main("perf.tools.x", body) == 2
    assert capsys.readouterr().err == "perf.tools.x: error: /somewhere/results.json: Permission denied\n"
