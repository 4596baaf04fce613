"""FlashAttentionTriton against fp64: on a GPU when there is one, else in Triton's CPU interpreter.

The interpreter runs fp32 and fp16 at small sizes (its bf16 dot products are wrong in Triton 3.9);
bf16 and long sequences are marked `gpu`. On a GPU fp32 inputs use TF32 dots, whose tensor cores drop
the operands' mantissa bits past the 10th (truncation: up to 2^-10 relative, twice fp16's rounding);
measured, that put the kernel's error at up to 4.1 times naive attention's in fp16. They are held
against naive attention in bf16 (8-bit mantissa, rounding: 2^-9), which bounds what TF32 loses.
"""

import os
import re
from pathlib import Path
from unittest import mock

import pytest
import torch
import triton
from hypothesis import given, settings
from hypothesis import strategies as st
from triton.runtime.errors import OutOfResources

from kernels import flash_attention_triton as fat
from kernels.attention_inputs import HEAD_DIMS
from kernels.flash_attention_triton import (
    FlashAttentionTriton,
    configs,
    flash_attention_triton,
    launch,
    stored,
    stored_writing,
    tuning,
)
from model.attention import reference_attention
from tests.attention_checks import (
    BF16,
    F16,
    F32,
    bad_inputs,
    check_against_fp64,
    out_and_grads,
    random_qkv,
)

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
needs_gpu = [
    pytest.mark.gpu,
    pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU: bf16 dots are wrong in Triton's interpreter"),
]
BF16_ON_GPU = pytest.param(BF16, marks=needs_gpu)


# On a GPU every new (length bucket, head dim, dtype, causal) would autotune, compiling a dozen
# configurations: minutes over this file. Tests pin one configuration by the documented override,
# except the ones marked below that check the autotuned choices.
PINNED = "forward:BLOCK_M=64,BLOCK_N=32,num_warps=4; backward:BLOCK_M1=32,BLOCK_N1=64,BLOCK_M2=64,BLOCK_N2=32"


# Tiles that fit every head dim's shared memory and registers, fp32 at 256 included.
SMALL_TILES = (
    "forward:BLOCK_M=32,BLOCK_N=16,num_warps=4; backward:BLOCK_M1=16,BLOCK_N1=16,BLOCK_M2=16,BLOCK_N2=16"
)


@pytest.fixture(autouse=True)
def pinned_configuration(request, monkeypatch):
    if CUDA and "autotuned" not in request.keywords:
        monkeypatch.setenv(fat.CONFIG_ENV, PINNED)


def check(q, k, v, is_causal, grad_out=None):
    uses_tf32 = CUDA and q.dtype == F32
    kwargs = {"naive_dtype": BF16, "tf32": True} if uses_tf32 else {}
    check_against_fp64(FlashAttentionTriton, q, k, v, is_causal, grad_out=grad_out, **kwargs)


def qkv(batch_heads, seq_q, seq_k, head_dim, dtype):
    return random_qkv(batch_heads, seq_q, seq_k, head_dim, dtype, device=DEVICE)


@pytest.mark.parametrize("dtype", [F32, F16, BF16_ON_GPU])
@pytest.mark.parametrize("seq_len", [1, 17, 100, 129])
@pytest.mark.parametrize("is_causal", [False, True])
def test_matches_fp64_at_odd_lengths(is_causal, seq_len, dtype):
    torch.manual_seed(0)
    check(*qkv((2, 3), seq_len, seq_len, 32, dtype), is_causal)  # (B, H, T, d)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("seq_q, seq_k", [(17, 100), (100, 17), (1, 40), (40, 1), (33, 70)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_differing_query_and_key_lengths(is_causal, seq_q, seq_k, dtype):
    torch.manual_seed(0)
    check(*qkv((2, 2), seq_q, seq_k, 16, dtype), is_causal)


