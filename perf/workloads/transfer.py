"""Host-to-device copies: pinned against pageable host memory, and a copy overlapped with compute.

A copy from pinned (page-locked) memory is one DMA transfer that runs on the GPU's copy engine,
beside kernels of other streams. A copy from pageable memory goes through a pinned staging
buffer of the driver, chunk by chunk, and returns to the host only when done.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from perf.cases.transfer import HOST_MEMORY
from perf.harness import Work

SCHEDULES = ("serial", "overlapped")

# 256 MiB: 4.2 ms at PCIe 5.0 x16's 64 GB/s, against microseconds for the launches and the hand-off
# between streams that the overlapped schedule adds.
OVERLAP_COPY_BYTES = 256 * 2**20
# bf16 n x n matmuls: 2 * 4096^3 = 137 GFLOP each, 0.14 ms at an H100's dense bf16 peak (989 TFLOP/s,
# datasheet): the chain's length matches the copy's time to a fraction of the copy.
OVERLAP_MATMUL_N = 4096
# Calls timed with CUDA events; their median is reported.
EVENT_REPEATS = 5


def _check_size(size: int) -> None:
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise ValueError(f"size: a positive int number of bytes is accepted; got {size!r}")


def _check_cuda(device: torch.device) -> None:
    if torch.device(device).type != "cuda":
        raise ValueError(f"device: host-to-device copies need a cuda device; got {device}")


def host_buffer(size: int, host_memory: str) -> torch.Tensor:
    """`size` bytes of host memory, pinned or pageable, written once so that every page is resident.

    Written with a non-zero value: pages never written (or zeroed by the allocator) may all map the
    kernel's shared zero page and read faster than memory.
    """
    _check_size(size)
    if host_memory not in HOST_MEMORY:
        raise ValueError(f"host_memory: unknown value {host_memory!r}; accepted: {', '.join(HOST_MEMORY)}")
    buffer = torch.empty(size, dtype=torch.uint8, pin_memory=host_memory == "pinned")  # (size,)
    return buffer.fill_(0xA5)


@dataclass
class HostToDevice:
    """One copy of `src` (host) into the preallocated `dst` (device) per `step`."""

    src: torch.Tensor  # (size,) uint8, host
    dst: torch.Tensor  # (size,) uint8, device
    work: Work

    def step(self) -> None:
        # Asynchronous from pinned memory; from pageable memory the call returns when the copy is done.
        self.dst.copy_(self.src, non_blocking=True)


def host_to_device(size: int, host_memory: str, device: torch.device) -> HostToDevice:
    _check_cuda(device)
    src = host_buffer(size, host_memory)
    dst = torch.empty(size, dtype=torch.uint8, device=device)
    return HostToDevice(src, dst, Work(bytes_moved=size))


def event_ms(fn: Callable[[], object], repeats: int = EVENT_REPEATS) -> float:
    """Median milliseconds of device time of `fn`'s work on the current stream, from CUDA events.

    One untimed call first: cuBLAS handles and the caching allocator's blocks are set up there.
    """
    fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


class CopyComputeOverlap:
    """A host-to-device copy of a pinned buffer and an independent chain of bf16 matmuls.

    `serial` runs both on the current stream, one after the other; `overlapped` runs the copy on a
    side stream while the current stream computes. Each call of `compute` leaves its product in
    `result`; the copy leaves `src`'s bytes in `dst`.
    """

    def __init__(
        self,
        device: torch.device,
        matmuls: int,
        copy_bytes: int = OVERLAP_COPY_BYTES,
        matmul_n: int = OVERLAP_MATMUL_N,
    ) -> None:
        _check_cuda(device)
        _check_size(copy_bytes)
        for name, value in (("matmuls", matmuls), ("matmul_n", matmul_n)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name}: a positive int is accepted; got {value!r}")
        self.matmuls, self.copy_bytes, self.matmul_n = matmuls, copy_bytes, matmul_n
        self.src = host_buffer(copy_bytes, "pinned")  # (copy_bytes,)
        self.dst = torch.empty(copy_bytes, dtype=torch.uint8, device=device)  # (copy_bytes,)
        g = torch.Generator(device="cpu").manual_seed(0)
        n = matmul_n
        self.x = torch.randn(n, n, generator=g).to(device, torch.bfloat16)  # (n, n)
        # Entries of variance 1/n keep each product's entries at the scale of x's: no overflow
        # however long the chain.
        self.weight = (torch.randn(n, n, generator=g) / math.sqrt(n)).to(device, torch.bfloat16)  # (n, n)
        self.side = torch.cuda.Stream(device)
        self.result: torch.Tensor | None = None  # (n, n)

    @property
    def work(self) -> Work:
        return Work(flops=2 * self.matmul_n**3 * self.matmuls, bytes_moved=self.copy_bytes, precision="bf16")

    def copy(self) -> None:
        self.dst.copy_(self.src, non_blocking=True)

    def compute(self) -> None:
        y = self.x
        for _ in range(self.matmuls):
            y = y @ self.weight  # (n, n)
        self.result = y

    def serial(self) -> None:
        self.copy()
        self.compute()

    def overlapped(self) -> None:
        current = torch.cuda.current_stream(self.dst.device)
        # The copy overwrites dst, which work queued earlier on the current stream may still read.
        self.side.wait_stream(current)
        with torch.cuda.stream(self.side):
            self.copy()
        # dst was allocated on the current stream and is written on the side one: if it were freed
        # now, its block must not go to a new tensor before the copy is done.
        self.dst.record_stream(self.side)
        self.compute()
        # Work queued from here on the current stream may read dst: it waits for the copy.
        current.wait_stream(self.side)

    def step(self, schedule: str) -> Callable[[], None]:
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule: unknown value {schedule!r}; accepted: {', '.join(SCHEDULES)}")
        return self.serial if schedule == "serial" else self.overlapped


@functools.cache
def balanced_matmuls(
    device: torch.device, copy_bytes: int = OVERLAP_COPY_BYTES, matmul_n: int = OVERLAP_MATMUL_N
) -> int:
    """How many matmuls take as long as the copy on this GPU, measured once per process so that
    both schedules run the same chain."""
    probe = CopyComputeOverlap(device, matmuls=1, copy_bytes=copy_bytes, matmul_n=matmul_n)
    return max(1, round(event_ms(probe.copy) / event_ms(probe.compute)))
