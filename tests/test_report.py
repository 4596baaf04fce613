"""The report command (perf/tools/report.py, perf/tools/reporting/) on synthetic result files: which plots
each suite's results give, what report.md and report.html hold, the comparison with a baseline, and every
refusal (exit 2 with one line on stderr and no report)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from perf.cases.attention import SWEEPS
from perf.tools import report
from perf.tools.reporting import figures
from perf.tools.reporting.render import Code, Link, Table, html_page, markdown

ROOT = Path(__file__).resolve().parent.parent
H100 = "NVIDIA H100 80GB HBM3"


# --------------------------------------------------------------------------- synthetic result files
def stats(median_s: float, iqr_fraction: float = 0.01, rounds: int = 20) -> dict:
    """The pytest-benchmark stats the report and the gate read: a median and its spread."""
    iqr = median_s * iqr_fraction
    return {"median": median_s, "iqr": iqr, "stddev": iqr / 1.349, "rounds": rounds, "iterations": 1}


def bench(fullname: str, median_ms: float, **info) -> dict:
    """One benchmark entry; extra_info gets median_ms as the harness records it, and `info`."""
    return {
        "name": fullname.split("::")[-1],
        "fullname": fullname,
        "group": None,
        "stats": stats(median_ms / 1e3),
        "extra_info": {"median_ms": median_ms, **info},
    }


def write_results(path: Path, benchmarks: list[dict], gpu: str | None = H100) -> Path:
    """A result file as `pytest perf/ --benchmark-json` writes it, with the plugin's machine_info.perf."""
    perf = {"device": "cuda" if gpu else "cpu", "torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0"}
    perf |= {"cpu_model": "Intel(R) Xeon(R) Processor", "cpu_count": 16}
    if gpu:
        perf["gpu"] = {
            "name": gpu,
            "count": 1,
            "capability": "9.0",
            "memory_gib": 79.2,
            "driver": "580.159.04",
        }
    data = {
        "machine_info": {"python_version": "3.12.3", "perf": perf},
        "commit_info": {"id": "0123456789abcdef", "branch": "main", "dirty": False},
        "benchmarks": benchmarks,
        "datetime": "2026-11-22T12:21:29+00:00",
        "version": "5.2.3",
    }
    path.write_text(json.dumps(data))
    return path


def attention_results() -> list[dict]:
    """Two providers over the fixed_tokens sweep's seqs at head dim 64, causal, forward; GPU figures."""
    shapes = [s for s in SWEEPS["fixed_tokens"] if s.head_dim == 64 and s.causal]
    return [
        bench(
            f"perf/test_attention.py::test_attention[bf16-forward-{shape}-{provider}]",
            shape.seq / 1000 * factor,
            provider=provider,
            mode="forward",
            **shape.as_extra_info(torch.bfloat16),
            tflops=100 / factor,
            peak_memory_bytes=shape.seq * 2**20 * factor,
        )
        for shape in shapes
        for provider, factor in (("naive", 2.0), ("sdpa_flash", 1.0))
    ]


def scaling_results() -> list[dict]:
    """The naive scaling suite as the CPU runs it: no peak memory (the CPU allocator keeps no count)."""
    shapes = [s for s in SWEEPS["naive_scaling"] if s.head_dim == 16 and s.seq in (256, 1024)]
    return [
        bench(
            f"perf/test_attention_scaling.py::test_naive_attention_scaling[fp32-{shape}-{provider}]",
            shape.seq / 100,
            suite="attention_scaling",
            provider=provider,
            **shape.as_extra_info(torch.float32),
            tflops=0.01,
            peak_memory_bytes=None,
        )
        for shape in shapes
        for provider in ("naive", "naive_compiled")
    ]


def end_to_end_results() -> list[dict]:
    return [
        bench(
            f"perf/test_end_to_end.py::test_train_step[sdpa-{preset}-{precision}-ctx512-warm2]",
            ms,
            preset=preset,
            impl="sdpa",
            context=512,
            batch=4,
            mode="train_step",
            precision=precision,
            suite="end_to_end",  # what the bench fixture records; results before it record none
            warmup_steps=2,
            tokens_per_s=2048 / ms * 1e3,
        )
        for preset, precision, ms in (("small", "fp32", 48), ("small", "bf16", 34), ("2.7b", "bf16", 160))
    ]


