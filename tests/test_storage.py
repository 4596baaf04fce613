"""Files written whole and with the user's umask (perf/storage.py): a new file as open() would create it, an
existing one keeps its mode, a numbered baseline is never written over, and an interrupt leaves nothing."""

from __future__ import annotations

import os
import stat

import pytest

from perf import storage
from perf.storage import write_new, write_whole


@pytest.fixture
def umask_027():
    previous = os.umask(0o027)
    yield
    os.umask(previous)


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_takes_the_umask_and_an_existing_one_keeps_its_mode(tmp_path, umask_027):
    new, existing = tmp_path / "new.json", tmp_path / "existing.json"
    write_whole(new, b"1")
    existing.write_text("old")
    existing.chmod(0o604)
    write_whole(existing, b"2")
    assert (mode(new), mode(existing)) == (0o640, 0o604)
    assert existing.read_text() == "2"


def test_a_new_file_is_never_written_over(tmp_path, umask_027):
    path = tmp_path / "0001_run.json"
    write_new(path, b"first")
    with pytest.raises(FileExistsError):
        write_new(path, b"second")
    assert path.read_text() == "first" and mode(path) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0001_run.json"]


@pytest.mark.parametrize("write", [write_whole, write_new])
def test_an_interrupt_while_writing_leaves_the_file_as_it_was_and_no_temporary_file(
    tmp_path, monkeypatch, write
):
    path = tmp_path / "results.json"
    if write is write_whole:
        path.write_text("before")

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(storage.os, "replace" if write is write_whole else "link", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write(path, b"after")
    assert [p.name for p in tmp_path.iterdir()] == (["results.json"] if write is write_whole else [])
    assert write is write_new or path.read_text() == "before"
