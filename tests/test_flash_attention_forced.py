"""FlashAttentionTriton's forced configurations: each form of the kernels they reach gives the fp64
result, and a bad or oversized entry is refused naming it (on a GPU, or in Triton's interpreter)."""

import pytest
import torch
from triton.runtime.errors import OutOfResources

from kernels import flash_attention_triton as fat
from kernels.flash_attention_triton import (
    flash_attention_triton,
    launch,
)
from tests.attention_checks import (
    F16,
    F32,
    out_and_grads,
)
from tests.triton_attention import (
    CUDA,
    check,
    launches_run_out_of,
    pin_configuration,
    qkv,
)


@pytest.fixture(autouse=True)
def pinned_configuration(request, monkeypatch):
    pin_configuration(request, monkeypatch)


# --------------------------------------------------------------------------- forced configurations
def test_forced_configuration_gives_the_same_result(monkeypatch):
    torch.manual_seed(0)
    q, k, v = qkv((1, 2), 70, 90, 32, F32)
    grad_out = torch.randn_like(q)
    tuned = out_and_grads(flash_attention_triton, q, k, v, grad_out, True)
    monkeypatch.setenv(
        fat.CONFIG_ENV,
        "forward:BLOCK_M=64,BLOCK_N=16,num_stages=1; "
        "backward:BLOCK_M1=16,BLOCK_N1=64,BLOCK_M2=16,BLOCK_N2=16",
    )
    assert fat.chosen_configs()["forward"].endswith("(forced)")
    forced = out_and_grads(flash_attention_triton, q, k, v, grad_out, True)
    # Another tiling sums in another order; on a GPU the TF32 products differ too at that level.
    tolerance = {"rtol": 1e-3, "atol": 1e-3} if CUDA else {"rtol": 1e-4, "atol": 1e-5}
    for got, expected in zip(forced, tuned, strict=True):
        torch.testing.assert_close(got, expected, **tolerance)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_forward_key_tiles_wider_than_query_tiles(monkeypatch, is_causal, dtype):
    """The diagonal then starts inside a key tile, which the forward must mask from its start."""
    monkeypatch.setenv(fat.CONFIG_ENV, "forward:BLOCK_M=16,BLOCK_N=64,num_stages=1")
    torch.manual_seed(0)
    check(*qkv((1, 2), 100, 129, 32, dtype), is_causal)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("seq_q, seq_k", [(100, 100), (33, 70), (70, 33)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_one_pass_backward_with_atomic_dq(monkeypatch, dq_conversions, is_causal, seq_q, seq_k, dtype):
    """ATOMIC_DQ=1: key tiles add their shares of dQ into one fp32 buffer, rows past seq_q dropped."""
    monkeypatch.setenv(fat.CONFIG_ENV, "backward:BLOCK_M1=16,BLOCK_N1=32,BLOCK_M2=16,BLOCK_N2=16,ATOMIC_DQ=1")
    torch.manual_seed(0)
    check(*qkv((2, 2), seq_q, seq_k, 32, dtype), is_causal)
    assert dq_conversions  # the launcher converted the fp32 sum: the one-pass form ran


@pytest.mark.parametrize("head_dim", [24, 80, 48])
@pytest.mark.parametrize("is_causal", [False, True])
def test_one_pass_backward_adds_every_part_of_the_head_dim(monkeypatch, dq_conversions, is_causal, head_dim):
    """A padded part (24 as 32) adds only the head dim's columns; a rest part (80 = 64 + 16,
    48 = 32 + 16) adds its own share beside the main part's."""
    monkeypatch.setenv(fat.CONFIG_ENV, "backward:BLOCK_M1=16,BLOCK_N1=32,BLOCK_M2=16,BLOCK_N2=16,ATOMIC_DQ=1")
    torch.manual_seed(0)
    check(*qkv((1, 2), 50, 40, head_dim, F16), is_causal)
    assert dq_conversions


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("atomic_dq", [0, 1])
def test_only_the_one_pass_backward_gets_an_fp32_dq_and_descriptors(
    monkeypatch, backward_buffers, atomic_dq, dtype
):
    """The two-pass form reads neither, so its launches hold no fp32 buffer of q's shape and make
    no descriptors; the one-pass form gets both (descriptors in 16-bit where there is TMA)."""
    monkeypatch.setattr(launch, "TMA_MIN_WORK", 0)  # descriptors at test sizes on a GPU too
    monkeypatch.setenv(
        fat.CONFIG_ENV, f"backward:BLOCK_M1=16,BLOCK_N1=32,BLOCK_M2=32,BLOCK_N2=16,ATOMIC_DQ={atomic_dq}"
    )
    torch.manual_seed(0)
    q, k, v = qkv((1, 2), 48, 64, 32, dtype)
    check(q, k, v, True)
    tma = launch._has_tma(q.device) and dtype != F32  # fp32's backward loads through pointers
    assert backward_buffers == [(q.numel() if atomic_dq else 0, bool(atomic_dq) and tma)]


@pytest.mark.parametrize("atomic_dq", [0, 1])
@pytest.mark.parametrize("seq_q, seq_k", [(100, 100), (33, 70)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_backward_query_tiles_wider_than_key_tiles(monkeypatch, is_causal, seq_q, seq_k, atomic_dq):
    """In the dK/dV pass the diagonal then starts inside a query tile, which runs masked; later query
    tiles start off their own tile boundary, so the pass loads them as ragged even at seq_q = 128."""
    monkeypatch.setenv(
        fat.CONFIG_ENV, f"backward:BLOCK_M1=32,BLOCK_N1=16,BLOCK_M2=32,BLOCK_N2=16,ATOMIC_DQ={atomic_dq}"
    )
    torch.manual_seed(0)
    check(*qkv((1, 2), seq_q, seq_k, 32, F16), is_causal)
    check(*qkv((1, 1), 128, 128, 16, F32), is_causal)


@pytest.mark.parametrize(
    "raw, message",
    [
        (
            "fwd:BLOCK_M=64,BLOCK_N=32",
            r"entry 'fwd:BLOCK_M=64,BLOCK_N=32' must start with one of forward, backward",
        ),
        ("forward:BLOCK_M=64", r"the forward entry needs BLOCK_N, a power of two >= 16"),
        ("forward:BLOCK_M=48,BLOCK_N=16", r"the forward entry needs BLOCK_M, a power of two >= 16"),
        ("forward:BLOCK_M=64,BLOCK_N=32,warps=4", r"'warps=4' in the forward entry must be NAME=positive"),
        ("forward:BLOCK_M=64,BLOCK_N=x", r"'BLOCK_N=x' in the forward entry must be NAME=positive integer"),
        (
            "backward:BLOCK_M1=32,BLOCK_N1=64,BLOCK_M2=64,BLOCK_N2=32,ATOMIC_DQ=2",
            r"'ATOMIC_DQ=2' in the backward entry must be .*, or ATOMIC_DQ=0 or 1",
        ),
        ("forward:BLOCK_M=64,BLOCK_N=32,ATOMIC_DQ=1", r"'ATOMIC_DQ=1' in the forward entry must be NAME="),
        (
            "backward:BLOCK_M1=64,BLOCK_N1=32,BLOCK_M2=32,BLOCK_N2=64",
            r"the backward entry needs BLOCK_M2 a multiple of BLOCK_N2",
        ),
    ],
)
def test_rejects_bad_forced_configuration(monkeypatch, raw, message):
    monkeypatch.setenv(fat.CONFIG_ENV, raw)
    q, k, v = qkv((1, 1), 8, 8, 16, F32)
    with pytest.raises(ValueError, match=rf"{fat.CONFIG_ENV}: .*{message}"):
        flash_attention_triton(q, k, v)


# The issue's example: on an H100 with fp32 inputs its forward does not fit at head dim 128, nor its
# backward at 64 (Triton 3.9 for sm_90: 262144 and 262656 bytes of shared memory, limit 232448).
TOO_BIG = (
    "forward:BLOCK_M=128,BLOCK_N=64,num_warps=8,num_stages=3;"
    "backward:BLOCK_M1=64,BLOCK_N1=128,BLOCK_M2=128,BLOCK_N2=64,num_warps=8,ATOMIC_DQ=1"
)


@pytest.mark.parametrize(
    "kernel, head_dim, entry",
    [
        ("forward", 128, "forward:BLOCK_M=128,BLOCK_N=64,num_warps=8,num_stages=3"),
        (
            "backward",
            64,
            "backward:BLOCK_M1=64,BLOCK_N1=128,BLOCK_M2=128,BLOCK_N2=64,num_warps=8,num_stages=2,ATOMIC_DQ=1",
        ),
    ],
)
def test_a_forced_configuration_out_of_shared_memory_names_its_entry(monkeypatch, kernel, head_dim, entry):
    """Triton's OutOfResources from a forced launch becomes a ValueError that names the entry with every
    value in force (num_stages=2 by default), the inputs' dtype and head dim, and the bytes needed
    against the GPU's limit, raised from Triton's error."""
    monkeypatch.setenv(fat.CONFIG_ENV, TOO_BIG)
    launches_run_out_of(monkeypatch, kernel)
    q, k, v = qkv((1, 1), 20, 20, head_dim, F32)
    gpu = torch.cuda.get_device_name() if CUDA else "this GPU"
    with pytest.raises(ValueError) as raised:
        out_and_grads(flash_attention_triton, q, k, v, torch.randn_like(q), True)
    assert str(raised.value) == (
        f"FLASH_TRITON_CONFIG: the {kernel} entry '{entry}' does not fit torch.float32 inputs at head dim "
        f"{head_dim} on {gpu}: it needs 262144 bytes of shared memory, over the GPU's limit of 232448. "
        f"Force smaller BLOCK_* tiles or fewer num_stages in the {kernel} entry, or leave the {kernel} "
        f"kernel out of FLASH_TRITON_CONFIG to autotune it."
    )
    assert isinstance(raised.value.__cause__, OutOfResources)


def test_a_forced_configuration_with_too_many_threads_asks_for_fewer_warps(monkeypatch):
    monkeypatch.setenv(fat.CONFIG_ENV, "forward:BLOCK_M=32,BLOCK_N=16,num_warps=64")
    launches_run_out_of(monkeypatch, "forward", "threads", 2048, 1024)
    message = (
        r"'forward:BLOCK_M=32,BLOCK_N=16,num_warps=64,num_stages=2' does not fit torch.float16 inputs at "
        r"head dim 40 on .*: it needs 2048 threads per block, over the GPU's limit of 1024. Force fewer "
        r"num_warps in the forward entry"
    )
    with pytest.raises(ValueError, match=message):
        flash_attention_triton(*qkv((1, 1), 20, 20, 40, F16))


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU: the interpreter has no shared memory limit")
@pytest.mark.parametrize("kernel, head_dim", [("forward", 128), ("backward", 64)])
def test_the_issue_example_names_its_entry_on_a_gpu(monkeypatch, kernel, head_dim):
    """Triton's own refusal, on the GPU: the forward fits at head dim 64, so the backward's is raised."""
    monkeypatch.setenv(fat.CONFIG_ENV, TOO_BIG)
    q, k, v = qkv((1, 1), 256, 256, head_dim, F32)
    message = (
        rf"the {kernel} entry '{kernel}:BLOCK_.*' does not fit torch.float32 inputs at head dim {head_dim} "
        rf"on .*: it needs \d+ bytes of shared memory, over the GPU's limit of \d+"
    )
    with pytest.raises(ValueError, match=message):
        out_and_grads(flash_attention_triton, q, k, v, torch.randn_like(q), True)