# Each form of head_dim_parts: a power of two (16, 64, 128, 256), one padded part (24 as 32, 40 as 64,
# 72 as 128, 112 as 128, 136 and 200 as 256), a main and a rest part (48 = 32 + 16, 80 = 64 + 16,
# 96 = 64 + 32, 160 = 128 + 32, 192 = 128 + 64).
PART_FORMS = (16, 24, 40, 48, 64, 72, 80, 96, 112, 128, 136, 160, 192, 200, 256)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("head_dim", PART_FORMS)
@pytest.mark.parametrize("is_causal", [False, True])
def test_every_form_of_head_dim(monkeypatch, is_causal, head_dim, dtype):
    if CUDA and head_dim > 128:  # the pinned tiles take more shared memory than fp32 rows this wide have
        monkeypatch.setenv(fat.CONFIG_ENV, SMALL_TILES)
    torch.manual_seed(0)
    check(*qkv((1, 2), 33, 45, head_dim, dtype), is_causal)


def test_head_dim_parts_cover_every_accepted_head_dim():
    """Powers of two of at least 16 that cover the head dim; a rest part only where it is exact, else one
    part under twice the head dim; and the padded share that says so."""
    for head_dim in HEAD_DIMS:
        main, rest = fat.head_dim_parts(head_dim)
        assert main >= 16 and main & (main - 1) == 0
        if rest:  # exact: main + rest is the head dim
            assert rest >= 16 and rest & (rest - 1) == 0 and rest < main and main + rest == head_dim
        assert head_dim <= main + rest < 2 * head_dim
        assert fat.padded_share(head_dim) == pytest.approx(1 - head_dim / (main + rest))
    assert [fat.head_dim_parts(d) for d in (48, 64, 72, 80, 96, 112, 160, 256)] == [
        (32, 16),
        (64, 0),
        (128, 0),
        (64, 16),
        (64, 32),
        (128, 0),
        (128, 32),
        (256, 0),
    ]
    assert all(fat.padded_share(d) == 0 for d in (16, 32, 48, 64, 80, 96, 128, 144, 160, 192, 256))


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_three_dim_inputs(is_causal, dtype):
    torch.manual_seed(0)
    check(*qkv((3,), 45, 37, 64, dtype), is_causal)  # (B, T, d)