def step_precision_results() -> list[dict]:
    return [
        bench(
            f"perf/test_mixed_precision.py::test_train_step_precision[tiny-ctx128-{precision}]",
            ms,
            suite="step_precision",
            preset="tiny",
            context=128,
            precision=precision,
        )
        for precision, ms in (("fp32", 72.0), ("bf16", 809.0))
    ]


def allreduce_results() -> list[dict]:
    return [
        bench(
            f"perf/test_allreduce.py::test_allreduce[gloo-world{world}-{label}]",
            size / 1e6,
            suite="allreduce",
            backend="gloo",
            world_size=world,
            size_bytes=size,
            algbw_gbps=1.0,
            busbw_gbps=2 * (world - 1) / world,
        )
        for world in (2, 4)
        for label, size in (("1MiB", 2**20), ("10MiB", 10 * 2**20))
    ]


def data_parallel_results() -> list[dict]:
    setup = dict(
        suite="data_parallel", preset="tiny", world_size=2, backend="gloo", batch_per_rank=2, context=128
    )
    cases = (("single", None, 100.0, 0.0), ("naive", None, 150.0, 50.0), ("bucketed", 1.0, 110.0, 10.0))
    return [
        bench(
            f"perf/test_data_parallel.py::test_data_parallel_step[tiny-{variant}{bucket or ''}]",
            ms,
            variant=variant,
            bucket_size_mb=bucket,
            comm_overhead_ms=overhead,
            comm_share=overhead / ms,
            **setup,
        )
        for variant, bucket, ms, overhead in cases
    ]


def matmul_results() -> list[dict]:
    """A suite the report tabulates but does not plot."""
    return [
        bench(
            f"perf/test_matmul.py::test_matmul[n512-{mode}]",
            ms,
            suite="matmul",
            mode=mode,
            n=512,
            rel_error=1e-6,
        )
        for mode, ms in (("fp32", 4.0), ("bf16", 9.0))
    ]


