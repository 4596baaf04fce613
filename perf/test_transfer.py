"""Host-to-device copies: bandwidth from pinned and pageable memory, and a copy hidden behind compute.

Parametrized by the tier (perf/tiers.py): bytes per copy; host memory and schedule here. The end of
the run sets pinned beside pageable per size, and the overlapped schedule beside the serial one
(perf/tables/memory.py).
"""

from __future__ import annotations

import pytest
import torch

from perf.cases.transfer import HOST_MEMORY, byte_size_label
from perf.workloads.transfer import SCHEDULES, CopyComputeOverlap, balanced_matmuls, event_ms, host_to_device

# Untimed calls before timing: first calls pay for lazy set-up (the driver's staging buffers for
# pageable copies, cuBLAS handles for the matmuls).
WARMUP_STEPS = 2


def _needs_cuda(device: torch.device) -> None:
    if device.type != "cuda":
        pytest.skip(f"needs a CUDA device: host-to-device copies copy into GPU memory; running on {device}")


@pytest.mark.parametrize("host_memory", HOST_MEMORY)
def test_host_to_device(bench, device: torch.device, transfer_size: int, host_memory: str):
    _needs_cuda(device)
    transfer = host_to_device(transfer_size, host_memory, device)
    bench.benchmark.group = f"host to device {byte_size_label(transfer_size)}"
    bench.run(
        transfer,
        warmup_steps=WARMUP_STEPS,
        suite="transfer",
        host_memory=host_memory,
        transfer_bytes=transfer_size,
    )


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_copy_compute_overlap(bench, device: torch.device, schedule: str):
    """A pinned copy and matmuls of about the copy's time: one after the other, or at once.

    copy_ms and compute_ms are each one measured alone with CUDA events; overlapped at best
    takes the longer of the two, serial their sum.
    """
    _needs_cuda(device)
    overlap = CopyComputeOverlap(device, matmuls=balanced_matmuls(device))
    copy_ms, compute_ms = event_ms(overlap.copy), event_ms(overlap.compute)
    bench.benchmark.group = "copy-compute overlap"
    bench.run(
        overlap.step(schedule),
        work=overlap.work,
        warmup_steps=WARMUP_STEPS,
        gpu_isolated=True,  # a copy on a side stream: each call's work is told apart by draining
        suite="overlap",
        schedule=schedule,
        copy_bytes=overlap.copy_bytes,
        matmul_n=overlap.matmul_n,
        matmuls=overlap.matmuls,
        copy_ms=copy_ms,
        compute_ms=compute_ms,
    )
