"""FlashAttentionTriton as registered operators: torch.library's checks, and the model with
attention="flash_triton" compiled whole (fullgraph: a graph break is an error) against eager.

On the CPU the kernels run in Triton's interpreter, so the sizes stay small (2-7 s a test here).
"""

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from kernels import flash_attention_triton as fat
from kernels.flash_attention_triton import operators, tuning  # noqa: F401 - operators registers torch.ops.kernels
from model.config import ModelConfig
from model.loss import cross_entropy
from model.transformer import TransformerLM
from perf.workloads.compiling import compiled
from tests.attention_checks import F16, F32, random_qkv

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
# torch 2.7 renamed the limit and kept the old name; 2.6 has only the old one.
LIMIT = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
FORWARD = torch.ops.kernels.flash_attention_forward.default
BACKWARD = torch.ops.kernels.flash_attention_backward.default


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 2), (3,)], ids=["4d", "3d"])
def test_forward_operator_passes_opcheck(shape, is_causal):
    q, k, v = (t.requires_grad_() for t in random_qkv(shape, 24, 40, 16, F32, DEVICE))
    torch.library.opcheck(FORWARD, (q, k, v, is_causal))


def test_backward_operator_passes_opcheck():
    q, k, v = random_qkv((1, 2), 16, 32, 32, F32, DEVICE)
    out, lse = FORWARD(q, k, v, True)
    torch.library.opcheck(BACKWARD, (q, k, v, out, lse, torch.randn_like(out), True))


def test_logsumexp_is_not_differentiable():
    q, k, v = (t.requires_grad_() for t in random_qkv((1, 1), 16, 16, 16, F32, DEVICE))
    out, lse = FORWARD(q, k, v, False)
    assert out.requires_grad and not lse.requires_grad


def _model(dtype: torch.dtype) -> TransformerLM:
    config = ModelConfig("op-test", d_model=64, d_ff=128, num_layers=2, num_heads=2, vocab_size=256)
    torch.manual_seed(0)
    return TransformerLM(config, attention="flash_triton", device=DEVICE, dtype=dtype)


@pytest.mark.parametrize("dtype", [F32, F16], ids=["fp32", "fp16"])
def test_compiled_model_has_no_graph_break_and_eager_gradients(dtype):
    torch._dynamo.reset()
    model = _model(dtype)
    tokens = torch.randint(0, 256, (2, 33), device=DEVICE)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def loss_and_grads(step):
        model.zero_grad(set_to_none=True)
        loss = cross_entropy(step(inputs).float(), targets)
        loss.backward()
        return loss.detach(), [p.grad.float() for p in model.parameters()]

    eager_loss, eager_grads = loss_and_grads(model)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager" if not CUDA else "inductor")
    loss, grads = loss_and_grads(compiled)
    tolerance = dict(rtol=1e-4, atol=1e-5) if dtype == F32 else dict(rtol=2e-2, atol=2e-3)
    torch.testing.assert_close(loss, eager_loss, **tolerance)
    for got, expected in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(got, expected, **tolerance)


def test_compiled_call_rejects_bad_inputs_as_eager_does():
    q, k, v = random_qkv((1, 1), 16, 16, 20, F32, DEVICE)
    compiled = torch.compile(fat.flash_attention_triton, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="head dim 20"):
        compiled(q, k, v)


def test_new_sequence_lengths_recompile_once_into_a_dynamic_graph():
    """The fake implementations take symbolic lengths: a second length recompiles the model once with
    the length dynamic (torch's automatic dynamic shapes), and later lengths reuse that graph."""
    torch._dynamo.reset()
    model = _model(F32)
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, backend=counter, fullgraph=True)
    for seq_len in (16, 24, 41, 57):
        tokens = torch.randint(0, 256, (2, seq_len), device=DEVICE)
        torch.testing.assert_close(compiled(tokens), model(tokens), rtol=1e-4, atol=1e-5)
    assert counter.frame_count == 2


def test_recompiles_past_the_limit_are_an_error_never_an_eager_fallback():
    """With dynamic shapes off each length compiles anew; past the limit the suite's compiled() raises
    instead of running the model eagerly, as dynamo would by default."""
    model = _model(F32)
    with (
        torch._dynamo.config.patch(automatic_dynamic_shapes=False, **{LIMIT: 2}),
        compiled(model, backend="aot_eager") as fast,
    ):
        for seq_len in (16, 24):
            fast(torch.randint(0, 256, (1, seq_len), device=DEVICE))
        with pytest.raises(Exception, match=r"(?i)recompile|cache.?(size)?.?limit"):
            fast(torch.randint(0, 256, (1, 40), device=DEVICE))


def test_forced_configuration_and_tuning_work_under_compile(monkeypatch):
    """The compiled graph calls the launchers at run time: FLASH_TRITON_CONFIG is read there (a bad one
    fails as in eager, a good one runs), and a key not tuned yet is tuned there."""
    q, k, v = random_qkv((1, 2), 40, 40, 32, F32, DEVICE)
    fast = torch.compile(fat.flash_attention_triton, fullgraph=True, backend="aot_eager", dynamic=False)
    monkeypatch.setenv(fat.CONFIG_ENV, "forward:BLOCK_M=48,BLOCK_N=16")
    with pytest.raises(Exception, match=f"{fat.CONFIG_ENV}: the forward entry needs BLOCK_M"):
        fast(q, k, v, True)
    monkeypatch.setenv(fat.CONFIG_ENV, "forward:BLOCK_M=16,BLOCK_N=16,num_stages=1")
    torch.testing.assert_close(fast(q, k, v, True), fat.flash_attention_triton(q, k, v, True))
    assert fat.chosen_configs()["forward"].endswith("(forced)")
    monkeypatch.delenv(fat.CONFIG_ENV)
    monkeypatch.setattr(tuning.AUTOTUNED["forward"], "chosen", {})
    torch.testing.assert_close(fast(q, k, v, True), fat.flash_attention_triton(q, k, v, True))
    assert len(tuning.AUTOTUNED["forward"].chosen) == 1
