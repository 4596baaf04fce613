import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import flash_attention_pytorch as flash_attention_module
from kernels.attention_inputs import HEAD_DIMS
from kernels.flash_attention_pytorch import (
    MAX_KEY_TILES,
    MIN_KEY_TILE,
    FlashAttentionPyTorch,
    flash_attention_pytorch,
    flash_backward,
    flash_forward,
    key_tile_size,
)
from model.attention import reference_attention
from tests.attention_checks import BF16, F16, F32, bad_inputs, check_against_fp64, out_and_grads, random_qkv


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("seq_len", [1, 17, 100, 129])
@pytest.mark.parametrize("is_causal", [False, True])
def test_matches_fp64_at_odd_lengths(is_causal, seq_len, dtype):
    torch.manual_seed(0)
    check_against_fp64(
        FlashAttentionPyTorch, *random_qkv((2, 3), seq_len, seq_len, 32, dtype), is_causal
    )  # (B, H, T, d)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("seq_q, seq_k", [(17, 100), (100, 17), (1, 40), (40, 1), (33, 600)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_differing_query_and_key_lengths(is_causal, seq_q, seq_k, dtype):
    # (33, 600): 600 keys take 32-wide tiles; causal visits 2 of the 19, those up to the last query.
    torch.manual_seed(0)
    check_against_fp64(FlashAttentionPyTorch, *random_qkv((2, 2), seq_q, seq_k, 16, dtype), is_causal)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("is_causal", [False, True])
def test_every_head_dim(is_causal, head_dim, dtype):
    torch.manual_seed(0)
    check_against_fp64(FlashAttentionPyTorch, *random_qkv((1, 2), 33, 33, head_dim, dtype), is_causal)


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_three_dim_inputs(is_causal, dtype):
    torch.manual_seed(0)
    check_against_fp64(FlashAttentionPyTorch, *random_qkv((3,), 45, 37, 64, dtype), is_causal)  # (B, T, d)


