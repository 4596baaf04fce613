"""The report command (perf/tools/report.py, perf/tools/reporting/) on synthetic result files: which plots
each suite's results give and what report.md and report.html hold. The comparison with a baseline and the
refusals: tests/test_report_compare.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perf.tools.reporting.render import Code, Link, Table, html_page, markdown
from tests.report_results import (
    H100,
    allreduce_results,
    attention_results,
    bench,
    data_parallel_results,
    end_to_end_results,
    matmul_results,
    pngs,
    run_report,
    scaling_results,
    step_precision_results,
    write_results,
)


# --------------------------------------------------------------------------- plots per suite
@pytest.mark.parametrize(
    ("results", "expected"),
    [
        (
            attention_results,
            {
                "attention_time_fixed-tokens_bfloat16.png",
                "attention_memory_fixed-tokens_bfloat16.png",
                "attention_tflops_fixed-tokens_bfloat16.png",
            },
        ),
        # CPU figures: no peak memory, so no memory plot.
        (
            scaling_results,
            {
                "attention_time_attention-scaling_float32.png",
                "attention_tflops_attention-scaling_float32.png",
            },
        ),
        (end_to_end_results, {"end_to_end_ctx512.png"}),
        (step_precision_results, {"step_precision.png"}),
        (allreduce_results, {"allreduce_busbw.png"}),
        (data_parallel_results, {"data_parallel.png"}),
        (matmul_results, set()),
    ],
    ids=lambda x: getattr(x, "__name__", "").removesuffix("_results") or None,
)
def test_each_plot_is_drawn_exactly_when_its_results_are_there(tmp_path, capsys, results, expected):
    result = write_results(tmp_path / "run.json", results() + matmul_results())
    out = tmp_path / "report"
    code, stdout, err = run_report(capsys, result, "--out", out)
    assert code == 0, err
    assert pngs(out) == expected
    md = (out / "report.md").read_text()
    for name in expected:
        assert f"]({name})" in md
    if not expected:
        assert "None: no result is of a plotted suite" in md
    assert str(out / "report.md") in stdout


def test_interleaved_comparison_with_the_reference_is_not_drawn_as_a_step(tmp_path, capsys):
    interleaved = bench(
        "perf/test_end_to_end.py::test_train_step_vs_reference[sdpa-small-fp32-ctx512]",
        50.0,
        preset="small",
        impl="sdpa",
        context=512,
        mode="train_step",
        precision="fp32",
        baseline_median_ms=49.0,
        ratio_to_baseline=1.02,
    )
    result = write_results(tmp_path / "run.json", [interleaved])
    assert run_report(capsys, result, "--out", tmp_path / "report")[0] == 0
    assert pngs(tmp_path / "report") == set()


# --------------------------------------------------------------------------- report.md and report.html
@pytest.fixture
def everything(tmp_path) -> Path:
    results = (
        attention_results()
        + scaling_results()
        + end_to_end_results()
        + step_precision_results()
        + allreduce_results()
        + data_parallel_results()
        + matmul_results()
    )
    return write_results(tmp_path / "0001_everything.json", results)


def test_report_holds_machine_tables_and_every_plot(tmp_path, capsys, everything):
    out = tmp_path / "report"
    assert run_report(capsys, everything, "--out", out)[0] == 0
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    for text in (md, page):
        for fact in (
            H100,
            "580.159.04",
            "13.0",
            "2.11.0+cu130",
            "3.6.0",
            "2026-11-22T12:21:29",
            "0123456789ab",
        ):
            assert fact in text
        # The end-of-run tables of the suites, as the plugin prints them.
        assert "collectives: median, algbw and busbw in GB/s" in text
        assert "n x n matmuls per math mode" in text and "gloo with 4 ranks" in text
    # Every plot is linked from both, and every link has its file.
    md_links = set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md))
    html_links = set(re.findall(r'<img src="([^"]+)"', page))
    assert md_links == html_links == pngs(out)
    assert len(md_links) == 9
    assert "| `test_matmul.py::test_matmul[n512-fp32]` | 4 |" in md
    assert "<td><code>test_matmul.py::test_matmul[n512-fp32]</code></td>" in page
    assert "Against the baseline" not in md and "baseline_ratios.png" not in md


def test_default_folder_is_named_after_the_result(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = write_results(tmp_path / "0002_small.json", matmul_results())
    assert run_report(capsys, result)[0] == 0
    assert (tmp_path / "reports" / "0002_small" / "report.html").is_file()


def test_names_are_escaped_in_html_and_markdown(tmp_path, capsys):
    odd = 'perf/test_matmul.py::test_matmul[<script>alert("x")</script>|a&b]'
    result = write_results(tmp_path / "odd.json", [bench(odd, 1.0)])
    out = tmp_path / "report"
    assert run_report(capsys, result, "--out", out)[0] == 0
    page = (out / "report.html").read_text()
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;|a&amp;b" in page
    md = (out / "report.md").read_text()
    # A pipe inside a table cell is escaped, so the row keeps its columns.
    row = next(line for line in md.splitlines() if "alert" in line)
    assert r"\|a&b" in row and row.count(" | ") == 9


def test_renderers_escape_text_and_code():
    blocks = [Table(("name", "ms"), [[Code("a|b`c"), "1*2_"]], numeric=frozenset({1}))]
    assert "| ``a\\|b`c`` | 1\\*2\\_ |" in markdown(blocks)
    assert '<td><code>a|b`c</code></td><td class="num">1*2_</td>' in html_page("<t>", blocks)
    assert "<title>&lt;t&gt;</title>" in html_page("<t>", blocks)
    link = [Link("Kept *here*: ", "the run's [artifacts]", "https://x.test/runs/1?a=<b>")]
    assert (
        markdown(link) == "Kept \\*here\\*: [the run's \\[artifacts\\]](<https://x.test/runs/1?a=%3Cb%3E>)\n"
    )
    assert (
        '<p>Kept *here*: <a href="https://x.test/runs/1?a=&lt;b&gt;">the run&#x27;s [artifacts]</a></p>'
        in (html_page("t", link))
    )