@settings(max_examples=10, deadline=None)
@given(
    batch_heads=st.sampled_from([(1,), (2,), (1, 1), (2, 3)]),
    seq_q=st.integers(1, 70),
    seq_k=st.integers(1, 70),
    head_dim=st.sampled_from(HEAD_DIMS),
    dtype=st.sampled_from([F32, F16]),
    is_causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_shapes(batch_heads, seq_q, seq_k, head_dim, dtype, is_causal, seed):
    torch.manual_seed(seed)
    # As in test_every_form_of_head_dim: the pinned tiles do not fit fp32 rows wider than 128.
    wide = {fat.CONFIG_ENV: SMALL_TILES} if CUDA and head_dim > 128 else {}
    with mock.patch.dict(os.environ, wide):
        check(*qkv(batch_heads, seq_q, seq_k, head_dim, dtype), is_causal)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_non_contiguous_inputs_and_grad_out(is_causal, dtype):
    torch.manual_seed(0)
    # (B, T, H, d) projections seen as (B, H, T, d), as the model's attention layer produces them;
    # keys and values take every other row, and the head dim of grad_out is strided. In fp16 the
    # strides are multiples of 16 bytes, so where there is TMA its descriptors take them as they are.
    q = torch.randn(2, 40, 3, 16, device=DEVICE, dtype=dtype).transpose(1, 2)
    k = torch.randn(2, 64, 3, 16, device=DEVICE, dtype=dtype).transpose(1, 2)[:, :, ::2]
    v = torch.randn(2, 64, 3, 16, device=DEVICE, dtype=dtype).transpose(1, 2)[:, :, 1::2]
    grad_out = torch.randn(2, 3, 16, 40, device=DEVICE, dtype=dtype).transpose(-2, -1)
    assert not any(t.is_contiguous() for t in (q, k, v, grad_out))
    check(q, k, v, is_causal, grad_out=grad_out)


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    """The same values starting one element into a larger buffer: a base off the 16-byte grid."""
    buffer = torch.empty(t.numel() + 1, device=t.device, dtype=t.dtype)
    shifted = buffer[1:].view(t.shape)
    shifted.copy_(t)
    return shifted


def test_descriptors_are_made_only_where_tma_can_load():
    q, k, v = qkv((1, 2), 24, 24, 16, F16)
    tma = launch._has_tma(q.device)
    large = launch.TMA_MIN_WORK
    assert launch._descriptors(large, q, k, v) is not None or not tma
    fp32 = launch._descriptors(large, *qkv((1, 2), 24, 24, 16, F32))  # which launches use them is policy
    assert fp32 is not None or not tma
    assert launch._descriptors(large, q, _misaligned(k), v) is None
    narrow_rows = torch.randn(1, 2, 24, 20, device=DEVICE, dtype=F16)[..., :16]  # rows 40 bytes apart
    assert launch._descriptors(large, q, narrow_rows, v) is None
    if CUDA:  # small calls are bound by the host, where descriptors cost more than they save
        assert launch._descriptors(large - 1, q, k, v) is None
        fp32 = qkv((1, 2), 24, 24, 16, F32)
        assert launch._descriptors(launch.TMA_MIN_WORK_FP32 - 1, *fp32) is None
        assert launch._descriptors(launch.TMA_MIN_WORK_FP32, *fp32) is not None or not tma


def test_fp32_loads_through_tma_only_in_the_forward_from_128_columns():
    assert all(launch._loads_through_tma("forward", F32, d) for d in (72, 104, 112, 128, 160, 256))
    assert not any(launch._loads_through_tma("forward", F32, d) for d in (16, 32, 64, 80, 96))
    assert not any(launch._loads_through_tma("backward", F32, d) for d in HEAD_DIMS)
    assert all(
        launch._loads_through_tma(kernel, dtype, 64) for kernel in tuning.AUTOTUNED for dtype in (F16, BF16)
    )


@pytest.mark.parametrize("seq_k", [64, 100, 50])
@pytest.mark.parametrize("is_causal", [False, True])
def test_fp32_forward_at_head_dim_128_reads_the_column_major_v_through_tma(monkeypatch, is_causal, seq_k):
    """V's copy is read as (batch, heads, d, seq) tiles: whole ones (64), a last one past the end that
    TMA fills with zeros (100), and a length whose rows are not 16-byte aligned, loaded through pointers
    instead (50)."""
    monkeypatch.setattr(launch, "TMA_MIN_WORK_FP32", 0)  # descriptors at test sizes on a GPU too
    made, descriptors = [], launch._descriptors
    monkeypatch.setattr(
        launch, "_descriptors", lambda work, *t: made.append(descriptors(work, *t)) or made[-1]
    )
    torch.manual_seed(0)
    q, k, v = qkv((1, 2), 40, seq_k, 128, F32)
    check(q, k, v, is_causal)
    assert len(made) == 1  # the forward's: fp32's backward loads through pointers
    assert (made[0] is not None) == (launch._has_tma(q.device) and seq_k % 4 == 0)


@pytest.mark.parametrize("is_causal", [False, True])
def test_misaligned_16_bit_inputs_load_through_pointers(is_causal):
    torch.manual_seed(0)
    q, k, v = qkv((2, 2), 33, 50, 32, F16)
    check(_misaligned(q), _misaligned(k), _misaligned(v), is_causal)


def test_expanded_grad_out():
    """out.sum().backward() hands backward a grad_out of stride 0 everywhere."""
    torch.manual_seed(0)
    q, k, v = (t.requires_grad_() for t in qkv((2,), 20, 20, 16, F32))
    flash_attention_triton(q, k, v, is_causal=True).sum().backward()
    ones = torch.ones(2, 20, 16, dtype=torch.float64, device=DEVICE)
    exact = out_and_grads(reference_attention, q.double(), k.double(), v.double(), ones, True)
    tolerance = 5e-3 if CUDA else 1e-5  # TF32 dots on a GPU
    for got, e in zip((q.grad, k.grad, v.grad), exact[1:], strict=True):
        torch.testing.assert_close(got.double(), e, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("name", list(bad_inputs()))
def test_rejects_bad_inputs(name):
    (q, k, v), message = bad_inputs(DEVICE)[name]
    with pytest.raises(ValueError, match=message):
        flash_attention_triton(q, k, v)


def test_grad_out_of_another_dtype_is_cast_by_autograd():
    """Autograd casts grad_out to the output's dtype before backward runs: the result is the same."""
    torch.manual_seed(0)
    q, k, v = (t.requires_grad_() for t in qkv((1, 2), 8, 8, 16, F32))
    out = flash_attention_triton(q, k, v)
    grad_out = torch.randn_like(out).half()
    cast_by_autograd = torch.autograd.grad(out, (q, k, v), grad_out, retain_graph=True)
    cast_here = torch.autograd.grad(out, (q, k, v), grad_out.float())
    for a, b in zip(cast_by_autograd, cast_here, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.fixture
def backward_buffers(monkeypatch) -> list[tuple[int, bool]]:
    """Per backward launch in this test: the size of the fp32 dQ buffer it got and whether it got
    TMA descriptors (both are the one-pass form's)."""
    seen = []
    kernel = tuning.AUTOTUNED["backward"]
    original = kernel.launch

    def recorded(grid, *args, **kwargs):
        named = kernel.named(args, kwargs)
        seen.append((named["DQ_ACC"].numel(), named["desc_q"] is not None))
        return original(grid, *args, **kwargs)

    monkeypatch.setattr(kernel, "launch", recorded)
    return seen


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


def launches_run_out_of(monkeypatch, kernel: str, resource="shared memory", required=262144, limit=232448,
                        when=lambda kwargs: True) -> None:  # fmt: skip
    """Make the kernel's jit function refuse launches (those `when` picks by their kwargs) as Triton
    does when a compiled kernel needs more than the GPU has: the interpreter never does. Under the
    heuristics, so forced, autotuned and directly launched configurations all reach it."""
    jit_fn = tuning.AUTOTUNED[kernel].fixed.fn
    run = jit_fn.run

    def refused(*args, **kwargs):
        if when(kwargs):
            raise OutOfResources(required, limit, resource)
        return run(*args, **kwargs)

    monkeypatch.setattr(jit_fn, "run", refused)


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


# --------------------------------------------------------------------------- tuned launches
@pytest.fixture
def autotuner_runs(monkeypatch) -> dict[str, int]:
    """Calls of each kernel's autotuner in this test, which starts as a fresh process would: no
    FLASH_TRITON_CONFIG and no key tuned yet (the autotuner's own cache is left as it is)."""
    monkeypatch.delenv(fat.CONFIG_ENV, raising=False)
    runs = dict.fromkeys(tuning.AUTOTUNED, 0)
    for name, kernel in tuning.AUTOTUNED.items():
        monkeypatch.setattr(kernel, "chosen", {})

        def counted(*args, _name=name, _run=kernel.tuned.run, **kwargs):
            runs[_name] += 1
            return _run(*args, **kwargs)

        monkeypatch.setattr(kernel.tuned, "run", counted)
    return runs


@pytest.mark.autotuned
@pytest.mark.parametrize("dtype", [F32, F16])
def test_a_tuned_key_launches_without_the_autotuner(autotuner_runs, dtype):
    """The autotuner picks a key's configuration once; later launches of that key run it directly,
    with the same results. A new key (here a longer key-length bucket) goes through the autotuner."""
    torch.manual_seed(0)
    q, k, v = qkv((1, 2), 70, 90, 32, dtype)
    grad_out = torch.randn_like(q)
    first = out_and_grads(flash_attention_triton, q, k, v, grad_out, True)
    assert autotuner_runs == {"forward": 1, "backward": 1}
    check(q, k, v, True, grad_out)
    again = out_and_grads(flash_attention_triton, q, k, v, grad_out, True)
    assert autotuner_runs == {"forward": 1, "backward": 1}
    for got, expected in zip(again, first, strict=True):  # atomics, if chosen, may add in another order
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-4)
    check(*qkv((1, 2), 70, 200, 32, dtype), True)
    assert autotuner_runs == {"forward": 2, "backward": 2}
    assert all(fat.chosen_configs().values())


@pytest.mark.autotuned
@pytest.mark.parametrize("atomic_dq", [0, 1])
def test_a_tuned_key_runs_its_own_configuration(autotuner_runs, dq_conversions, backward_buffers, atomic_dq):
    """Each key launches with its own configuration whatever the last key chose: the backward's form
    (one pass or two) decides whether the launcher converts dQ and gives the launch an fp32 dQ, so
    running another key's would be wrong."""
    torch.manual_seed(0)
    inputs = qkv((1, 2), 70, 90, 32, F16)
    check(*inputs, True)
    backward = tuning.AUTOTUNED["backward"]
    # Before tuning the buffer is there if any candidate left for these rows is one-pass (on a GPU).
    candidates = configs._prune(backward.tuned.configs, {"Q": inputs[0], "HEAD_DIM": 32})
    assert (backward_buffers[0][0] > 0) == any(c.kwargs["ATOMIC_DQ"] for c in candidates)
    (key,) = backward.chosen
    backward.chosen[key] = configs._config("backward", (16, 32, 32, 16), 4, 1, {"ATOMIC_DQ": atomic_dq})
    check(*qkv((1, 2), 70, 200, 32, F16), True)  # another key, tuned after the first
    dq_conversions.clear()
    check(*inputs, True)
    assert autotuner_runs["backward"] == 2
    assert len(dq_conversions) == atomic_dq
    assert backward_buffers[-1][0] == (inputs[0].numel() if atomic_dq else 0)
    assert f"ATOMIC_DQ: {atomic_dq}" in fat.chosen_configs()["backward"]


@pytest.fixture
def fresh_autotuner(monkeypatch, autotuner_runs):
    """autotuner_runs, with the autotuners' in-process choices cleared and nothing written to Triton's
    on-disk timings (a refused candidate times as infinite: it must not be cached for later runs)."""
    for kernel in tuning.AUTOTUNED.values():
        monkeypatch.setattr(kernel.tuned, "cache", {})
        monkeypatch.setattr(kernel.tuned, "cache_results", False)
    return autotuner_runs


@pytest.mark.autotuned
def test_the_autotuner_skips_a_candidate_out_of_shared_memory(monkeypatch, fresh_autotuner):
    """Unforced, a candidate Triton refuses is timed as infinite and another is chosen, as before."""
    forward = tuning.AUTOTUNED["forward"]
    big, small = (configs._config("forward", tiles, 4, 1) for tiles in ((64, 64), (32, 16)))
    monkeypatch.setattr(forward.tuned, "configs", [big, small])
    launches_run_out_of(monkeypatch, "forward", when=lambda kwargs: kwargs["BLOCK_M"] == 64)

    def do_bench(fn, warmup=0, rep=0, quantiles=None):
        fn()
        return [1.0, 1.0, 1.0] if quantiles else 1.0

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    check(*qkv((1, 2), 40, 40, 16, F32), True)
    assert fresh_autotuner["forward"] == 1
    assert forward.tuned.configs_timings[big][0] == float("inf")
    assert forward.last is small


@pytest.mark.autotuned
def test_an_unforced_launch_out_of_resources_is_left_as_triton_raised_it(monkeypatch, fresh_autotuner):
    """Without FLASH_TRITON_CONFIG no entry is to blame: Triton's OutOfResources passes unchanged, from
    the autotuner's launch and from the direct launch of a tuned key."""
    forward = tuning.AUTOTUNED["forward"]
    q, k, v = qkv((1, 2), 40, 40, 16, F32)
    for tuned in (False, True):
        with monkeypatch.context() as patched:
            launches_run_out_of(patched, "forward")
            with pytest.raises(OutOfResources):
                flash_attention_triton(q, k, v)
        assert fresh_autotuner["forward"] == 1 + tuned  # the refused call ran the autotuner, or not
        assert bool(forward.chosen) == tuned
        flash_attention_triton(q, k, v)  # refused by nothing: tunes the key, or launches it directly


# --------------------------------------------------------------------------- stored tables
GPU_NAME = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def stored_table(monkeypatch, tmp_path, autotuner_runs):
    """write(entries) stores a table for this run's GPU (on the CPU a GPU is named for the interpreter's
    launches) and points FLASH_TRITON_TUNING at it; the test starts as a fresh process would."""
    gpu = torch.cuda.get_device_name() if CUDA else GPU_NAME
    monkeypatch.setattr(stored, "gpu_name_of", lambda device: gpu)
    monkeypatch.setenv(stored.ENV, "off")  # until a table is written: the keys are tuned first
    path = tmp_path / "table.json"

    def write(entries, gpu_name=gpu):
        info = {"name": gpu_name, "capability": "9.0", "driver": "580", "cuda": "13.0", "commit": None,
                "dirty": False, "torch": torch.__version__, "triton": triton.__version__}  # fmt: skip
        stored_writing.write_table(path, info, entries, "test")
        for name in ("_NOTES", "_USED", "_VALID"):
            monkeypatch.setattr(stored, name, {})
        stored._read_stamped.cache_clear()
        monkeypatch.setenv(stored.ENV, str(path))

    return write


def _tuned_keys(q, k, v, causal):
    """The forward's and backward's tuning keys of these inputs, from one autotuned call."""
    out_and_grads(flash_attention_triton, q, k, v, torch.randn_like(q), causal)
    return {name: next(iter(kernel.chosen)) for name, kernel in tuning.AUTOTUNED.items()}


@pytest.mark.autotuned
def test_a_stored_case_launches_its_configuration_without_the_autotuner(stored_table, autotuner_runs):
    torch.manual_seed(0)
    q, k, v = qkv((1, 2), 70, 90, 32, F16)
    keys = _tuned_keys(q, k, v, True)
    chosen = {name: tuning.AUTOTUNED[name].chosen[key] for name, key in keys.items()}
    stored_table([stored_writing.case_entry(name, keys[name], chosen[name]) for name in keys])
    for kernel in tuning.AUTOTUNED.values():
        kernel.chosen.clear()
    autotuner_runs.update(forward=0, backward=0)
    check(q, k, v, True)
    assert autotuner_runs == {"forward": 0, "backward": 0}
    assert {name: tuning.AUTOTUNED[name].chosen[keys[name]] for name in keys} == chosen
    check(*qkv((1, 2), 70, 200, 32, F16), True)  # another key bucket: not stored, tuned
    assert autotuner_runs == {"forward": 1, "backward": 1}


@pytest.mark.autotuned
@pytest.mark.parametrize("fault", ["another GPU", "not a candidate"])
def test_a_stored_case_that_does_not_fit_is_tuned_with_a_note(stored_table, autotuner_runs, fault):
    torch.manual_seed(0)
    q, k, v = qkv((1, 2), 40, 40, 16, F32)
    keys = _tuned_keys(q, k, v, False)
    config = tuning.AUTOTUNED["forward"].chosen[keys["forward"]]
    if fault == "not a candidate":
        config = triton.Config({"BLOCK_M": 256, "BLOCK_N": 256}, num_warps=2, num_stages=7)
        stored_table([stored_writing.case_entry("forward", keys["forward"], config)])
    else:
        stored_table([stored_writing.case_entry("forward", keys["forward"], config)], gpu_name="NVIDIA H200")
    for kernel in tuning.AUTOTUNED.values():
        kernel.chosen.clear()
    autotuner_runs.update(forward=0, backward=0)
    with pytest.warns(stored.TuningTableWarning):
        check(q, k, v, False)
    assert autotuner_runs["forward"] == 1
    assert any("H200" in note or "1 of 1" in note or "drop" in note for note in stored.describe(GPU_NAME))


# --------------------------------------------------------------------------- GPU candidates
@pytest.mark.parametrize("kernel", sorted(fat.BLOCK_NAMES))
def test_gpu_candidates_survive_the_autotuning_cache(monkeypatch, kernel):
    """The autotuner's on-disk cache stores each timed config as its __dict__ and rebuilds it with
    Config(**fields): a config carrying anything else would fail on the second run of a shape."""
    monkeypatch.setattr(configs, "interpreting", lambda: False)
    candidates = configs._candidates(kernel)
    assert len(candidates) == sum(len(rows) for (k, _), rows in configs._CANDIDATES.items() if k == kernel)
    for config in candidates:
        rebuilt = triton.Config(**config.__dict__)
        assert str(rebuilt) == str(config)
        assert rebuilt.all_kwargs() == config.all_kwargs()


@pytest.mark.parametrize(
    "head_dim, dtype, widths",
    [
        (64, BF16, ["narrow"]),
        (80, BF16, ["mid"]),
        (96, F16, ["mid"]),
        (128, BF16, ["wide"]),
        (32, F32, ["narrow"]),
        (64, F32, ["wide"]),
        (80, F32, ["wide"]),
        (128, F32, ["widest"]),
        (192, BF16, ["deep"]),
        (256, F32, ["deepest"]),
    ],
)
def test_candidates_are_pruned_to_the_row_width(monkeypatch, head_dim, dtype, widths):
    """... and fp32 keeps only the two-pass backward."""
    monkeypatch.setattr(configs, "interpreting", lambda: False)
    q = torch.empty(1, dtype=dtype)
    for kernel in fat.BLOCK_NAMES:
        kept = configs._prune(configs._candidates(kernel), {"Q": q}, HEAD_DIM=head_dim)
        rows = [row for width in widths for row in configs._CANDIDATES[kernel, width]]
        if dtype == F32:
            rows = [row for row in rows if len(row) == 3]
        expected = [configs._config(kernel, *row) for row in rows]
        assert not (dtype == F32 and any(c.kwargs.get("ATOMIC_DQ") for c in kept))
        assert [str(c) for c in kept] == [str(c) for c in expected]


# --------------------------------------------------------------------------- GPU sizes
@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="long sequences take minutes in Triton's interpreter; run on a GPU")
@pytest.mark.parametrize("dtype", [F16, pytest.param(BF16, marks=pytest.mark.autotuned), F32])
@pytest.mark.parametrize(
    "batch_heads, seq_q, seq_k, head_dim", [((2, 4), 1031, 1031, 64), ((1, 8), 2048, 777, 128)]
)
@pytest.mark.parametrize("is_causal", [False, True])
def test_long_sequences(is_causal, batch_heads, seq_q, seq_k, head_dim, dtype):
    torch.manual_seed(0)
    check(*qkv(batch_heads, seq_q, seq_k, head_dim, dtype), is_causal)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="long sequences take minutes in Triton's interpreter; run on a GPU")
