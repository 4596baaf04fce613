"""The report command against a baseline (medians, ratios, GPU time, kernels of a benchmark that moved) and
every refusal (exit 2 with one line on stderr and no report), on synthetic result files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perf.tools.reporting import figures
from tests.report_results import (
    H100,
    ROOT,
    bench,
    matmul_results,
    pngs,
    run_report,
    write_results,
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
