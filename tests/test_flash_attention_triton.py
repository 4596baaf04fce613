"""FlashAttentionTriton against fp64: on a GPU when there is one, else in Triton's CPU interpreter.

The interpreter runs fp32 and fp16 at small sizes (its bf16 dot products are wrong in Triton 3.9);
bf16 and long sequences are marked `gpu`. On a GPU fp32 inputs use TF32 dots, whose tensor cores drop
the operands' mantissa bits past the 10th (truncation: up to 2^-10 relative, twice fp16's rounding);
measured, that put the kernel's error at up to 4.1 times naive attention's in fp16. They are held
against naive attention in bf16 (8-bit mantissa, rounding: 2^-9), which bounds what TF32 loses.
"""

import os
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import flash_attention_triton as fat
from kernels.attention_inputs import HEAD_DIMS
from kernels.flash_attention_triton import (
    flash_attention_triton,
    launch,
    tuning,
)
from model.attention import reference_attention
from tests.attention_checks import (
    BF16,
    F16,
    F32,
    bad_inputs,
    out_and_grads,
    random_qkv,
)
from tests.triton_attention import (
    BF16_ON_GPU,
    CUDA,
    DEVICE,
    SMALL_TILES,
    check,
    pin_configuration,
    qkv,
)


@pytest.fixture(autouse=True)
def pinned_configuration(request, monkeypatch):
    pin_configuration(request, monkeypatch)


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