@pytest.mark.parametrize("dtype", [BF16, F16, F32])
@pytest.mark.parametrize("head_dim", [80, 96, 24, 72, 160, 256])
@pytest.mark.parametrize("is_causal", [False, True])
def test_long_sequences_at_every_form_of_head_dim(monkeypatch, is_causal, head_dim, dtype):
    """With descriptors wherever the inputs allow them (here from any size): TMA tiles wider than the
    head dim (24 as 32, 72 as 128) and rest parts through pointers beside them."""
    monkeypatch.setattr(launch, "TMA_MIN_WORK", 0)
    monkeypatch.setattr(launch, "TMA_MIN_WORK_FP32", 0)
    if head_dim > 128:
        monkeypatch.setenv(fat.CONFIG_ENV, SMALL_TILES)
    torch.manual_seed(0)
    check(*qkv((1, 3), 1100, 1300, head_dim, dtype), is_causal)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [F16, F32])  # fp32 also launches the column-major copies
def test_second_gpu_tensors_launch_on_their_device(dtype):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs to check that kernels run on the inputs' device")
    q, k, v = (t.requires_grad_() for t in random_qkv((1, 2), 64, 64, 32, dtype, device="cuda:1"))
    out = flash_attention_triton(q, k, v, is_causal=True)
    expected = reference_attention(q, k, v, is_causal=True)
    assert out.device == q.device
    torch.testing.assert_close(out.double(), expected, rtol=2e-2, atol=2e-3)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    expected_grads = torch.autograd.grad(expected.sum(), (q, k, v))
    for got, want in zip(grads, expected_grads, strict=True):
        assert got.device == q.device
        torch.testing.assert_close(got.double(), want.double(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("seq", [1, 17, 100])
@pytest.mark.parametrize("layout", ["heads_strided", "head_dim_strided"])
def test_column_major_copy(layout, seq, dtype):
    """TF32 operands' copies: the same values, with rows contiguous, from any strided input."""
    if layout == "heads_strided":
        t = torch.randn(3, seq, 2, 32, dtype=dtype, device=DEVICE).transpose(1, 2)
    else:
        t = torch.randn(3, 2, seq, 64, dtype=dtype, device=DEVICE)[..., ::2]
    copy = launch._column_major(t)
    assert copy.shape == t.shape and copy.stride() == (2 * 32 * seq, 32 * seq, 1, seq)
    assert torch.equal(copy, t)


def test_tuning_counts_the_one_pass_dq_conversion():
    """The autotuner times each backward candidate with this post-hook: the one-pass form's timing
    then includes converting its fp32 dQ, the two-pass form's nothing more."""
    assert tuning.AUTOTUNED["backward"].tuned.post_hook is tuning._convert_dq_while_tuning
    dq, dq_acc = torch.zeros(4, 8, dtype=F16), torch.full((4, 8), 0.5)
    args = {"DQ": dq, "DQ_ACC": dq_acc, "sm_scale": 0.25}
    tuning._convert_dq_while_tuning(args | {"ATOMIC_DQ": 0})
    assert dq.abs().sum() == 0
    tuning._convert_dq_while_tuning(args | {"ATOMIC_DQ": 1}, exception=RuntimeError())
    assert dq.abs().sum() == 0
    tuning._convert_dq_while_tuning(args | {"ATOMIC_DQ": 1})
    assert torch.equal(dq, torch.full((4, 8), 0.125, dtype=F16))  # the shares are summed unscaled


@pytest.mark.parametrize("call_ms", [0.5, 2.5, 7.0])
def test_tuning_times_long_candidates_over_more_calls(monkeypatch, call_ms):
    """A candidate is timed over TUNING_MS; one whose calls take longer than a tenth of that is timed
    again over enough time for TUNING_MIN_CALLS calls, and that second timing is the one used."""
    asked = []
    timings = [[call_ms, 0.9 * call_ms, 1.1 * call_ms], [1.01 * call_ms, call_ms, 1.02 * call_ms]]

    def do_bench(fn, warmup, rep, quantiles):
        asked.append(rep)
        return timings[len(asked) - 1]

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    timing = tuning._tuning_bench(lambda: None, quantiles=(0.5, 0.2, 0.8))
    if call_ms * tuning.TUNING_MIN_CALLS > tuning.TUNING_MS:
        assert asked[0] == tuning.TUNING_MS and asked[1] >= call_ms * tuning.TUNING_MIN_CALLS
        assert timing == timings[1]
    else:
        assert asked == [tuning.TUNING_MS] and timing == timings[0]


def test_configuration_examples_in_the_docs_parse():
    """docs/attention-kernel.md shows how to force configurations; each example must be accepted."""
    docs = Path(__file__).resolve().parents[1] / "docs" / "attention-kernel.md"
    examples = re.findall(r'FLASH_TRITON_CONFIG="([^"]+)"', docs.read_text())
    assert len(examples) >= 2
    for raw in examples:
        assert set(configs._parse_forced(raw)) <= set(fat.BLOCK_NAMES)
