import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from model import ReferenceLM, TransformerLM, get_preset

# fp32 throughout: comparisons use assert_close's default fp32 tolerances.
CONFIG = get_preset("tiny")


def build(attention: str = "naive", seed: int = 0) -> TransformerLM:
    torch.manual_seed(seed)
    return TransformerLM(CONFIG, attention=attention)


def random_tokens(batch: int, seq_len: int, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, CONFIG.vocab_size, (batch, seq_len), generator=generator)


@pytest.mark.parametrize("attention", ["naive", "sdpa"])
@pytest.mark.parametrize("batch, seq_len", [(1, 1), (2, 17), (3, 128)])
def test_logits_shape(attention, batch, seq_len):
    lm = build(attention)
    logits = lm(random_tokens(batch, seq_len))
    assert logits.shape == (batch, seq_len, CONFIG.vocab_size)
    assert logits.dtype == torch.float32
    assert lm.config is CONFIG


def test_same_seed_same_weights_and_logits():
    first, second = build(seed=0), build(seed=0)
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    tokens = random_tokens(2, 17)
    logits = first(tokens)
    assert torch.equal(logits, first(tokens))
    assert torch.equal(logits, second(tokens))
    assert not torch.equal(build(seed=1).lm_head.weight, first.lm_head.weight)


def test_naive_and_sdpa_agree_with_the_same_weights():
    naive = build("naive")
    sdpa = TransformerLM(CONFIG, attention="sdpa")
    sdpa.load_state_dict(naive.state_dict())
    tokens = random_tokens(2, 65)
    torch.testing.assert_close(sdpa(tokens), naive(tokens))


@pytest.mark.parametrize("attention", ["flash_pytorch", "flash_triton"])
def test_flash_attention_switched_in_by_name(attention):
    """The model with a FlashAttention implementation: same logits and gradients as with naive."""
    device = "cuda" if torch.cuda.is_available() else "cpu"  # Triton runs interpreted on the CPU
    naive = build("naive").to(device)
    flash = TransformerLM(CONFIG, attention=attention).to(device)
    flash.load_state_dict(naive.state_dict())
    tokens = random_tokens(2, 40).to(device)
    logits, flash_logits = naive(tokens), flash(tokens)
    # fp32 on a GPU: the Triton kernels use TF32 dots.
    tolerance = 2e-2 if device == "cuda" and attention == "flash_triton" else 1e-4
    torch.testing.assert_close(flash_logits, logits, rtol=tolerance, atol=tolerance)
    logits.square().mean().backward()
    flash_logits.square().mean().backward()
    for (name, a), (_, b) in zip(naive.named_parameters(), flash.named_parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=tolerance, atol=tolerance, msg=name)


@pytest.mark.parametrize("attention", ["naive", "sdpa"])
def test_lm_is_causal(attention):
    lm = build(attention)
    tokens = random_tokens(2, 33)
    changed = tokens.clone()
    changed[:, 20] = (changed[:, 20] + 1) % CONFIG.vocab_size
    before, after = lm(tokens), lm(changed)
    torch.testing.assert_close(after[:, :20], before[:, :20], rtol=0, atol=0)
    assert not torch.allclose(after[:, 20:], before[:, 20:])


@pytest.mark.parametrize("seq_len", [1, 17, 128])
def test_reference_lm_is_the_same_model(seq_len):
    lm = build()
    reference = ReferenceLM.load_from(lm)
    tokens = random_tokens(2, seq_len)
    torch.testing.assert_close(reference(tokens), lm(tokens))


def test_reference_lm_same_parameters_and_matmul_flops():
    lm = build()
    reference = ReferenceLM(CONFIG)
    assert [(n, p.shape) for n, p in reference.named_parameters()] == [
        (n, p.shape) for n, p in lm.named_parameters()
    ]
    # Only the projections (aten.mm): FlopCounterMode has no formula for the CPU sdpa kernel,
    # and both models run attention on the same (B, H, T, Dh) tensors.
    tokens = random_tokens(2, 17)
    counted = []
    for model in (lm, reference):
        with FlopCounterMode(display=False) as counter:
            model(tokens)
        counted.append(counter.get_flop_counts()["Global"][torch.ops.aten.mm])
    causal_attention = 2 * CONFIG.num_layers * 17 * CONFIG.d_model  # QK^T and AV, half the square
    assert counted[0] == counted[1] == (CONFIG.flops_per_token(17) - causal_attention) * tokens.numel()


@pytest.mark.parametrize("attention", ["naive", "sdpa"])
def test_every_parameter_gets_a_gradient(attention):
    lm = build(attention)
    tokens = random_tokens(2, 17)
    logits = lm(tokens[:, :-1])  # (B, T - 1, V)
    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    for name, parameter in lm.named_parameters():
        assert parameter.grad is not None, name
        assert parameter.grad.abs().sum() > 0, name


@pytest.mark.parametrize(
    ("token_ids", "message"),
    [
        (torch.zeros(2, CONFIG.context_length + 1, dtype=torch.long), r"seq_len 129 must lie"),
        (torch.zeros(2, 0, dtype=torch.long), r"seq_len 0 must lie in \[1, 128\]"),
        (torch.zeros(16, dtype=torch.long), r"\(batch, seq_len\) tensor"),
        (torch.zeros(2, 16), r"int32 or int64; got shape \(2, 16\) and dtype torch.float32"),
    ],
)
def test_rejects_bad_token_ids(token_ids, message):
    with pytest.raises(ValueError, match=message):
        build()(token_ids)


def test_int32_tokens_and_factory_arguments():
    lm = build()
    tokens = random_tokens(2, 9)
    torch.testing.assert_close(lm(tokens.int()), lm(tokens))
    half = TransformerLM(CONFIG, dtype=torch.bfloat16)
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}
    assert half(tokens).dtype == torch.bfloat16
    assert TransformerLM.from_preset("tiny", attention="sdpa").config is CONFIG
