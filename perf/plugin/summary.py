"""What the terminal says about a run: where and how it runs, after collection, and at its end the
derived figures of every benchmark, the suites' tables (perf/tables/), out-of-memory skips and notes.

Said only when benchmarks were collected, and under a launcher only by the rank that records (0).
pytest-benchmark's own tables (min, max, mean, ... of every group) are shown on a GPU and with
--benchmark-tables; on the CPU the suite's tables say what its check needs.
"""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

from perf import harness
from perf.harness import clocks, gpu_time
from perf.plugin import result_files
from perf.storage import PERF
from perf.tables.derived import DERIVED_TITLE, INTERLEAVED_TITLE, derived_table, interleaved_table
from perf.tables.format import WIDTH
from perf.tables.summary import SUMMARY_TABLES
from perf.tiers import SUITES, TIERS
from perf.workloads import launched_session


def _collected_benchmarks(items: list[pytest.Item]) -> bool:
    return any("bench" in getattr(item, "fixturenames", ()) for item in items)


def wrapped(text: str, prefix: str = "") -> list[str]:
    """`text` in lines of at most WIDTH columns (a word longer stays whole: a path, a command), the first
    starting with `prefix`, the others indented under it."""
    indent = " " * (len(prefix) + 2)
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=prefix,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def tables_shown(config: pytest.Config) -> bool:
    """pytest-benchmark's own tables: asked for (--benchmark-tables, or its --benchmark-verbose or
    --benchmark-cprofile, shown with them), or on a GPU, where their spread and their rows beside a stored
    baseline are what a measurement is read by."""
    asked = ("benchmark_tables", "benchmark_verbose", "benchmark_cprofile")
    return any(config.getoption(name) for name in asked) or config.perf_device.type == "cuda"


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    # pytest-benchmark's session exists from its pytest_configure on; `quiet` is what its --benchmark-quiet
    # sets, read when it displays its tables. Its regression check (--benchmark-compare-fail) runs either way.
    benchmarks = getattr(session.config, "_benchmarksession", None)
    if benchmarks is not None and not tables_shown(session.config):
        benchmarks.quiet = True


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    """Said after collection, and only when benchmarks were collected: where they run and how."""
    # --collect-only -q lists node ids and nothing else: no header, no notes at its end.
    quiet_list = config.option.collectonly and config.option.verbose < 0
    config.perf_collected = (
        _collected_benchmarks(items) and launched_session.records_here() and not quiet_list
    )
    if not config.perf_collected:
        return []
    # The suites whose benchmarks run (perf/test_<suite>.py), and those whose axes every benchmark shares.
    names = {item.path.stem.removeprefix("test_") for item in items if PERF in item.path.parents}
    config.perf_suites = [suite for suite in SUITES if suite.shared or suite.name in names]
    device, tier = config.perf_device, config.perf_tier
    where = harness.gpu_name(device) or f"CPU ({harness.machine_info(device)['cpu_model']})"
    shared = "; ".join(s.header(tier) for s in config.perf_suites if s.shared and s.header)
    said = [
        f"device {device} [{where}], torch {torch.__version__}, tier '{tier.name}'"
        + (f" ({shared})" if shared else "")
    ]
    said += [s.header(tier) for s in config.perf_suites if not s.shared and s.header]
    if not harness.NVTX_AVAILABLE:
        config.perf_notes.append("nvtx is not importable: no NVTX ranges for nsys (pip install nvtx)")
    launch = launched_session.header()
    if launch:
        said.append(launch)
    # The notes of other parts (baselines, result files) as they wrote them: their text is theirs.
    lines = [line for text in said + _cpu_note(config) for line in wrapped(text, prefix="perf: ")]
    return lines + [f"perf: {note}" for note in config.perf_notes]


def _cpu_note(config: pytest.Config) -> list[str]:
    """Said once, before the run: what a run without a GPU is for and what it leaves out."""
    if config.perf_device.type == "cuda":
        return []
    default, tier = TIERS["default"], config.perf_tier
    left_out = []
    for axis in (a for suite in config.perf_suites for a in suite.axes if getattr(a, "left_out_note", "")):
        values = [v for v in getattr(default, axis.name) if v not in getattr(tier, axis.name)]
        if values:
            left_out.append(axis.left_out_note.format(values=", ".join(map(str, values))))
    purpose = "the cpu tier checks that every suite runs, at small sizes and few rounds: not a measurement. "
    return [
        f"no CUDA GPU in use: {purpose if tier.name == 'cpu' else ''}GPU-only figures read '-', GPU-only "
        "benchmarks skip." + (f" Not run here: {'; '.join(left_out)}." if left_out else "")
    ]


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    session = getattr(config, "_benchmarksession", None)
    results = [b for b in (session.benchmarks if session else []) if b and b.extra_info.get("median_ms")]
    tr = terminalreporter
    if not getattr(config, "perf_collected", False):
        return
    infos = [b.extra_info for b in results]
    notes = config.perf_notes + result_files.run_note(config) + _stored_tuning_notes()
    if config.perf_device.type == "cuda":  # on the CPU, the note before the run says there are none
        notes += gpu_time.run_notes(infos) + clocks.run_note(infos)
    tr.ensure_newline()  # the progress line's end, before the first section
    named = [(b.name, b.extra_info) for b in results]
    in_tables = 0
    if config.perf_device.type != "cuda":  # no GPU figure to add: a row per benchmark no other table shows
        alone = [(name, x) for name, x in named if not _tabulated(x)]
        in_tables, named = len(named) - len(alone), alone
    rows = derived_table(named)
    _section(tr, DERIVED_TITLE, rows)
    if in_tables and rows:  # below the table it adds to; with no table above, the tables below say it all
        tr.write_line(f"({in_tables} more benchmark{'s' if in_tables > 1 else ''}: in the tables below)")
    _section(tr, INTERLEAVED_TITLE, interleaved_table([(b.name, b.extra_info) for b in results]))
    for title, table in SUMMARY_TABLES:
        _section(tr, title, table(infos))
    _section(tr, "out of memory: recorded as skips, the sweeps went on", config.perf_out_of_memory)
    _section(tr, "perf notes", [part for note in notes for part in wrapped(note)])  # within WIDTH, as all


def _tabulated(info: dict) -> bool:
    """Whether a suite's table or the interleaved one shows this benchmark."""
    return bool(info.get("ratio_to_baseline")) or any(table([info]) for _, table in SUMMARY_TABLES)


def _section(tr, title: str, lines: list[str]) -> None:
    """`lines` under a separator line with `title`; a title too long for one is cut at its first ': ' and
    the rest wrapped under it. Nothing without lines."""
    if not lines:
        return
    head, rest = title, ""
    if len(title) + 4 > WIDTH and ": " in title:
        head, rest = title.split(": ", 1)
    tr.section(head, sep="-")
    for line in [*wrapped(rest), *lines]:
        tr.write_line(line)


def _stored_tuning_notes() -> list[str]:
    """Which stored Triton configurations the run launched, once the Triton kernels ran (imported
    here only then: importing Triton's kernels early would fix the interpreter setting)."""
    tuning = sys.modules.get("kernels.flash_attention_triton.stored")
    return [f"flash_triton: {line}" for line in tuning.describe()] if tuning else []
