"""The gate's verdict as a person reads it (perf/tools/reporting/verdict.py, perf/tools/judging/outcome.py):
the decision and why first, one category per benchmark, the same counts as the report, thresholds as judged,
short lines, lists on request, and the Markdown summary for GitHub's job summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perf.tools import report
from perf.tools.judging.noise_thresholds import FORMAT
from perf.tools.reading.kernel_changes import explanation_lines
from tests.gate_files import H100, run_gate, section, short, stats, write_results

STEP = "perf/test_end_to_end.py::test_train_step"
TRAIN_STEPS = [
    f"{STEP}[{attention}-{preset}-{precision}-ctx512-warm2]"
    for attention in ("sdpa", "flash_triton")
    for preset in ("small", "large")
    for precision in ("fp32", "bf16")
]
# The other cells of a pr-tier run (docs/gate.md#the-pr-tier), each with its own kernels.
OTHER_PR_CELLS = [
    *(f"perf/test_matmul.py::test_matmul[n8192-{mode}]" for mode in ("fp32", "tf32", "bf16", "fp16")),
    *(
        f"perf/test_attention.py::test_attention[bf16-forward_backward-{shape}-d64-causal-{provider}]"
        for shape in ("b16-h32-s1024", "b4-h32-s4096", "b1-h32-s16384")
        for provider in ("flash_triton", "sdpa_flash", "sdpa_cudnn")
    ),
    "perf/test_compile.py::test_compile_gain[ctx512-2.7b-bf16-train_step-eager]",
    "perf/test_compile.py::test_compile_gain[ctx512-2.7b-bf16-train_step-compiled]",
    "perf/test_cuda_graphs.py::test_train_step_cuda_graph[bf16-ctx512-small-eager]",
    "perf/test_cuda_graphs.py::test_train_step_cuda_graph[bf16-ctx512-small-cuda_graph]",
    "perf/test_transfer.py::test_host_to_device[64MiB-pinned]",
    "perf/test_timing_agreement.py::test_timing_agreement[matmul_bf16_1ms]",
    *(
        f"perf/test_weighted_sum.py::test_weighted_sum[{p}-rows262144-{provider}-{mode}]"
        for p in ("fp32", "bf16")
        for provider in ("triton", "torch")
        for mode in ("forward", "forward_backward")
    ),
]
PR_CELLS = [*TRAIN_STEPS, *OTHER_PR_CELLS]
# Cells of the default tier only: in a default-tier baseline, outside a pr run's selection.
DEFAULT_ONLY = [
    f"perf/test_end_to_end.py::test_{mode}[sdpa-{preset}-bf16-ctx512-warm2]"
    for mode in ("forward", "forward_backward")
    for preset in ("small", "large", "2.7b")
]
GEMM = "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT"  # the GEMM of the slowed layer


def kernels(gpu_ms: float, gemm_launches: float = 24.0, gemm_share: float = 0.6) -> list[dict]:
    """A kernel table whose rows add up to `gpu_ms`: one GEMM, attention and elementwise kernels."""
    us = gpu_ms * 1e3
    return [
        {"kernel": GEMM, "launches": gemm_launches, "us": round(us * gemm_share, 3)},
        {"kernel": "attn_fwd_bwd_kernel", "launches": 12.0, "us": round(us * 0.25, 3)},
        {"kernel": "vectorized_elementwise_kernel", "launches": 80.0, "us": round(us * 0.15, 3)},
    ]


def extra(gpu_ms: float, table: list[dict]) -> dict:
    """extra_info of a GPU-bound benchmark: steady GPU time over 20 profiled calls and its kernels."""
    return {
        "gpu_ms": gpu_ms,
        "gpu_ms_iqr": gpu_ms * 0.002,
        "gpu_ms_stddev": gpu_ms * 0.002,
        "gpu_calls": 20,
        "gpu_kernels": table,
    }


def with_run(path: Path, commit: str, tier: str, selected: list[str] | None = None) -> Path:
    """The result file with what pytest-benchmark and the plugin add: commit, date, tier, selection."""
    data = json.loads(path.read_text())
    data["commit_info"] = {"id": commit, "branch": "main", "dirty": tier == "pr", "project": "lm"}
    data["datetime"] = "2026-11-26T11:27:47.698779+00:00" if tier == "pr" else "2026-11-24T19:13:33+00:00"
    data["perf"] = {"tier": tier, **({"selected": selected} if selected is not None else {})}
    path.write_text(json.dumps(data))
    return path


def noise_file(path: Path, names: list[str]) -> Path:
    """The runner's noise: every benchmark steady (0.3% spread): its GPU time judged at the 1.5% floor."""
    benchmarks = {name: {"gpu_spread": 0.003, "wall_spread": 0.01} for name in names}
    document = {"format": FORMAT, "gpu": H100, "k": 2.0, "floor": 0.015, "runs": [{}] * 3}
    path.write_text(json.dumps({**document, "benchmarks": benchmarks}))
    return path