@settings(max_examples=12, deadline=None)
@given(
    batch_heads=st.sampled_from([(1,), (2,), (1, 1), (2, 3)]),
    seq_q=st.integers(1, 80),
    seq_k=st.integers(1, 80),
    head_dim=st.sampled_from(HEAD_DIMS),
    dtype=st.sampled_from([F32, F16, BF16]),
    is_causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_shapes(batch_heads, seq_q, seq_k, head_dim, dtype, is_causal, seed):
    torch.manual_seed(seed)
    check_against_fp64(
        FlashAttentionPyTorch, *random_qkv(batch_heads, seq_q, seq_k, head_dim, dtype), is_causal
    )


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_non_contiguous_inputs_and_grad_out(is_causal, dtype):
    torch.manual_seed(0)
    # (B, T, H, d) projections seen as (B, H, T, d), as the model's attention layer produces them.
    q = torch.randn(2, 40, 3, 16).to(dtype).transpose(1, 2)  # (B, H, 40, d)
    k = torch.randn(2, 64, 3, 16).to(dtype).transpose(1, 2)[:, :, ::2]  # (B, H, 32, d), every other key
    v = torch.randn(2, 64, 3, 16).to(dtype).transpose(1, 2)[:, :, 1::2]  # (B, H, 32, d)
    grad_out = torch.randn(2, 3, 16, 40).to(dtype).transpose(-2, -1)  # (B, H, Tq, d), strided
    assert not any(t.is_contiguous() for t in (q, k, v, grad_out))
    check_against_fp64(FlashAttentionPyTorch, q, k, v, is_causal, grad_out=grad_out)


def test_expanded_grad_out():
    torch.manual_seed(0)
    q, k, v = (t.requires_grad_() for t in random_qkv((2,), 20, 20, 16, F32))
    flash_attention_pytorch(q, k, v, is_causal=True).sum().backward()  # grad_out: ones, stride 0
    ones = torch.ones(2, 20, 16, dtype=torch.float64)
    exact = out_and_grads(reference_attention, q.double(), k.double(), v.double(), ones, True)
    for got, e in zip((q.grad, k.grad, v.grad), exact[1:], strict=True):
        torch.testing.assert_close(got.double(), e, rtol=1e-5, atol=1e-5)


def test_public_function_and_keyword_form_agree():
    torch.manual_seed(0)
    q, k, v = random_qkv((2, 2), 30, 30, 16, F32)
    by_function = flash_attention_pytorch(q, k, v, is_causal=True)
    torch.testing.assert_close(
        FlashAttentionPyTorch.apply(q, k, v, is_causal=True), by_function, rtol=0, atol=0
    )
    torch.testing.assert_close(FlashAttentionPyTorch.apply(q, k, v, True), by_function, rtol=0, atol=0)
    assert not torch.equal(FlashAttentionPyTorch.apply(q, k, v), by_function)  # is_causal defaults to False


@pytest.mark.parametrize("seq_k", [1, 16, 17, 511, 512, 513, 1000, 4096, 100_000])
def test_key_tile_rule(seq_k):
    tile = key_tile_size(seq_k)
    assert tile >= MIN_KEY_TILE and tile % MIN_KEY_TILE == 0
    assert math.ceil(seq_k / tile) <= MAX_KEY_TILES
    # The smallest such tile: one step smaller would need more iterations.
    assert tile == MIN_KEY_TILE or math.ceil(seq_k / (tile - MIN_KEY_TILE)) > MAX_KEY_TILES


@pytest.mark.parametrize("key_tile", [16, 48, 128])
@pytest.mark.parametrize("is_causal", [False, True])
def test_any_key_tile_gives_the_same_result(is_causal, key_tile):
    torch.manual_seed(0)
    q, k, v = random_qkv((1, 2), 70, 90, 32, F32)
    out, lse = flash_forward(q, k, v, is_causal, key_tile=key_tile)
    default_out, default_lse = flash_forward(q, k, v, is_causal)
    torch.testing.assert_close(out, default_out)
    torch.testing.assert_close(lse, default_lse)
    grad_out = torch.randn_like(out)
    grads = flash_backward(q, k, v, out, lse, grad_out, is_causal, key_tile=key_tile)
    default_grads = flash_backward(q, k, v, out, lse, grad_out, is_causal)
    for got, expected in zip(grads, default_grads, strict=True):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("key_tile", [0, 8, 24, -16, 16.0])
def test_rejects_bad_key_tile(key_tile):
    q, k, v = random_qkv((1,), 4, 4, 16, F32)
    with pytest.raises(ValueError, match=rf"key_tile must be a positive multiple of 16; got {key_tile!r}"):
        flash_forward(q, k, v, key_tile=key_tile)


@pytest.mark.parametrize("name", list(bad_inputs()))
def test_rejects_bad_inputs(name):
    (q, k, v), message = bad_inputs()[name]
    with pytest.raises(ValueError, match=message):
        flash_attention_pytorch(q, k, v)


def test_backward_rejects_mismatched_lse_and_grad_out():
    q, k, v = random_qkv((2, 2), 8, 8, 16, F32)
    out, lse = flash_forward(q, k, v)
    with pytest.raises(ValueError, match=r"lse has shape \(2, 2\), dtype torch.float32 .*shape \(2, 2, 8\)"):
        flash_backward(q, k, v, out, lse[..., 0], torch.ones_like(out))
    with pytest.raises(ValueError, match=r"lse has .* dtype torch.float16 .*expected float32"):
        flash_backward(q, k, v, out, lse.half(), torch.ones_like(out))
    with pytest.raises(ValueError, match=r"grad_out has dtype torch.float16; expected torch.float32"):
        flash_backward(q, k, v, out, lse, torch.ones_like(out).half())


@pytest.mark.slow
def test_compiled_backward(monkeypatch):
    """One key tile, so torch.compile builds one small graph. On a 2-core CPU shared with another job:
    18 s with a cold inductor cache, 7 to 10 s with a warm one (dynamo and AOT tracing still run)."""
    torch.manual_seed(0)
    q, k, v = random_qkv((2, 2), 16, 16, 16, F32)
    grad_out = torch.randn_like(q)
    eager = out_and_grads(flash_attention_pytorch, q, k, v, grad_out, True)
    monkeypatch.setattr(flash_attention_module, "COMPILE_BACKWARD", True)
    compiled = out_and_grads(flash_attention_pytorch, q, k, v, grad_out, True)
    for got, expected in zip(compiled[1:], eager[1:], strict=True):
        torch.testing.assert_close(got, expected)