def run_report(capsys, *argv) -> tuple[int, str, str]:
    code = report.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def pngs(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.png")}


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


# --------------------------------------------------------------------------- against a baseline
def comparison_files(tmp_path: Path) -> tuple[Path, Path]:
    names = [f"perf/test_matmul.py::test_matmul[n{n}-fp32]" for n in (256, 512, 1024, 128)]
    base = [bench(names[0], 10.0), bench(names[1], 10.0), bench(names[2], 10.0)]
    base.append(bench(names[3], 10.0, host_ms=9.5))  # the host takes 95% of a call: host-bound
    now = [bench(names[0], 12.0), bench(names[1], 8.0), bench(names[2], 10.1), bench(names[3], 11.5)]
    now.append(bench("perf/test_matmul.py::test_matmul[n2048-fp32]", 5.0))
    return write_results(tmp_path / "base.json", base), write_results(tmp_path / "now.json", now)


def test_baseline_table_shows_medians_ratio_and_verdict(tmp_path, capsys):
    baseline, current = comparison_files(tmp_path)
    out = tmp_path / "report"
    assert run_report(capsys, current, "--baseline", baseline, "--out", out)[0] == 0
    md = (out / "report.md").read_text()
    lines = md.splitlines()
    rows = [
        line for line in lines if line.startswith("| `test_matmul.py::test_matmul[n") and "| 10 |" in line
    ]
    # The slowest first.
    assert rows == [
        "| `test_matmul.py::test_matmul[n256-fp32]` | 10 | 12 | 1.200 | - | - | - | slower (wall) |",
        "| `test_matmul.py::test_matmul[n128-fp32]` | 10 | 11.5 | 1.150 | - | - | - "
        "| host-bound slower (wall) |",
        "| `test_matmul.py::test_matmul[n1024-fp32]` | 10 | 10.1 | 1.010 | - | - | - | unchanged |",
        "| `test_matmul.py::test_matmul[n512-fp32]` | 10 | 8 | 0.800 | - | - | - | faster (wall) |",
    ]
    assert (
        "4 benchmarks in both runs: 1 slower, 1 faster, 1 unchanged, 1 host-bound slower, 0 host noise, "
        "0 clock moved; "
        "not compared: 1 new; 4 judged on wall time alone" in md
    )
    new = lines[lines.index("### New (not in the baseline)") :]
    assert "| `test_matmul.py::test_matmul[n2048-fp32]` |" in new
    assert "](baseline_ratios.png)" in md and "baseline_ratios.png" in pngs(out)
    page = (out / "report.html").read_text()
    assert '<tr class="slower"><td><code>test_matmul.py::test_matmul[n256-fp32]</code></td>' in page
    assert '<tr class="faster"><td><code>test_matmul.py::test_matmul[n512-fp32]</code></td>' in page
    assert "<th>baseline</th>" in page


def test_gpu_time_is_compared_beside_wall_time(tmp_path, capsys):
    """A host-bound step 10% faster on the wall clock whose GPU does 10% more: slower on GPU time."""
    name, steady = "perf/test_end_to_end.py::test_train_step[sdpa-small-bf16]", "perf/test_matmul.py::x"
    gpu = {"gpu_calls": 5, "gpu_ms_iqr": 0.01, "gpu_ms_stddev": 0.01}
    base = [bench(name, 30.0, host_ms=29.0, gpu_ms=10.0, **gpu), bench(steady, 5.0)]
    now = [bench(name, 27.0, host_ms=26.0, gpu_ms=11.0, gpu_busy_share=0.41, **gpu), bench(steady, 5.0)]
    baseline = write_results(tmp_path / "base.json", base)
    current = write_results(tmp_path / "now.json", now)
    out = tmp_path / "report"
    assert run_report(capsys, current, "--baseline", baseline, "--out", out)[0] == 0
    md = (out / "report.md").read_text()
    assert (
        "| `test_end_to_end.py::test_train_step[sdpa-small-bf16]` | 30 | 27 | 0.900 | 10 | 11 | 1.100 " in md
    )
    assert "| slower (gpu) |" in md
    assert "| `test_matmul.py::x` | 5 | 5 | 1.000 | - | - | - | unchanged |" in md
    assert "1 judged on wall time alone" in md
    # The table of all benchmarks: median, spread, GPU ms and busy share.
    everything = md[md.index("## All benchmarks") :]
    assert "| `test_end_to_end.py::test_train_step[sdpa-small-bf16]` | 27 | 1.0% | 11 | 41% |" in everything
    assert '<tr class="slower"><td><code>test_end_to_end.py' in (out / "report.html").read_text()
    assert "baseline_ratios.png" in pngs(out)


def test_threshold_decides_what_is_marked(tmp_path, capsys):
    baseline, current = comparison_files(tmp_path)
    out = tmp_path / "report"
    assert run_report(capsys, current, "--baseline", baseline, "--out", out, "--threshold", "0.4")[0] == 0
    assert "0 slower, 0 faster, 4 unchanged, 0 host-bound slower" in (out / "report.md").read_text()


# --------------------------------------------------------------------------- refusals: exit 2
def refused(capsys, *argv) -> str:
    code, out, err = run_report(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("perf.tools.report: error: "), err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ('{"machine_info": {"perf": {}}, "benchmarks": [{"fullname"', "not valid JSON, truncated or damaged"),
        ("", "not valid JSON"),
        ('{"name": "a package.json, say"}', "not a result file of pytest-benchmark"),
        ("[1, 2]", "not a result file of pytest-benchmark"),
        ('{"machine_info": {"perf": {}}, "benchmarks": []}', "no benchmarks in it"),
        ('{"benchmarks": [{"fullname": "x", "stats": {"median": 1.0}}]}', "no machine_info.perf"),
    ],
    ids=["missing", "truncated", "empty-file", "not-benchmarks", "list", "no-benchmarks", "no-machine"],
)
@pytest.mark.parametrize("role", ["result", "--baseline"])
def test_bad_file_is_refused_naming_it(tmp_path, capsys, content, message, role):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    good = write_results(tmp_path / "good.json", matmul_results())
    out = tmp_path / "report"
    argv = [bad, "--baseline", good] if role == "result" else [good, "--baseline", bad]
    err = refused(capsys, *argv, "--out", out)
    assert f"{role} {bad}: {message}" in err
    assert not out.exists()