def failing_pull_request(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A default-tier baseline and a pr-tier run in which one layer slowed down: every training step's GPU
    time up 5%, its GEMM launched twice as often; the wall time up 4%, within 5%; the rest unchanged."""
    medians = {name: 0.020 + i * 1e-3 for i, name in enumerate([*PR_CELLS, *DEFAULT_ONLY])}
    gpu_ms = {name: m * 1e3 * 0.9 for name, m in medians.items()}
    base_extra = {name: extra(ms, kernels(ms)) for name, ms in gpu_ms.items()}
    baseline = write_results(
        tmp_path / "0007_h100-default.json",
        {name: stats(m, 0.01, seed=i) for i, (name, m) in enumerate(medians.items())},
        extra=base_extra,
    )
    current_stats, current_extra = {}, {}
    for i, name in enumerate(PR_CELLS):
        slowed = name in TRAIN_STEPS
        current_stats[name] = stats(medians[name] * (1.04 if slowed else 1.0), 0.01, seed=100 + i)
        ms = gpu_ms[name]
        if slowed:
            # The GEMM's time and launches doubled: 60% of the step's GPU time becomes 65%.
            table = kernels(ms, 48.0, 0.6 + 0.05)
            current_extra[name] = extra(ms * 1.05, table[:1] + kernels(ms)[1:])
        else:
            current_extra[name] = base_extra[name]
    current = write_results(tmp_path / "current.json", current_stats, extra=current_extra)
    return (
        with_run(baseline, "ce4505d6a57f476cceacfa6481e735567f6ad9fa", "default"),
        with_run(current, "8565315037526051a218ff2d6a2efb1189df3206", "pr", PR_CELLS),
        noise_file(tmp_path / "noise.json", list(medians)),
    )


# --------------------------------------------------------------------------- what failed and why, first
def test_a_failing_pull_request_says_what_failed_and_why_in_its_first_25_lines(tmp_path, capsys):
    baseline, current, noise = failing_pull_request(tmp_path)
    code, out, err = run_gate(capsys, "--baseline", baseline, "--current", current, "--noise", noise)
    assert (code, err) == (1, "")
    head = "\n".join(out.splitlines()[:25])
    assert "FAIL" in head
    for name in TRAIN_STEPS:
        assert name.split("::")[-1] in head, name
    assert GEMM in head
    assert sorted(section(out, "regressions")) == sorted(short(name) for name in TRAIN_STEPS)
    # Why, before the regressions are listed: the kernel that grew in all of them, launched more often.
    lines = out.splitlines()
    why = next(i for i, line in enumerate(lines) if line.startswith("why: "))
    assert why < next(i for i, line in enumerate(lines) if line.startswith("regressions ("))
    first = lines[why + 1]
    assert (
        first.startswith(f"  in {len(TRAIN_STEPS)}: +")
        and f"launched more in {len(TRAIN_STEPS)}: {GEMM}" in first
    )


def test_the_verdict_keeps_to_120_characters_and_says_a_shared_reason_once(tmp_path, capsys):
    baseline, current, noise = failing_pull_request(tmp_path)
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", current, "--noise", noise)
    assert code == 1
    lines = out.splitlines()
    assert [line for line in lines if len(line) > 120 and str(tmp_path) not in line] == []
    assert lines[1:5] == [
        f"baseline: {baseline}",
        "  commit ce4505d6a57f (clean), recorded 2026-11-24 19:13 UTC, NVIDIA H100 80GB HBM3, tier default",
        f"current:  {current}",
        "  commit 856531503752 (with uncommitted changes), recorded 2026-11-26 11:27 UTC, "
        "NVIDIA H100 80GB HBM3, tier pr",
    ]
    # A pr run against a default-tier baseline: the cells it did not select are counted, not missing.
    assert (
        f"not compared: {len(DEFAULT_ONLY)} outside the current file's selection (--list missing names them)"
        in lines
    )
    assert not any(name in out for name in DEFAULT_ONLY)
    # Without the baseline's kernel tables, the reason is said once for all eight.
    old = json.loads(baseline.read_text())
    for entry in old["benchmarks"]:
        del entry["extra_info"]["gpu_kernels"]
    baseline.write_text(json.dumps(old))
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", current, "--noise", noise)
    assert out.count("without a kernel breakdown") == 1
    assert "  8 without a kernel breakdown: the baseline has no kernel table" in out


# --------------------------------------------------------------------------- one count per benchmark
def mixed_pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A baseline and a run whose benchmarks each moved in one way: slower on GPU time and faster on the
    wall, faster on both, host-bound slower, a 3% GPU slowdown beyond a noise file's 1.5% floor; one
    renamed (outside the run's selection), one selected but without a result, one new."""
    names = [f"perf/test_matmul.py::test_matmul[n{n}-bf16]" for n in (512, 1024, 2048, 4096, 8192)]
    both, faster, host, small, steady = names
    renamed, failed = "perf/test_memory.py::test_peak_memory[bf16-2.7b]", "perf/test_transfer.py::test_x[1]"
    base_ms = {name: 10.0 for name in [*names, renamed, failed]}
    now_ms = {both: 9.0, faster: 8.0, host: 11.5, small: 10.0, steady: 10.0}
    now_ms["perf/test_memory.py::test_peak_memory[bf16-2.7b-default]"] = 10.0
    base_gpu = {name: 5.0 for name in base_ms}
    now_gpu = {name: 5.0 for name in now_ms} | {both: 5.5, faster: 4.0, small: 5.15}
    base_extra = {name: extra(base_gpu[name], kernels(base_gpu[name])) for name in base_ms}
    base_extra[host] |= {"median_ms": 10.0, "host_ms": 9.5}  # the host busy for 95% of a call
    now_extra = {name: extra(now_gpu[name], kernels(now_gpu[name])) for name in now_ms}
    baseline = write_results(
        tmp_path / "base.json",
        {n: stats(ms / 1e3, 0.01, seed=i) for i, (n, ms) in enumerate(base_ms.items())},
        extra=base_extra,
    )
    current = write_results(
        tmp_path / "now.json",
        {n: stats(ms / 1e3, 0.01, seed=9 + i) for i, (n, ms) in enumerate(now_ms.items())},
        extra=now_extra,
    )
    with_run(current, "8565315037526051a218ff2d6a2efb1189df3206", "pr", [*now_ms, failed])
    return baseline, current, noise_file(tmp_path / "noise.json", list(base_ms))


def test_a_benchmark_counts_once_and_the_gate_and_the_report_count_alike(tmp_path, capsys):
    baseline, current, noise = mixed_pair(tmp_path)
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", current, "--noise", noise)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "FAIL: 2 regressions (2 in gpu time), 5 benchmarks compared"
    counts = (
        "2 regressed, 0 did not persist, 1 host-bound slower, 0 host noise, 0 clock moved, 1 faster, "
        "1 unchanged"
    )
    assert f"5 compared: {counts}" in lines
    # Slower on GPU time and faster on the wall: a regression, its faster wall time beside it.
    assert section(out, "regressions") == ["test_matmul[n512-bf16]", "test_matmul[n4096-bf16]"]
    assert section(out, "improvements") == ["test_matmul[n1024-bf16]"]
    assert "this run's selection" not in out
    not_compared = "not compared: 1 new, 1 missing, 1 outside the current file's selection"
    assert f"{not_compared} (--list new,missing names them)" in lines

    assert (
        report.main(
            [str(current), "--baseline", str(baseline), "--noise", str(noise), "--out", str(tmp_path / "r")]
        )
        == 0
    )
    md = (tmp_path / "r" / "report.md").read_text()
    assert (
        "5 benchmarks in both runs: 2 slower, 1 faster, 1 unchanged, 1 host-bound slower, 0 host noise, "
        "0 clock moved; "
        f"{not_compared};" in md
    )
    assert (
        "| `test_matmul.py::test_matmul[n512-bf16]` | 10 | 9 | 0.900 | 5 | 5.5 | 1.100 | slower (gpu) |" in md
    )
    assert "| `test_memory.py::test_peak_memory[bf16-2.7b]` | outside the current file's selection: " in md
    assert "| `test_transfer.py::test_x[1]` | missing: selected by the current file, no result" in md
    # Without the noise file both judge the 3% GPU slowdown at 5%: unchanged, in both.
    code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", current, "--noise", "off")
    counted = "1 regressed, 0 did not persist, 1 host-bound slower, 0 host noise, 0 clock moved, 1 faster"
    assert f"{counted}, 2 unchanged" in out
    assert (
        report.main(
            [str(current), "--baseline", str(baseline), "--noise", "off", "--out", str(tmp_path / "r")]
        )
        == 0
    )
    assert (
        "5 benchmarks in both runs: 1 slower, 1 faster, 2 unchanged, 1 host-bound slower"
        in (tmp_path / "r" / "report.md").read_text()
    )


# --------------------------------------------------------------------------- lists on request
def test_lists_name_the_benchmarks_not_compared_on_request(tmp_path, capsys):
    baseline, current, noise = mixed_pair(tmp_path)
    argv = ("--baseline", baseline, "--current", current, "--noise", noise)
    _, out, _ = run_gate(capsys, *argv, "--list", "new,missing")
    assert section(out, "  1 new") == ["perf/test_memory.py::test_peak_memory[bf16-2.7b-default]"]
    assert section(out, "  1 missing") == ["perf/test_transfer.py::test_x[1]"]
    assert section(out, "  1 outside the current file's selection") == [
        "perf/test_memory.py::test_peak_memory[bf16-2.7b]"
    ]
    assert "names them" not in out
    _, out, _ = run_gate(capsys, *argv, "--list", "new")
    assert "(--list missing names them)" in out and "test_x[1]" not in out


@pytest.mark.parametrize("value", ["nope", "new,nope", "New"])
def test_a_list_of_an_unknown_kind_is_refused_in_one_line(tmp_path, capsys, value):
    baseline, current, _ = mixed_pair(tmp_path)
    code, out, err = run_gate(capsys, "--baseline", baseline, "--current", current, "--list", value)
    assert (code, out) == (2, "")
    assert err == (
        f"perf.tools.gate: error: --list {value}: {value.split(',')[-1]!r} is not a kind; accepted is a "
        "comma-separated list of new, missing, wall-only, e.g. --list new,missing\n"
    )


# --------------------------------------------------------------------------- the job summary
def test_markdown_summary_holds_the_decision_the_regressions_their_kernels_and_the_link(tmp_path, capsys):
    baseline, current, noise = failing_pull_request(tmp_path)
    summary = tmp_path / "gate" / "summary.md"
    url = "https://github.com/owner/repo/actions/runs/42"
    argv = ("--baseline", baseline, "--current", current, "--noise", noise)
    code, _, _ = run_gate(capsys, *argv, "--markdown", summary, "--link", url)
    assert code == 1
    md = summary.read_text()
    lines = md.splitlines()
    assert lines[0] == "## GPU gate — FAIL: 8 regressions (8 in gpu time), 35 benchmarks compared"
    assert "| commit | ce4505d6a57f (clean) | 856531503752 (with uncommitted changes) |" in lines
    assert "| tier | default | pr |" in lines
    for name in TRAIN_STEPS:  # whole node ids, as pytest takes them
        assert f"| `{name}` | gpu | " in md and "| 1.5% (floor) |" in md
    kernels_part = md[md.index("### What changed inside the regressions") :]
    assert f"| 24 -\\> 48 | {GEMM} |" in kernels_part
    kept = "The full verdict, the results and the report against the baseline: "
    assert lines[-1] == f"{kept}[this run's artifacts](<{url}>)"
    assert list(summary.parent.iterdir()) == [summary]  # written whole: no temporary file left

    code, _, _ = run_gate(capsys, "--baseline", current, "--current", current, "--markdown", summary)
    md = summary.read_text()
    assert code == 0 and md.startswith("## GPU gate — PASS: no regression, 35 benchmarks compared\n")
    assert "### Regressions" not in md and "The full verdict is in the job's log." in md


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--link", "https://x"], "--link URL goes into the Markdown summary; give --markdown FILE too"),
        (["--markdown", "."], "--markdown .: a folder; give the file to write the summary to"),
    ],
)
def test_bad_markdown_options_are_refused(tmp_path, capsys, option, message):
    baseline, current, _ = mixed_pair(tmp_path)
    code, out, err = run_gate(capsys, "--baseline", baseline, "--current", current, *option)
    assert (code, out) == (2, "")
    assert err == f"perf.tools.gate: error: {message}\n"


