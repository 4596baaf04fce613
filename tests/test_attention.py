import pytest
import torch

from model import (
    ATTENTION_IMPLS,
    CausalMultiHeadSelfAttention,
    RotaryEmbedding,
    get_attention,
    reference_attention,
    register_attention,
)

IMPLS = ["naive", "sdpa"]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """16 ulps of the dtype. The naive path rounds the scores (|s| <= ~5 for unit-normal
    inputs, so exp() inherits ~5 ulps), the row max, the normalizer and a sum over up to
    64 keys, all in the input dtype; measured worst case: 6.5 ulps (fp32, 64 keys)."""
    eps = torch.finfo(dtype).eps
    return {"rtol": 16 * eps, "atol": 16 * eps}


def random_qkv(*shape: int, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    return [torch.randn(*shape).to(dtype) for _ in range(3)]


@pytest.fixture
def restore_registry():
    saved = dict(ATTENTION_IMPLS)
    yield
    ATTENTION_IMPLS.clear()
    ATTENTION_IMPLS.update(saved)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("is_causal", [True, False])
@pytest.mark.parametrize("seq_len", [1, 16, 17, 64])
@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_fp64_reference(impl, is_causal, seq_len, dtype):
    torch.manual_seed(0)
    q, k, v = random_qkv(2, 3, seq_len, 16, dtype=dtype)  # (B, H, T, Dh)
    out = get_attention(impl)(q, k, v, is_causal=is_causal)
    assert out.dtype == dtype and out.shape == q.shape
    expected = reference_attention(q, k, v, is_causal=is_causal)
    torch.testing.assert_close(out.double(), expected, **tolerance(dtype))


@pytest.mark.parametrize("impl", IMPLS)
def test_any_leading_dims_and_unequal_lengths_without_mask(impl):
    torch.manual_seed(0)
    q = torch.randn(5, 7, 32)  # (H, Tq, Dh)
    k, v = torch.randn(5, 11, 32), torch.randn(5, 11, 32)  # (H, Tk, Dh)
    out = get_attention(impl)(q, k, v, is_causal=False)
    assert out.shape == (5, 7, 32)
    expected = reference_attention(q, k, v, is_causal=False)
    torch.testing.assert_close(out.double(), expected, **tolerance(torch.float32))


@pytest.mark.parametrize("impl", IMPLS)
def test_causal_output_ignores_the_future(impl):
    torch.manual_seed(0)
    q, k, v = random_qkv(1, 2, 17, 16)
    changed = [t.clone() for t in (q, k, v)]
    for t in changed:
        t[..., 9, :] += 1.0
    attention = get_attention(impl)
    before, after = attention(q, k, v), attention(*changed)
    torch.testing.assert_close(after[..., :9, :], before[..., :9, :], rtol=0, atol=0)
    assert not torch.allclose(after[..., 9:, :], before[..., 9:, :])


@pytest.mark.parametrize("impl", [*IMPLS, "reference"])
@pytest.mark.parametrize("seq_q, seq_k", [(4, 6), (6, 4)])
def test_causal_differing_lengths_align_top_left(impl, seq_q, seq_k):
    """Query i sees keys 0..i, as F.scaled_dot_product_attention's is_causal does."""
    torch.manual_seed(0)
    q, k, v = torch.randn(seq_q, 8), torch.randn(seq_k, 8), torch.randn(seq_k, 8)
    allowed = torch.ones(seq_q, seq_k, dtype=torch.bool).tril()
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    attention = reference_attention if impl == "reference" else get_attention(impl)
    got = attention(q, k, v, is_causal=True)
    torch.testing.assert_close(got.float(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", IMPLS)
def test_rejects_mismatched_shapes(impl):
    attention = get_attention(impl)
    with pytest.raises(ValueError, match="q and k must share the last dimension"):
        attention(torch.randn(4, 8), torch.randn(4, 6), torch.randn(4, 8))
    with pytest.raises(ValueError, match="k and v must have the same length"):
        attention(torch.randn(4, 8), torch.randn(4, 8), torch.randn(5, 8), is_causal=False)


def test_unknown_attention_lists_accepted():
    with pytest.raises(ValueError, match=r"unknown attention 'flash'; accepted: naive, sdpa"):
        get_attention("flash")


@pytest.mark.usefixtures("restore_registry")
def test_register_attention():
    def wrapped_naive(q, k, v, is_causal=True):
        return get_attention("naive")(q, k, v, is_causal=is_causal)

    with pytest.raises(ValueError, match="'naive' is already registered; pass replace=True"):
        register_attention("naive", wrapped_naive)
    register_attention("custom", wrapped_naive)
    assert get_attention("custom") is wrapped_naive
    layer = CausalMultiHeadSelfAttention(32, 4, None, attention="custom")
    assert layer.attention_fn is wrapped_naive
    register_attention("sdpa", wrapped_naive, replace=True)
    assert get_attention("sdpa") is wrapped_naive


def test_layer_rejects_bad_arguments_at_construction():
    with pytest.raises(ValueError, match="unknown attention 'nope'; accepted: naive, sdpa"):
        CausalMultiHeadSelfAttention(32, 4, None, attention="nope")
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by num_heads \(4\)"):
        CausalMultiHeadSelfAttention(30, 4, None)
    with pytest.raises(ValueError, match=r"rope.head_dim \(16\) must equal .* \(8\)"):
        CausalMultiHeadSelfAttention(32, 4, RotaryEmbedding(16, 64))


def layer_by_hand(layer: CausalMultiHeadSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """One head at a time, by slicing the projections' features, with fp64 attention."""
    head_dim = x.shape[-1] // layer.num_heads
    q_all, k_all, v_all = (x @ proj.weight.T for proj in (layer.q_proj, layer.k_proj, layer.v_proj))
    outs = []
    for h in range(layer.num_heads):
        features = slice(h * head_dim, (h + 1) * head_dim)
        q, k, v = q_all[..., features], k_all[..., features], v_all[..., features]  # (B, T, Dh)
        if layer.rope is not None:
            q, k = layer.rope(q), layer.rope(k)
        outs.append(reference_attention(q, k, v, is_causal=True).float())  # (B, T, Dh)
    return torch.cat(outs, dim=-1) @ layer.output_proj.weight.T  # (B, T, D)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("with_rope", [True, False])
@pytest.mark.parametrize("seq_len", [1, 17])
def test_layer_matches_hand_computation(impl, with_rope, seq_len):
    torch.manual_seed(0)
    rope = RotaryEmbedding(8, max_seq_len=32) if with_rope else None
    layer = CausalMultiHeadSelfAttention(32, 4, rope, attention=impl)
    x = torch.randn(2, seq_len, 32)  # (B, T, D)
    out = layer(x)
    assert out.shape == x.shape
    torch.testing.assert_close(out, layer_by_hand(layer, x))


def test_layer_naive_and_sdpa_agree_with_the_same_weights():
    torch.manual_seed(0)
    rope = RotaryEmbedding(16, max_seq_len=64)
    naive = CausalMultiHeadSelfAttention(64, 4, rope, attention="naive")
    sdpa = CausalMultiHeadSelfAttention(64, 4, rope, attention="sdpa")
    sdpa.load_state_dict(naive.state_dict())
    x = torch.randn(3, 33, 64)
    torch.testing.assert_close(sdpa(x), naive(x))
