"""Synthetic result files for the report's tests, one set per suite, and the report's command line."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from perf.cases.attention import SWEEPS
from perf.tools import report

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
