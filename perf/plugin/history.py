"""A run recorded into the results database (perf/history/): with --history [URL], or where $PERF_HISTORY
names one, the document pytest-benchmark writes is recorded after its files are written, by the process
that records a launcher's results (rank 0). A database that cannot be reached, or refuses the run, is one
line at the end; the result files stand. Partial results (an interrupted or failed run) are not recorded.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from perf.workloads import launched_session

URL_VARIABLE = "PERF_HISTORY"  # store.URL_VARIABLE, not imported here: that loads the database library


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("perf").addoption(
        "--history",
        nargs="?",
        const="",
        metavar="URL",
        help="record this run into the results database: URL, else $PERF_HISTORY, else "
        ".benchmarks/history.sqlite (docs/history.md)",
    )


def wanted(config: pytest.Config) -> str | None:
    """The database URL to record into ('' for the default), or None where this run records nothing."""
    given = config.getoption("history", None)
    if given is not None:
        return given
    return os.environ.get(URL_VARIABLE) or None


@pytest.hookimpl(trylast=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    """The document as written (the suite's other hooks have run): the one to record."""
    config.perf_history_document = output_json


def pytest_sessionfinish(session: pytest.Session) -> None:
    """After pytest-benchmark wrote its files (it saves before the session's other hooks run)."""
    config = session.config
    url = wanted(config)
    if url is None or not launched_session.records_here():
        return
    document = getattr(config, "perf_history_document", None) or _document(config)
    config.perf_history_line = record(document, url) if document is not None else None


def _document(config: pytest.Config) -> dict[str, Any] | None:
    """The run's document where no file was asked for (neither --benchmark-json nor --benchmark-save),
    made as pytest-benchmark makes its files', without the raw rounds."""
    bs = getattr(config, "_benchmarksession", None)
    if bs is None or not bs.benchmarks:
        return None
    commit_info = config.hook.pytest_benchmark_generate_commit_info(config=config)
    config.hook.pytest_benchmark_update_commit_info(config=config, commit_info=commit_info)
    document = config.hook.pytest_benchmark_generate_json(
        config=config,
        benchmarks=bs.benchmarks,
        include_data=False,
        machine_info=bs.get_machine_info(),
        commit_info=commit_info,
    )
    config.hook.pytest_benchmark_update_json(config=config, benchmarks=bs.benchmarks, output_json=document)
    return document


def record(document: dict[str, Any], url: str) -> str:
    """Record `document`; the line that says where, or why not."""
    perf = document.get("perf")
    if isinstance(perf, dict) and perf.get("partial"):
        return f"history: not recorded, the results are partial ({perf['partial']})"
    from perf.history.store import HistoryError, connect  # the database library, only when recording

    try:
        with connect(url or None) as history:
            done = history.record(document, source="run")
            where = history.url
    except HistoryError as err:
        return f"history: not recorded: {err}"
    if not done.new:
        return f"history: already recorded as run #{done.run_id} in {where}"
    return f"history: recorded {done.benchmarks} benchmarks as run #{done.run_id} in {where}"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    line = getattr(config, "perf_history_line", None)
    if line:
        terminalreporter.write_line(line)
