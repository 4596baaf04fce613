import math

import pytest
import torch

from model import Embedding, Linear, RMSNorm, RotaryEmbedding, SwiGLU

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# Std of a normal truncated at +-3 std, relative to the untruncated std:
# sqrt(1 - 2 * 3 * pdf(3) / (cdf(3) - cdf(-3))).
TRUNCATED_STD_RATIO = math.sqrt(1 - 6 * math.exp(-4.5) / math.sqrt(2 * math.pi) / math.erf(3 / math.sqrt(2)))


def assert_close_to_fp64(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """These layers compute in fp32 and round once to the output dtype, so the fp64 result
    rounded to that dtype must match within PyTorch's default tolerances for the dtype."""
    torch.testing.assert_close(actual, expected.to(actual.dtype))


def assert_init_statistics(weight: torch.Tensor, std: float) -> None:
    samples = weight.detach().double().flatten()
    # Sampling error of the std is std / sqrt(2n) (0.2% at n = 131072); allow 5 of them.
    assert samples.std().item() == pytest.approx(
        std * TRUNCATED_STD_RATIO, rel=5 / math.sqrt(2 * samples.numel())
    )
    assert abs(samples.mean().item()) < 5 * std / math.sqrt(samples.numel())
    assert samples.abs().max().item() <= 3 * std


def test_linear_init_and_forward():
    torch.manual_seed(0)
    layer = Linear(256, 512)
    assert layer.weight.shape == (512, 256)
    assert_init_statistics(layer.weight, math.sqrt(2 / (256 + 512)))
    x = torch.randn(3, 5, 256)
    torch.testing.assert_close(layer(x), x @ layer.weight.T)
    assert [name for name, _ in layer.named_parameters()] == ["weight"]


def test_embedding_init_and_forward():
    torch.manual_seed(0)
    layer = Embedding(1024, 128)
    assert layer.weight.shape == (1024, 128)
    assert_init_statistics(layer.weight, 1.0)
    token_ids = torch.randint(0, 1024, (3, 17))
    assert torch.equal(layer(token_ids), layer.weight[token_ids])


@pytest.mark.parametrize("layer_type", [Linear, Embedding])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_factory_arguments(layer_type, dtype):
    layer = layer_type(8, 4, device="meta", dtype=dtype)
    assert layer.weight.dtype == dtype and layer.weight.is_meta


def rms_norm_fp64(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.double()
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.double()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d_model", [64, 17])
@pytest.mark.parametrize("scale", [1.0, 1000.0])
def test_rms_norm_matches_definition(dtype, d_model, scale):
    # scale 1000: the sum of squares reaches 6.4e7, beyond fp16's 65504 unless upcast.
    torch.manual_seed(0)
    norm = RMSNorm(d_model, eps=1e-5)
    torch.testing.assert_close(norm.weight, torch.ones(d_model))
    with torch.no_grad():
        norm.weight.normal_()
    x = (torch.randn(3, 5, d_model) * scale).to(dtype)
    out = norm(x)
    assert out.dtype == dtype
    expected = rms_norm_fp64(x, norm.weight, 1e-5)
    assert_close_to_fp64(out, expected)


def rotary_by_complex_product(x: torch.Tensor, positions: torch.Tensor, theta: float):
    """Pair i at position p, as the complex number x_2i + i x_2i+1, times exp(i p theta^(-2i/d))."""
    head_dim = x.shape[-1]
    pair = torch.arange(head_dim // 2, dtype=torch.float64)
    angles = positions.double()[..., None] * theta ** (-2 * pair / head_dim)  # (..., T, d / 2)
    pairs = torch.view_as_complex(x.double().unflatten(-1, (-1, 2)).contiguous())
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [2, 16, 64])
@pytest.mark.parametrize("seq_len", [1, 17, 128])
def test_rotary_matches_complex_product(dtype, head_dim, seq_len):
    torch.manual_seed(0)
    rope = RotaryEmbedding(head_dim, max_seq_len=128, theta=10_000.0)
    x = torch.randn(2, 3, seq_len, head_dim).to(dtype)  # (B, H, T, Dh)
    out = rope(x)
    assert out.dtype == dtype and out.shape == x.shape
    expected = rotary_by_complex_product(x, torch.arange(seq_len), 10_000.0)
    assert_close_to_fp64(out, expected)


def test_rotary_explicit_positions_broadcast():
    torch.manual_seed(0)
    rope = RotaryEmbedding(16, max_seq_len=64, theta=500.0)
    x = torch.randn(2, 3, 5, 16)  # (B, H, T, Dh)
    positions = torch.tensor([[[7, 0, 63, 1, 1]], [[2, 3, 4, 5, 6]]])  # (B, 1, T)
    expected = rotary_by_complex_product(x, positions, 500.0)
    assert_close_to_fp64(rope(x, positions), expected)
    torch.testing.assert_close(rope(x, torch.arange(5)), rope(x))


def test_rotary_position_zero_is_identity_and_norm_is_preserved():
    torch.manual_seed(0)
    rope = RotaryEmbedding(32, max_seq_len=128)
    x = torch.randn(4, 100, 32)
    out = rope(x)
    assert torch.equal(out[:, 0], x[:, 0])
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))
    # Each pair is rotated separately, so each pair keeps its own norm.
    pair_norms = out.unflatten(-1, (-1, 2)).norm(dim=-1)  # (4, 100, 16)
    torch.testing.assert_close(pair_norms, x.unflatten(-1, (-1, 2)).norm(dim=-1))


@pytest.mark.parametrize("positions", [torch.tensor([0, 64]), torch.tensor([-1, 3])])
def test_rotary_rejects_out_of_range_positions(positions):
    rope = RotaryEmbedding(8, max_seq_len=64)
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 64\)"):
        rope(torch.randn(2, 8), positions)


def test_rotary_rejects_long_sequences_and_odd_head_dim():
    rope = RotaryEmbedding(8, max_seq_len=64)
    with pytest.raises(ValueError, match="sequence length 65 exceeds max_seq_len 64"):
        rope(torch.randn(65, 8))
    with pytest.raises(ValueError, match="expected head_dim 8"):
        rope(torch.randn(4, 6))
    with pytest.raises(ValueError, match="head_dim must be even"):
        RotaryEmbedding(7, max_seq_len=64)


@pytest.mark.parametrize("d_model, d_ff", [(64, 256), (17, 40)])
def test_swiglu_matches_definition(d_model, d_ff):
    torch.manual_seed(0)
    ffn = SwiGLU(d_model, d_ff)
    assert ffn.w1.weight.shape == ffn.w3.weight.shape == (d_ff, d_model)
    assert ffn.w2.weight.shape == (d_model, d_ff)
    x = torch.randn(3, 7, d_model)
    w1, w2, w3 = (w.weight.double() for w in (ffn.w1, ffn.w2, ffn.w3))
    a = x.double() @ w1.T
    expected = (a * torch.sigmoid(a) * (x.double() @ w3.T)) @ w2.T
    assert_close_to_fp64(ffn(x), expected)
