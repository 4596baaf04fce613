"""The report of one benchmark run, or of a run against its baseline (`python -m perf.tools.report`): the
result files it reads and the report's content, written as Markdown and HTML with PNG plots.

The output folder gets report.md and report.html (the same content; the HTML needs nothing but the PNGs
beside it) and a PNG per plot that the results have data for (plots.py). Result files are read and refused
as the regression gate does (perf/tools/reading/results.py): missing, damaged, without benchmarks or machine
info.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf.storage import write_whole
from perf.tables.format import Info, fmt
from perf.tables.summary import SUMMARY_TABLES
from perf.tools.judging.changes import Rule
from perf.tools.reading.errors import GateError
from perf.tools.reading.results import Results
from perf.tools.reporting import figures
from perf.tools.reporting.comparison import compare, comparison_blocks, shown
from perf.tools.reporting.figures import Plot
from perf.tools.reporting.plots import make_plots
from perf.tools.reporting.render import (
    Block,
    Heading,
    Image,
    Paragraph,
    Preformatted,
    Table,
    html_page,
    markdown,
)


# --------------------------------------------------------------------------- result files
@dataclass(frozen=True)
class Benchmark:
    fullname: str  # the node id, the key the gate compares by
    stats: Mapping[str, Any]
    info: Info  # extra_info: the benchmark's parameters and derived figures


@dataclass(frozen=True)
class Run:
    results: Results  # the gate's view: processor, timings and the whole file
    benchmarks: list[Benchmark]

    @property
    def data(self) -> Mapping[str, Any]:
        """The whole file: machine_info, commit_info, datetime."""
        return self.results.document

    @property
    def infos(self) -> list[Info]:
        return [b.info for b in self.benchmarks]


def as_run(results: Results) -> Run:
    """A result file read by the gate's rules (load_results) with everything the report shows."""
    entries = results.document["benchmarks"]  # load_results checked each has a fullname and stats
    benchmarks = [
        Benchmark(
            fullname=entry["fullname"],
            stats=entry["stats"],
            info=entry.get("extra_info") if isinstance(entry.get("extra_info"), dict) else {},
        )
        for entry in entries
        if isinstance(entry.get("fullname"), str) and isinstance(entry.get("stats"), dict)
    ]
    return Run(results, benchmarks)


# --------------------------------------------------------------------------- machine and run
def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _commit(data: Mapping[str, Any]) -> str:
    """pytest-benchmark's commit_info: id, branch, dirty; 'unknown' outside a git checkout."""
    info = _dict(data.get("commit_info"))
    commit = info.get("id")
    if not commit or commit == "unknown":
        return "unknown"
    text = f"{str(commit)[:12]} on {_text(info.get('branch'))}"
    return text + " with uncommitted changes" if info.get("dirty") else text


