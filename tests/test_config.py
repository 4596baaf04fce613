import dataclasses

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from model import PRESETS, ModelConfig, TransformerLM, get_preset


def count_parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_presets_are_the_documented_set():
    assert list(PRESETS) == ["tiny", "mini", "small", "medium", "large", "xl", "2.7b"]
    for name, config in PRESETS.items():
        assert config.name == name
        assert get_preset(name) is config


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("small", (768, 3072, 12, 12)),
        ("medium", (1024, 4096, 24, 16)),
        ("large", (1280, 5120, 36, 20)),
        ("xl", (1600, 6400, 48, 25)),
        ("2.7b", (2560, 10240, 32, 32)),
    ],
)
def test_large_presets_shapes(name, shape):
    config = get_preset(name)
    assert (config.d_model, config.d_ff, config.num_layers, config.num_heads) == shape
    assert (config.vocab_size, config.context_length, config.batch_size) == (10_000, 512, 4)


@pytest.mark.parametrize("name", list(PRESETS))
def test_num_parameters_matches_the_model(name):
    config = get_preset(name)
    # The meta device allocates nothing, so even 2.7b is built in milliseconds.
    lm = TransformerLM(config, device=torch.device("meta"))
    assert config.num_parameters() == count_parameters(lm)
    embedding = lm.token_embeddings.weight.numel()
    assert config.num_parameters(include_embedding=False) == count_parameters(lm) - embedding


def test_flops_per_token_hand_count_tiny():
    tiny = get_preset("tiny")  # d_model 64, d_ff 256, 2 layers, vocab 10_000
    per_layer = 4 * 64 * 64 + 3 * 64 * 256  # q, k, v, o; w1, w2, w3
    n_matmul = 2 * per_layer + 64 * 10_000  # + LM head
    assert n_matmul == 771_072
    # QK^T and AV at seq_len 100, 2 layers: causal counts half of the 100 x 100 square.
    causal, full = 2 * 2 * 100 * 64, 4 * 2 * 100 * 64
    assert tiny.flops_per_token(100) == 2 * 771_072 + causal == 1_567_744
    assert tiny.flops_per_token(100, attention="causal") == 1_567_744
    assert tiny.flops_per_token(100, "forward_backward") == 3 * 1_567_744
    assert tiny.flops_per_token(100, "train_step") == 3 * 1_567_744
    assert tiny.flops_per_token(100, attention="full") == 2 * 771_072 + full == 1_593_344
    assert tiny.flops_per_token(100, "train_step", attention="full") == 3 * 1_593_344


# Not seq_len 1: einsum lowers a (1 x d) @ (d x 1) product to an elementwise op, uncounted.
@pytest.mark.parametrize("seq_len", [2, 17, 128])
def test_flops_per_token_matches_flop_counter(seq_len):
    # FlopCounterMode counts every matmul the naive model runs, attention's whole masked square
    # included: the full-square count.
    config = get_preset("tiny")
    batch = 2
    lm = TransformerLM(config, attention="naive")
    token_ids = torch.randint(0, config.vocab_size, (batch, seq_len))
    with FlopCounterMode(display=False) as forward_counter:
        logits = lm(token_ids)
    with FlopCounterMode(display=False) as backward_counter:
        logits.sum().backward()
    tokens = batch * seq_len
    forward = forward_counter.get_total_flops()
    both = forward + backward_counter.get_total_flops()
    assert forward == config.flops_per_token(seq_len, "forward", attention="full") * tokens
    assert both == config.flops_per_token(seq_len, "forward_backward", attention="full") * tokens
    # The causal count is the full one less half of the attention's matmuls.
    half_square = 2 * config.num_layers * seq_len * config.d_model
    assert config.flops_per_token(seq_len) == config.flops_per_token(seq_len, attention="full") - half_square


def test_unknown_preset_lists_accepted():
    with pytest.raises(ValueError, match=r"unknown preset 'foo'; accepted: tiny, mini, small"):
        get_preset("foo")


def test_unknown_flop_mode_lists_accepted():
    with pytest.raises(ValueError, match=r"accepted: forward, forward_backward, train_step"):
        get_preset("tiny").flops_per_token(16, "backward")


@pytest.mark.parametrize("attention", ["half", "sdpa", True])
def test_unknown_attention_count_names_the_argument(attention):
    with pytest.raises(ValueError, match=r"attention: unknown value .*; accepted: causal, full"):
        get_preset("tiny").flops_per_token(16, attention=attention)


@pytest.mark.parametrize("seq_len", [0, 129, 1.5])
def test_flops_per_token_rejects_bad_seq_len(seq_len):
    with pytest.raises(ValueError, match="seq_len"):
        get_preset("tiny").flops_per_token(seq_len)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"d_model": 0}, r"d_model must be a positive int; got 0"),
        ({"num_layers": True}, r"num_layers must be a positive int"),
        ({"vocab_size": 10.0}, r"vocab_size must be a positive int"),
        ({"name": ""}, r"name must be a non-empty str"),
        ({"norm_eps": 0.0}, r"norm_eps must be a positive float"),
        ({"rope_theta": -1.0}, r"rope_theta must be a positive float"),
        ({"num_heads": 5}, r"d_model \(64\) must be divisible by num_heads \(5\)"),
        ({"d_model": 60}, r"head_dim = d_model / num_heads = 15 must be even"),
    ],
)
def test_invalid_fields_are_named(changes, message):
    with pytest.raises(ValueError, match=message):
        get_preset("tiny").replace(**changes)


def test_replace_and_frozen():
    tiny = get_preset("tiny")
    longer = tiny.replace(context_length=256)
    assert longer.context_length == 256 and tiny.context_length == 128
    assert longer.head_dim == tiny.head_dim == 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiny.d_model = 128


def test_config_defaults():
    config = ModelConfig("custom", d_model=32, d_ff=64, num_layers=1, num_heads=2)
    assert config.vocab_size == 10_000 and config.context_length == 512
    assert config.rope_theta == 10_000.0 and config.norm_eps == 1e-5
