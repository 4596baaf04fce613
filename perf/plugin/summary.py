"""What the terminal says about a run: where and how it runs, after collection, and at its end the
derived figures of every benchmark, the suites' tables (perf/tables/), out-of-memory skips and notes.

Said only when benchmarks were collected, and under a launcher only by the rank that records (0).
"""

from __future__ import annotations

import sys

import pytest
import torch

from perf import harness
from perf.harness import clocks, gpu_time
from perf.plugin import result_files
from perf.tables.summary import SUMMARY_TABLES
from perf.tiers import TIERS
from perf.workloads import launched_session


def _collected_benchmarks(items: list[pytest.Item]) -> bool:
    return any("bench" in getattr(item, "fixturenames", ()) for item in items)


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    """Said after collection, and only when benchmarks were collected: where they run and how."""
    # --collect-only -q lists node ids and nothing else: no header, no notes at its end.
    quiet_list = config.option.collectonly and config.option.verbose < 0
    config.perf_collected = (
        _collected_benchmarks(items) and launched_session.records_here() and not quiet_list
    )
    config.perf_attention_collected = any(
        "attention_provider" in getattr(i, "fixturenames", ()) for i in items
    )
    if not config.perf_collected:
        return []
    device, tier = config.perf_device, config.perf_tier
    where = harness.gpu_name(device) or f"CPU ({harness.machine_info(device)['cpu_model']})"
    lines = [
        f"perf: device {device} [{where}], torch {torch.__version__}, tier '{tier.name}' "
        f"(presets {','.join(tier.presets)}; precisions {','.join(tier.precisions)}; "
        f"contexts {','.join(map(str, tier.contexts))}; warm-ups {','.join(map(str, tier.warmups))})"
    ]
    if config.perf_attention_collected:
        shapes = tier.attention_shapes
        lines.append(
            f"perf: attention: sweeps {','.join(tier.attention_sweeps)} ({len(shapes)} shape"
            f"{'' if len(shapes) == 1 else 's'}; seqs "
            f"{','.join(map(str, sorted({s.seq for s in shapes})))}; head dims "
            f"{','.join(map(str, sorted({s.head_dim for s in shapes})))}); providers "
            f"{','.join(tier.attention_providers)}; modes {','.join(tier.attention_modes)}"
        )
    if not harness.NVTX_AVAILABLE:
        config.perf_notes.append("nvtx is not importable: no NVTX ranges for nsys (pip install nvtx)")
    launch = launched_session.header()
    if launch:
        lines.append(f"perf: {launch}")
    lines += [f"perf: {note}" for note in _cpu_notes(config) + config.perf_notes]
    return lines


def _cpu_notes(config: pytest.Config) -> list[str]:
    if config.perf_device.type == "cuda":
        return []
    default, tier = TIERS["default"], config.perf_tier
    presets = [p for p in default.presets if p not in tier.presets]
    precisions = [p for p in default.precisions if p not in tier.precisions]
    left_out = f"GPU presets not run: {', '.join(presets)}; " if presets else ""
    if precisions:
        left_out += (
            f"model steps and attention not in {', '.join(precisions)} (emulated by most CPUs; --precisions "
            "adds it; the mixed-precision, matmul and collective suites run it); "
        )
    providers = [p for p in default.attention_providers if p not in tier.attention_providers]
    if providers and getattr(config, "perf_attention_collected", False):
        left_out += f"attention providers not run: {', '.join(providers)} (--attention-providers adds them); "
    return [
        "no CUDA GPU in use: benchmarks run on the CPU at small sizes; "
        + left_out
        + "peak memory, MFU, CUDA-event comparisons, CUDA graphs, host-to-device copies and the TF32, "
        "reduced-precision and fp16-accumulation matmul switches are GPU-only and reported as skipped (with "
        "the reason) or empty"
    ]


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    session = getattr(config, "_benchmarksession", None)
    results = [b for b in (session.benchmarks if session else []) if b and b.extra_info.get("median_ms")]
    tr = terminalreporter
    if not getattr(config, "perf_collected", False):
        return
    infos = [b.extra_info for b in results]
    notes = _cpu_notes(config) + config.perf_notes + gpu_time.run_notes(infos) + clocks.run_note(infos)
    notes += _stored_tuning_notes() + result_files.run_note(config)
    if results:
        tr.section("derived figures (median)", sep="-")
        tr.write_line(
            f"{'benchmark':<64} {'ms':>10} {'GPU ms':>10} {'busy':>5} {'tokens/s':>11} {'TFLOP/s':>8} "
            f"{'MFU':>6} {'peak GiB':>9} {'host ms':>8}"
        )
        for b in results:
            x = b.extra_info
            peak = x.get("peak_memory_bytes")
            tr.write_line(
                f"{b.name[:64]:<64} {x['median_ms']:>10.3f} {_fmt(x.get('gpu_ms'), '.3f'):>10} "
                f"{_fmt(x.get('gpu_busy_share'), '.0%'):>5} {_fmt(x.get('tokens_per_s'), '.0f'):>11} "
                f"{_fmt(x.get('tflops'), '.1f'):>8} {_fmt(x.get('mfu'), '.1%'):>6} "
                f"{_fmt(peak / 2**30 if peak else None, '.2f'):>9} {_fmt(x.get('host_ms'), '.1f'):>8}"
            )
        interleaved = [b for b in results if b.extra_info.get("ratio_to_baseline")]
        if interleaved:
            tr.section("project model / plain PyTorch reference, interleaved rounds", sep="-")
            tr.write_line(f"{'benchmark':<64} {'ms':>10} {'ref ms':>10} {'ratio':>6}")
            for b in interleaved:
                x = b.extra_info
                tr.write_line(
                    f"{b.name[:64]:<64} {x['median_ms']:>10.3f} {x['baseline_median_ms']:>10.3f} "
                    f"{x['ratio_to_baseline']:>6.3f}"
                )
    for title, table in SUMMARY_TABLES:
        lines = table(infos)
        if lines:
            tr.section(title, sep="-")
            for line in lines:
                tr.write_line(line)
    if config.perf_out_of_memory:
        tr.section("out of memory: recorded as skips, the sweeps went on", sep="-")
        for message in config.perf_out_of_memory:
            tr.write_line(message)
    if notes:
        tr.section("perf notes", sep="-")
        for note in notes:
            tr.write_line(note)


def _stored_tuning_notes() -> list[str]:
    """Which stored Triton configurations the run launched, once the Triton kernels ran (imported
    here only then: importing Triton's kernels early would fix the interpreter setting)."""
    tuning = sys.modules.get("kernels.flash_attention_triton.stored")
    return [f"flash_triton: {line}" for line in tuning.describe()] if tuning else []


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