@pytest.mark.parametrize("gpu", ["NVIDIA H200", None])
def test_baseline_from_another_processor_is_refused(tmp_path, capsys, gpu):
    current = write_results(tmp_path / "now.json", matmul_results())
    other = write_results(tmp_path / "other.json", matmul_results(), gpu=gpu)
    out = tmp_path / "report"
    err = refused(capsys, current, "--baseline", other, "--out", out)
    assert f"result {current} was recorded on {H100}, --baseline {other} on " in err
    assert "not comparable" in err
    assert not out.exists()


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_out_that_cannot_be_written_is_refused(tmp_path, capsys, where):
    result = write_results(tmp_path / "run.json", matmul_results())
    blocker = tmp_path / "taken"
    blocker.write_text("not a folder")
    out = blocker if where == "a file" else blocker / "report"
    err = refused(capsys, result, "--out", out)
    assert f"--out {out}: " in err
    assert blocker.read_text() == "not a folder"


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--threshold", "0"], "--threshold 0: accepted is a fraction > 0 and < 1"),
        (["--z", "inf"], "--z inf: accepted is a positive number"),
        (["--color"], "unrecognized arguments: --color"),
    ],
)
def test_bad_option_is_refused(tmp_path, capsys, option, message):
    result = write_results(tmp_path / "run.json", matmul_results())
    assert message in refused(capsys, result, "--out", tmp_path / "report", *option)


def test_missing_matplotlib_is_refused_before_writing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(figures, "matplotlib_missing", lambda: "matplotlib is not installed")
    result = write_results(tmp_path / "run.json", matmul_results())
    err = refused(capsys, result, "--out", tmp_path / "report")
    assert "matplotlib is not installed" in err
    assert not (tmp_path / "report").exists()


def test_module_entry_point_refuses_with_exit_2(tmp_path):
    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"benchmarks": [')
    command = [sys.executable, "-m", "perf.tools.report", str(truncated), "--out", str(tmp_path / "report")]
    refusal = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert refusal.returncode == 2
    assert refusal.stderr.startswith(f"perf.tools.report: error: result {truncated}: not valid JSON")
    assert "Traceback" not in refusal.stderr
    assert not (tmp_path / "report").exists()


def test_a_benchmark_that_moved_is_explained_kernel_by_kernel(tmp_path, capsys):
    name = "perf/test_end_to_end.py::test_train_step[sdpa-small-bf16-ctx512-warm2]"
    gemm = {"kernel": "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", "launches": 24.0, "us": 9000.0}
    added = {"kernel": "sin_kernel_cuda", "launches": 12.0, "us": 310.0}
    baseline = write_results(tmp_path / "base.json", [bench(name, 10.0, gpu_ms=9.3, gpu_kernels=[gemm])])
    current = write_results(
        tmp_path / "new.json", [bench(name, 12.0, gpu_ms=9.61, gpu_kernels=[gemm, added])]
    )
    out = tmp_path / "report"
    # --noise off: judged at --threshold, whatever noise file this repository keeps for the H100
    assert run_report(capsys, current, "--baseline", baseline, "--out", out, "--noise", "off")[0] == 0
    md = (out / "report.md").read_text()
    inside = md[md.index("### What changed inside") :]
    assert "| +310.00 | - | 310.00 | - -\\> 12 | sin_kernel_cuda |" in inside  # Markdown escapes ">"
    assert "nvjet" not in inside  # unchanged kernels are left out
    old = write_results(tmp_path / "old.json", [bench(name, 10.0, gpu_ms=9.3)])
    assert run_report(capsys, current, "--baseline", old, "--out", out, "--noise", "off")[0] == 0
    assert "No kernel breakdown: the baseline has no kernel table" in (out / "report.md").read_text()
