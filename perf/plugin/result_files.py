"""Result files written whole or not at all.

pytest-benchmark opens `--benchmark-json=FILE` for writing when it parses its options, emptying FILE
before anything runs, and at the end of any session, interrupted or failed too, it writes what was
measured, under the next baseline number for `--benchmark-save`. Here:

- FILE is only checked at start (its folder must take a file); the results go to a temporary file in
  that folder, renamed over FILE when complete. A numbered baseline is written the same way.
- A session that does not end well (interrupted, a failed benchmark, an internal error) stores its
  results as partial, never under FILE or a baseline number: `FILE` -> `FILE stem.partial.json`,
  `NNNN_name.json` -> `partial_<time>_name.json` beside the baselines. Only benchmarks whose test
  passed go in, the file says it is partial (`perf.partial`), the gate, the report and
  `--benchmark-compare` refuse it, and the end of the run says where it went.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from pytest_benchmark.utils import safe_dumps

from perf.storage import write_whole

# Exit codes after which a session's results are whole: all passed (or skipped), nothing collected.
WHOLE_EXIT_CODES = (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
PARTIAL_PREFIX = "partial_"


class PendingJson:
    """What pytest-benchmark gets for `--benchmark-json=FILE`: a file-like writer that keeps its bytes and
    writes them whole when closed, to FILE, or to FILE's partial name where the session did not end well."""

    def __init__(self, path: Path):
        self.path = path
        self.partial: str | None = None  # why the session's results are partial, once it ended
        self._data = bytearray()

    @property
    def target(self) -> Path:
        return self.path if self.partial is None else self.path.with_name(f"{self.path.stem}.partial.json")

    def write(self, data: bytes) -> int:
        self._data += data
        return len(data)

    def __enter__(self) -> PendingJson:
        return self

    def __exit__(self, kind: type | None, *_: object) -> None:
        if kind is None:  # an error while writing leaves every file as it was
            write_whole(self.target, bytes(self._data))

    def __str__(self) -> str:  # pytest-benchmark names it in "Wrote benchmark data in: ..."
        return str(self.target)


def json_output(value: str) -> PendingJson:
    """The type of --benchmark-json: the path checked (its folder takes a file), nothing written yet."""
    path = Path(value).expanduser()
    if not value or path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is not a file path; give e.g. results.json")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent):
            pass
    except OSError as err:
        raise argparse.ArgumentTypeError(
            f"cannot write into {str(path.parent)!r} ({err.strerror or err}); give a writable folder"
        ) from None
    return PendingJson(path)


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
    """--benchmark-json as a path written at the end (`json_output`), not a file opened when parsed.
    pytest 8 builds its argparse parser from the options' attributes, pytest 9 adds each argument as it
    is declared: both are set. tests/test_result_files.py fails if neither takes."""
    for group in getattr(parser, "_groups", ()):
        for option in getattr(group, "options", ()):
            attrs = getattr(option, "_attrs", None)  # pytest 9.1 keeps no such dict: its actions below
            if "--benchmark-json" in option.names() and isinstance(attrs, dict):
                attrs["type"] = json_output
    for action in getattr(getattr(parser, "optparser", None), "_actions", ()):
        if "--benchmark-json" in action.option_strings:
            action.type = json_output


def pytest_sessionstart(session: pytest.Session) -> None:
    """Numbered baselines written whole; the tests that passed, counted as they pass."""
    config = session.config
    config.perf_passed = set()
    config.perf_partial = None
    benchmark_session = getattr(config, "_benchmarksession", None)
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
    _mark_partial(session, exitstatus)
    return (yield)


def _mark_partial(session: pytest.Session, exitstatus: int) -> None:
    """A session that did not end well makes its results partial, and keeps only the benchmarks whose
    test passed (a cut-off one has few rounds or none)."""
    config = session.config
    if exitstatus in WHOLE_EXIT_CODES:
        return
    benchmark_session = getattr(config, "_benchmarksession", None)
    measured = list(getattr(benchmark_session, "benchmarks", None) or [])
    passed = getattr(config, "perf_passed", set())
    kept = [b for b in measured if getattr(b, "fullname", None) in passed]
    if benchmark_session is not None:
        benchmark_session.benchmarks[:] = kept
    config.perf_partial = (
        f"{_why_partial(exitstatus)}; {len(kept)} benchmark(s) whose test passed are kept, "
        f"{len(measured) - len(kept)} cut off or failed are left out"
    )
    json_file = getattr(benchmark_session, "json", None)
    if isinstance(json_file, PendingJson):
        json_file.partial = config.perf_partial


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


def _save(config: pytest.Config, storage: Any, output_json: dict[str, Any], save: str) -> None:
    """pytest-benchmark's FileStorage.save, written whole; partial results under a name of their own."""
    if getattr(config, "perf_partial", None) is None:
        path = Path(storage.get(f"{storage._next_num}_{save}.json"))
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path(storage.get(f"{PARTIAL_PREFIX}{stamp}_{save}.json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        raise FileExistsError(f"{path} exists: a stored result is never overwritten")
    write_whole(path, safe_dumps(output_json, ensure_ascii=True, indent=4).encode())
    config.perf_saved = path
    storage.logger.info(f"Saved benchmark data in: {path}")


def run_note(config: pytest.Config) -> list[str]:
    """For the end of a run: where partial results went, or that none were stored."""
    reason = getattr(config, "perf_partial", None)
    if reason is None:
        return []
    benchmark_session = getattr(config, "_benchmarksession", None)
    places = []
    json_file = getattr(benchmark_session, "json", None)
    if isinstance(json_file, PendingJson) and json_file.target.exists():
        places.append(str(json_file.target))
    saved = getattr(config, "perf_saved", None)
    if saved is not None:
        places.append(str(saved))
    where = (
        f"its results are stored as partial in {' and '.join(places)}, which comparisons, the gate and "
        "the report refuse; no baseline number and no --benchmark-json file was written or changed"
        if places
        else "nothing was stored"
    )
    return [f"results not stored whole: {reason}; {where}"]