def machine_rows(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, value): where (machine_info['perf'], perf/plugin/baselines.py), when and at what commit
    a run ran."""
    machine_info = _dict(data.get("machine_info"))
    perf = _dict(machine_info.get("perf"))
    gpu = _dict(perf.get("gpu"))
    if gpu.get("name"):
        count = gpu.get("count")
        processor = f"{gpu['name']}" + (f" x{count}" if isinstance(count, int) and count > 1 else "")
    else:
        processor = "none: a CPU run"
    details = [
        f"{gpu[key]}{unit}" for key, unit in (("memory_gib", " GiB"), ("capability", "")) if gpu.get(key)
    ]
    cpu = _text(perf.get("cpu_model")) + (f" ({perf['cpu_count']} cores)" if perf.get("cpu_count") else "")
    return [
        ("GPU", processor + (f" ({', '.join(details)})" if details else "")),
        ("driver", _text(gpu.get("driver"))),
        ("CUDA", _text(perf.get("cuda"))),
        ("torch", _text(perf.get("torch"))),
        ("triton", _text(perf.get("triton"))),
        ("CPU", cpu),
        ("Python", _text(machine_info.get("python_version"))),
        ("recorded", _text(data.get("datetime"))),
        ("commit", _commit(data)),
        ("pytest-benchmark", _text(data.get("version"))),
    ]


def machine_table(current: Run, baseline: Run | None) -> Table:
    rows = machine_rows(current.data)
    if baseline is None:
        return Table(("", "result"), [list(row) for row in rows])
    before = dict(machine_rows(baseline.data))
    return Table(("", "result", "baseline"), [[field, value, before[field]] for field, value in rows])


# --------------------------------------------------------------------------- the document
def _gib(value: object) -> float | None:
    return value / 2**30 if isinstance(value, int | float) and value else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def benchmarks_table(benchmarks: Sequence[Benchmark]) -> Table:
    """Every benchmark with its spread, its GPU busy time and share, and the figures the harness derives
    (the end-of-run summary's, per row)."""
    rows = []
    for b in benchmarks:
        median, iqr = _number(b.stats.get("median")), _number(b.stats.get("iqr"))
        spread = iqr / median if median and iqr is not None else None
        rows.append(
            [
                shown(b.fullname),
                fmt(None if median is None else median * 1e3, ".4g"),
                fmt(spread, ".1%"),
                fmt(_number(b.info.get("gpu_ms")), ".4g"),
                fmt(_number(b.info.get("gpu_busy_share")), ".0%"),
                _text(b.stats.get("rounds")),
                fmt(_number(b.info.get("tflops")), ".3g"),
                fmt(_number(b.info.get("tokens_per_s")), ".0f"),
                fmt(_number(b.info.get("gb_per_s")), ".3g"),
                fmt(_gib(b.info.get("peak_memory_bytes")), ".2f"),
            ]
        )
    header = (
        "benchmark",
        "median ms",
        "IQR / median",
        "GPU ms",
        "GPU busy",
        "rounds",
        "TFLOP/s",
        "tokens/s",
        "GB/s",
        "peak GiB",
    )
    return Table(header, rows, numeric=frozenset(range(1, len(header))))


def table_blocks(infos: Sequence[Info]) -> list[Block]:
    # Only results that were timed: as in the end-of-run summary, the tables read median_ms.
    timed = [info for info in infos if info.get("median_ms")]
    blocks: list[Block] = []
    for title, make in SUMMARY_TABLES:
        lines = make(timed)
        if lines:
            blocks += [Heading(3, title), Preformatted(lines)]
    return [Heading(2, "Tables"), *blocks] if blocks else []


def plot_blocks(plots: Sequence[Plot]) -> list[Block]:
    if not plots:
        return [
            Heading(2, "Plots"),
            Paragraph(
                "None: no result is of a plotted suite (attention, end to end, mixed precision step, "
                "all-reduce, data parallel) with the figures a plot needs."
            ),
        ]
    blocks: list[Block] = [Heading(2, "Plots")]
    for plot in plots:
        blocks += [Heading(3, plot.title), Paragraph(plot.caption), Image(plot.file, plot.title)]
    return blocks


def document(
    current: Run,
    baseline: Run | None,
    plots: Sequence[Plot],
    comparison_part: Sequence[Block],
) -> list[Block]:
    source = f"{len(current.benchmarks)} benchmarks of {current.results.path}"
    if baseline is not None:
        source += f", against the baseline {baseline.results.path}"
    return [
        Heading(1, f"Benchmark report: {current.results.path.name}"),
        Paragraph(source + f", recorded on {current.results.machine}."),
        machine_table(current, baseline),
        *comparison_part,
        *plot_blocks(plots),
        *table_blocks(current.infos),
        Heading(2, "All benchmarks"),
        benchmarks_table(current.benchmarks),
    ]


# --------------------------------------------------------------------------- writing
def prepare_out(out: Path) -> None:
    """Create `out` and make sure a file can be written into it, before any work is done."""
    if out.exists() and not out.is_dir():
        raise GateError(f"--out {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out):
            pass
    except OSError as err:
        raise GateError(f"--out {out}: cannot write into it ({err.strerror or err})") from None


def _write(path: Path, text: str) -> None:
    write_whole(path, text.encode("utf-8"))  # an interrupted write leaves no report that looks complete


def write_report(
    current: Run, baseline: Run | None, out: Path, rule: Rule, notes: Sequence[str] = ()
) -> list[Path]:
    """Plots, report.md and report.html in `out`; returns the two reports' paths. `rule` judges the
    current run against the baseline as the gate does; `notes` say where its GPU-time thresholds came from."""
    try:
        comparison_part: list[Block] = []
        if baseline is not None:
            comparison = compare(baseline.results, current.results, rule, notes)
            comparison_part = comparison_blocks(comparison, out)
        plots = make_plots(current.infos, out)
        blocks = document(current, baseline, plots, comparison_part)
        paths = [out / "report.md", out / "report.html"]
        _write(paths[0], markdown(blocks))
        _write(paths[1], html_page(f"Benchmark report: {current.results.path.name}", blocks))
    except OSError as err:
        raise GateError(f"--out {out}: cannot write the report ({err.strerror or err})") from None
    return paths


def written(
    current: Results, baseline: Results | None, out: Path, rule: Rule, notes: Sequence[str] = ()
) -> list[Path]:
    """The report of `current` (against `baseline` where given) written into `out`: refused (GateError) before
    any work where matplotlib is missing or `out` cannot be written; returns report.md's and report.html's
    paths (write_report)."""
    missing = figures.matplotlib_missing()
    if missing:
        raise GateError(missing)
    prepare_out(out)
    return write_report(as_run(current), None if baseline is None else as_run(baseline), out, rule, notes)
