"""Result files written whole or not at all.

pytest-benchmark writes `--benchmark-json=FILE` at the end of any session, interrupted or failed too,
and stores `--benchmark-save` under the next baseline number. Releases before 5.3 also open FILE when
they parse their options, emptying it before anything runs; there the option is retyped to a checked
path. Here, on every release:

- FILE's folder is checked at start (it must take a file); the results go to a temporary file in that
  folder, renamed over FILE when complete. A numbered baseline is written the same way, never over
  another file.
- A session that does not end well (interrupted, a failed benchmark, an internal error) stores its
  results as partial, never under FILE or a baseline number: `FILE` -> `FILE stem.partial.json`,
  `NNNN_name.json` -> `partial_<time>_name.json` beside the baselines. Only benchmarks whose test
  passed go in, the file says it is partial (`perf.partial`), the gate, the report and
  `--benchmark-compare` refuse it, and the end of the run says where it went.
- FILE is pytest-benchmark's document as it writes it (indented, raw rounds and all): a run's record for
  the tools and CI's artifacts. A stored baseline (and its partial file) is compact (perf/storage.py
  `compact_json`: no raw rounds, no indentation, repeated keys and kernel names once), about a fifth of
  the size, read back figure for figure by pytest-benchmark's own storage and `perf.storage.read_result`.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from perf.plugin import interrupts
from perf.storage import FILE, FOLDER, cannot_write, compact_json, partial_name, write_new, write_whole

# Exit codes after which a session's results are whole: all passed (or skipped), nothing collected.
WHOLE_EXIT_CODES = (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
PARTIAL_PREFIX = "partial_"
# Numbers a save tries when other writers keep taking the next one.
SAVE_TRIES = 50
# The exit code of a session whose results could not be stored where asked (kept elsewhere instead).
STORE_FAILED = pytest.ExitCode.INTERNAL_ERROR


def json_output(value: str) -> Path:
    """--benchmark-json's value as a path a file can be written at (perf/tools/reading/destinations.py);
    nothing is written yet."""
    path = Path(value).expanduser()
    if not value or path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is not a file path; give e.g. results.json")
    wrong = cannot_write(path, FILE)
    if wrong is not None:
        raise argparse.ArgumentTypeError(f"{wrong}; give a writable path")
    return path


def _storage_folder(config: pytest.Config) -> Path | None:
    """The folder --benchmark-save and --benchmark-autosave store in (pytest-benchmark's file storage), or
    None where the run stores none there."""
    if not (
        getattr(config.option, "benchmark_save", None) or getattr(config.option, "benchmark_autosave", None)
    ):
        return None
    storage = str(getattr(config.option, "benchmark_storage", "") or "")
    if "://" in storage and not storage.startswith("file://"):
        return None  # another storage (elasticsearch): not a folder here
    return Path(storage.removeprefix("file://")).expanduser()


# The parser of this process's pytest, as pytest_addoption gave it (see pytest_plugin_registered).
_parser: list[pytest.Parser] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    _parser[:] = [parser]
    _retype_json_option(parser)


def pytest_plugin_registered(plugin: object, manager: object) -> None:
    """pytest parses the options it knows before it loads conftest files, and argparse opens (and
    empties) --benchmark-json's file then: this plugin is loaded first (`-p` in pytest.ini's addopts),
    and retypes the option as soon as pytest-benchmark, registered after it, has declared it."""
    if _parser:
        _retype_json_option(_parser[0])


def _retype_json_option(parser: pytest.Parser) -> None:
    """--benchmark-json as a checked path (`json_output`) where pytest-benchmark declares it as a file
    that argparse opens (releases before 5.3); a release that takes a path is left as it is. pytest 8
    builds its argparse parser from the options' attributes, pytest 9 adds each argument as it is
    declared: both are set. tests/test_result_files.py fails if neither takes."""
    for group in getattr(parser, "_groups", ()):
        for option in getattr(group, "options", ()):
            attrs = getattr(option, "_attrs", None)  # pytest 9.1 keeps no such dict: its actions below
            if "--benchmark-json" in option.names() and isinstance(attrs, dict):
                if isinstance(attrs.get("type"), argparse.FileType):
                    attrs["type"] = json_output
    for action in getattr(getattr(parser, "optparser", None), "_actions", ()):
        if "--benchmark-json" in action.option_strings and isinstance(action.type, argparse.FileType):
            action.type = json_output


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """The folders --benchmark-save and --benchmark-json write into checked before anything runs (before
    pytest-benchmark's own configure, which is trylast, makes its storage)."""
    if not config.pluginmanager.has_plugin("perf.plugin.interrupts"):
        interrupts.uninstall()  # blocked after pytest registered it: Python's own handling of SIGINT
    folder = _storage_folder(config)
    if folder is not None and (wrong := cannot_write(folder, FOLDER)) is not None:
        raise pytest.UsageError(f"--benchmark-save: {wrong}; give a writable --benchmark-storage")
    value = getattr(config.option, "benchmark_json", None)
    if value is None:
        return
    try:
        config.option.benchmark_json = json_output(str(value))
    except argparse.ArgumentTypeError as err:
        raise pytest.UsageError(f"--benchmark-json: {err}") from None


def pytest_sessionstart(session: pytest.Session) -> None:
    """The --benchmark-json file and numbered baselines written whole; the tests that passed, counted."""
    config = session.config
    config.perf_passed = set()
    config.perf_partial = None
    config.perf_json_written = None
    benchmark_session = getattr(config, "_benchmarksession", None)
    if benchmark_session is None:
        return  # pytest-benchmark not loaded (-p no:benchmark)
    # pytest-benchmark calls these by name at the end of the session (5.1 to 5.3 alike).
    benchmark_session.save_json = lambda output_json: _save_json(config, benchmark_session, output_json)
    storage = getattr(benchmark_session, "storage", None)
    if storage is not None and hasattr(storage, "get") and hasattr(storage, "_next_num"):
        storage.save = lambda output_json, save: _save(config, storage, output_json, save)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    report = yield
    if report.when == "call" and report.passed and hasattr(item.config, "perf_passed"):
        item.config.perf_passed.add(report.nodeid)
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    """Around pytest-benchmark's saving (itself a wrapper that saves first): see `_mark_partial`."""
    _mark_partial(session, interrupts.exit_status(session, exitstatus))
    result = yield
    if getattr(session.config, "perf_store_failures", None):
        session.exitstatus = STORE_FAILED  # results not where they were asked for: never a clean run
    return result


def _mark_partial(session: pytest.Session, exitstatus: int) -> None:
    """A session that did not end well makes its results partial, and keeps only the benchmarks whose
    test passed (a cut-off one has few rounds or none), less any an interrupt arrived in."""
    config = session.config
    if exitstatus in WHOLE_EXIT_CODES:
        return
    benchmark_session = getattr(config, "_benchmarksession", None)
    measured = list(getattr(benchmark_session, "benchmarks", None) or [])
    passed = getattr(config, "perf_passed", set()) - interrupts.tests_interrupted()
    kept = [b for b in measured if getattr(b, "fullname", None) in passed]
    if benchmark_session is not None:
        benchmark_session.benchmarks[:] = kept
    config.perf_partial = (
        f"{_why_partial(exitstatus)}; {len(kept)} benchmark(s) whose test passed are kept, "
        f"{len(measured) - len(kept)} cut off or failed are left out"
    )


def _why_partial(exitstatus: int) -> str:
    try:
        name = pytest.ExitCode(exitstatus).name.lower().replace("_", " ")
    except ValueError:
        name = "an unknown exit"
    return f"the session ended with exit code {int(exitstatus)} ({name})"


def partial_results(config: pytest.Config, output_json: dict[str, Any]) -> None:
    """A partial session's results say that they are partial, and why."""
    reason = getattr(config, "perf_partial", None)
    if reason is not None:
        output_json.setdefault("perf", {})["partial"] = reason


def _dumps(output_json: dict[str, Any], indent: int | None = 4) -> str:
    from pytest_benchmark.utils import safe_dumps  # the encoder pytest-benchmark's own files use

    return safe_dumps(output_json, ensure_ascii=True, indent=indent)


def _stored(output_json: dict[str, Any]) -> bytes:
    """A stored result's bytes: pytest-benchmark's document (its values made JSON by its own encoder, as in
    its files) in the compact form."""
    return compact_json(json.loads(_dumps(output_json, indent=None)))


def _save_json(config: pytest.Config, benchmark_session: Any, output_json: dict[str, Any]) -> None:
    """pytest-benchmark's save_json, written whole; partial results under FILE's partial name; where FILE
    cannot be written, the results kept elsewhere (`_kept_elsewhere`)."""
    path = Path(benchmark_session.json)
    if getattr(config, "perf_partial", None) is not None:
        path = partial_name(path)
    data = _dumps(output_json).encode()
    try:
        write_whole(path, data)
    except OSError as err:
        _kept_elsewhere(config, "--benchmark-json", path, _not_a_folder(path.parent, err), data, path.name)
        return
    config.perf_json_written = path
    benchmark_session.logger.info(f"Wrote benchmark data in: {path}", purple=True)


def _save(config: pytest.Config, storage: Any, output_json: dict[str, Any], save: str) -> None:
    """pytest-benchmark's FileStorage.save, in the compact form, written whole and never over another file:
    a number another writer took meanwhile makes it take the next free one; partial results under a name of
    their own; where the folder cannot take it, the results kept elsewhere (`_kept_elsewhere`)."""
    data = _stored(output_json)
    path = Path(str(getattr(storage, "path", "the storage folder")))

    def kept_elsewhere(err: OSError) -> None:
        _kept_elsewhere(config, "--benchmark-save", path, err, data, f"{save}.json")

    for _ in range(SAVE_TRIES):
        try:
            if getattr(config, "perf_partial", None) is None:
                path = Path(storage.get(f"{storage._next_num}_{save}.json"))
            else:
                stamp = time.strftime("%Y%m%d-%H%M%S")
                path = Path(storage.get(f"{PARTIAL_PREFIX}{stamp}-{os.getpid()}_{save}.json"))
        except (OSError, RuntimeError) as err:  # pathlib says RuntimeError of a link loop before 3.13
            return kept_elsewhere(_not_a_folder(path, err))
        try:
            write_new(path, data)
        except FileExistsError as err:
            if os.path.lexists(path):
                continue  # another writer stored under this name meanwhile: the next free number
            return kept_elsewhere(_not_a_folder(path.parent, err))
        except OSError as err:
            return kept_elsewhere(err)
        config.perf_saved = path
        storage.logger.info(f"Saved benchmark data in: {path}")
        return None
    return kept_elsewhere(FileExistsError(f"{SAVE_TRIES} numbers in a row taken by other writers"))


def _not_a_folder(folder: Path, err: Exception) -> OSError:
    """What a folder that exists but cannot be entered is: a link to nowhere or a link loop, said as such."""
    if isinstance(err, OSError) and (folder.is_dir() or not os.path.lexists(folder)):
        return err
    return NotADirectoryError(errno.ENOTDIR, f"{folder} is not a folder (a link loop or a broken link?)")


def _kept_elsewhere(
    config: pytest.Config, option: str, path: Path, err: OSError, data: bytes, name: str
) -> None:
    """A store that failed at the end of a run: the results written to the temporary folder instead, and a
    line for the end of the run saying both; the session then exits STORE_FAILED."""
    kept: Path | None = (
        Path(tempfile.gettempdir()) / f"perf-unsaved-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{name}"
    )
    try:
        write_new(kept, data)
    except OSError:
        kept = None
    where = f"the results are kept in {kept}" if kept else "they could not be kept anywhere"
    why = err.strerror or str(err)
    config.perf_store_failures = [
        *getattr(config, "perf_store_failures", []),
        f"{option}: cannot write {path} ({why}); {where}",
    ]


def run_note(config: pytest.Config) -> list[str]:
    """For the end of a run: where partial results went, or that none were stored."""
    failures = list(getattr(config, "perf_store_failures", []))
    reason = getattr(config, "perf_partial", None)
    if reason is None:
        return failures
    places = [
        str(path)
        for path in (getattr(config, "perf_json_written", None), getattr(config, "perf_saved", None))
        if path is not None
    ]
    where = (
        f"its results are stored as partial in {' and '.join(places)}, which comparisons, the gate and "
        "the report refuse; no baseline number and no --benchmark-json file was written or changed"
        if places
        else "nothing was stored"
    )
    return [*failures, f"results not stored whole: {reason}; {where}"]