def test_a_kernel_heading_too_long_for_the_line_puts_the_gpu_time_under_the_name():
    info = extra(10.0, kernels(10.0))
    slower = extra(10.5, kernels(10.0, 48.0, 0.65))
    name = "test_attention[bf16-forward_backward-b16-h32-s1024-d64-causal-flash_triton]"
    assert explanation_lines(name, info, slower)[0] == (
        f"kernels of {name}: GPU busy time 10.000 -> 10.500 ms per call (+5.0%)"
    )
    wrapped = explanation_lines(name, info, slower, width=118)
    assert wrapped[:2] == [f"kernels of {name}:", "    GPU busy time 10.000 -> 10.500 ms per call (+5.0%)"]
    assert GEMM in wrapped[3]


def test_a_host_bound_wall_slower_with_its_gpu_time_steady_is_host_noise_between_two_files(tmp_path, capsys):
    """Two stored files cannot measure a suspect again: a host-bound benchmark's wall time 1.5x, its GPU time
    the same, is listed as host noise; with its GPU time slower too it is a regression."""
    name = "perf/test_end_to_end.py::test_train_step[sdpa-small-bf16]"
    base_extra = {name: extra(10.0, kernels(10.0)) | {"median_ms": 40.0, "host_ms": 38.0}}
    baseline = write_results(tmp_path / "base.json", {name: stats(0.040, 0.01)}, extra=base_extra)
    for gpu_ms, code_wanted in ((10.0, 0), (11.0, 1)):
        now = write_results(
            tmp_path / f"now{gpu_ms}.json",
            {name: stats(0.060, 0.01, seed=1)},
            extra={name: extra(gpu_ms, kernels(gpu_ms))},
        )
        code, out, _ = run_gate(capsys, "--baseline", baseline, "--current", now, "--noise", "off")
        assert code == code_wanted, out
        if code == 0:
            assert "0 host-bound slower, 1 host noise" in out
            title = "host noise (1, never failing): host-bound, wall slower by more than 25.0% (--host-bound"
            (line,) = [line for line in out.splitlines() if line.startswith("host noise (")]
            assert line.startswith(title)
