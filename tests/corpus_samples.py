"""Made-up runs of a same-code corpus: result documents as the suite writes them, each benchmark's figures
and kernels moved from run to run by a known noise (a clock common to the run, and each benchmark's own)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from perf.storage import compact_json

COMMIT = "a" * 40
GPU = "NVIDIA H200"
# Benchmarks: node id -> their kernels' us per call (the GPU time is their sum; the wall 2% more).
BENCHMARKS = {
    f"perf/test_attention.py::test_attention[cell{i}]": {
        "forward_kernel": 300.0 + 40 * i,
        "backward_kernel": 900.0,
        "row_dot": 60.0,
    }
    for i in range(6)
} | {"perf/test_matmul.py::test_matmul[n8192-bf16]": {"nvjet_gemm": 1500.0}}


def document(run: int, *, clock_sd: float, own_sd: float, seed: int, commit: str = COMMIT, gpu: str = GPU,
             tier: str = "pr", dirty: bool = False) -> dict:  # fmt: skip
    """Run number `run` of a corpus: every benchmark at the run's clock (log-normal, `clock_sd`) and its
    own noise (`own_sd`), each kernel with a third of that noise of its own."""
    rng = random.Random(seed * 1000 + run)
    clock = math.exp(rng.gauss(0, clock_sd))
    benchmarks = []
    for name, kernels in BENCHMARKS.items():
        own = clock * math.exp(rng.gauss(0, own_sd))
        table = [
            {"kernel": k, "launches": 1.0, "us": us * own * math.exp(rng.gauss(0, own_sd / 3))}
            for k, us in kernels.items()
        ]
        gpu_ms = sum(row["us"] for row in table) / 1e3
        benchmarks.append(
            {
                "fullname": name,
                "name": name.split("::")[-1],
                "stats": {
                    "median": gpu_ms * 1.02e-3,
                    "iqr": gpu_ms * 1e-6,
                    "stddev": gpu_ms * 1e-6,
                    "rounds": 20,
                },
                "extra_info": {
                    "gpu_ms": gpu_ms,
                    "gpu_method": "rounds",
                    "gpu_calls": 20,
                    "gpu_ms_iqr": gpu_ms * 1e-3,
                    "gpu_kernels": table,
                },
            }
        )
    return {
        "machine_info": {"perf": {"gpu": {"name": gpu, "driver": "580.159.04"}, "torch": "2.11.0"}},
        "commit_info": {"id": commit, "dirty": dirty},
        "datetime": f"2026-11-28T10:{run:02d}:00+00:00",
        "perf": {"tier": tier, "selected": sorted(BENCHMARKS)},
        "benchmarks": benchmarks,
    }


def write_set(folder: Path, runs: int, *, clock_sd: float = 0.01, own_sd: float = 0.002, seed: int = 0,
              first: int = 1, compact: bool = True, **kwargs) -> list[Path]:  # fmt: skip
    """`runs` run files NN.json in `folder` (as a stored corpus set, compact), numbered from `first`."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(first, first + runs):
        data = document(i, clock_sd=clock_sd, own_sd=own_sd, seed=seed, **kwargs)
        path = folder / f"{i:02d}.json"
        path.write_bytes(compact_json(data) if compact else json.dumps(data).encode())
        paths.append(path)
    return paths
