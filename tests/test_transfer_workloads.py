"""Host-to-device workloads: buffers, size labels, and on a GPU the bytes each schedule delivers."""

import pytest
import torch

from perf.cases.transfer import byte_size_label, parse_byte_size
from perf.workloads.transfer import CopyComputeOverlap, balanced_matmuls, host_buffer, host_to_device

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
CPU = torch.device("cpu")
# Small enough for any GPU; an odd byte count beside the powers of two.
ODD_BYTES = 3 * 2**20 + 7


@pytest.mark.parametrize(
    ("size", "label"),
    [
        (2**16, "64KiB"),
        (2**20, "1MiB"),
        (2**26, "64MiB"),
        (2**30, "1GiB"),
        (3 * 2**29, "1536MiB"),
        (1000, "1000B"),
    ],
)
def test_byte_size_label(size, label):
    assert byte_size_label(size) == label


def test_pageable_buffer_is_written_host_memory():
    buffer = host_buffer(ODD_BYTES, "pageable")
    assert buffer.dtype == torch.uint8 and buffer.shape == (ODD_BYTES,)
    assert buffer.device == CPU and not buffer.is_pinned()
    assert bool((buffer == 0xA5).all())


@pytest.mark.parametrize("size", [0, -1, 1.5, True])
def test_sizes_must_be_positive_ints(size):
    with pytest.raises(ValueError, match="size: a positive int number of bytes is accepted"):
        host_buffer(size, "pageable")


def test_unknown_host_memory_is_rejected():
    with pytest.raises(ValueError, match="host_memory: unknown value 'mapped'; accepted: pinned, pageable"):
        host_buffer(16, "mapped")


def test_copies_need_a_cuda_device():
    with pytest.raises(ValueError, match="device: host-to-device copies need a cuda device; got cpu"):
        host_to_device(16, "pageable", CPU)
    with pytest.raises(ValueError, match="device: host-to-device copies need a cuda device; got cpu"):
        CopyComputeOverlap(CPU, matmuls=1)


# --------------------------------------------------------------------------- on a GPU
def random_bytes(size: int, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, 256, (size,), dtype=torch.uint8, generator=g)


@pytest.mark.gpu
@cuda_only
@pytest.mark.parametrize("host_memory", ["pinned", "pageable"])
def test_host_to_device_delivers_the_bytes(host_memory):
    transfer = host_to_device(ODD_BYTES, host_memory, torch.device("cuda"))
    assert transfer.src.is_pinned() == (host_memory == "pinned")
    assert transfer.work.bytes_moved == ODD_BYTES
    transfer.src.copy_(random_bytes(ODD_BYTES, seed=0))
    transfer.step()
    assert torch.equal(transfer.dst.cpu(), transfer.src)


def small_overlap(matmuls: int = 4) -> CopyComputeOverlap:
    return CopyComputeOverlap(torch.device("cuda"), matmuls=matmuls, copy_bytes=ODD_BYTES, matmul_n=256)


@pytest.mark.gpu
@cuda_only
def test_overlapped_schedule_delivers_the_bytes_and_the_serial_result():
    overlap = small_overlap()
    overlap.src.copy_(random_bytes(ODD_BYTES, seed=0))
    overlap.step("serial")()
    serial_result = overlap.result.clone()  # (n, n)
    assert torch.equal(overlap.dst.cpu(), overlap.src)
    assert bool(torch.isfinite(serial_result.float()).all())

    # New bytes, so that the overlapped copy has something to deliver that the serial one did not.
    for seed in (1, 2):
        overlap.src.copy_(random_bytes(ODD_BYTES, seed=seed))
        overlap.step("overlapped")()
        # .cpu() runs on the current stream, which waits for the side stream's copy.
        assert torch.equal(overlap.dst.cpu(), overlap.src)
        torch.testing.assert_close(overlap.result, serial_result)


@pytest.mark.gpu
@cuda_only
def test_overlap_figures_and_schedule_names():
    overlap = small_overlap(matmuls=3)
    assert overlap.work.flops == 3 * 2 * 256**3 and overlap.work.bytes_moved == ODD_BYTES
    with pytest.raises(ValueError, match="schedule: unknown value 'parallel'; accepted: serial, overlapped"):
        overlap.step("parallel")
    matmuls = balanced_matmuls(torch.device("cuda"), copy_bytes=ODD_BYTES, matmul_n=256)
    assert isinstance(matmuls, int) and matmuls >= 1


@pytest.mark.parametrize("size", [4096, 2**16, 2**20, 3 * 2**20, 2**30])
def test_byte_sizes_read_back_from_their_labels(size):
    assert parse_byte_size(byte_size_label(size)) == size


@pytest.mark.parametrize(("text", "size"), [("64k", 2**16), ("1M", 2**20), ("1GiB", 2**30), ("100", 100)])
def test_parse_byte_size(text, size):
    assert parse_byte_size(text) == size


@pytest.mark.parametrize("text", ["", "-4K", "0", "2T", "1.5M", "MB"])
def test_parse_byte_size_rejects(text):
    with pytest.raises(ValueError, match="not a positive byte count"):
        parse_byte_size(text)
