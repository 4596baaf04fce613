"""FlashAttentionTriton as registered operators: torch.library's checks, and the model with
attention="flash_triton" compiled whole (fullgraph: a graph break is an error) against eager.

On the CPU the kernels run in Triton's interpreter, so the sizes stay small (2-7 s a test here).
"""

import pytest
import torch

from kernels import flash_attention_triton as fat
from model.config import ModelConfig
from model.loss import cross_entropy
from model.transformer import TransformerLM
from tests.attention_checks import F16, F32, random_qkv

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
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
    q, k, v = random_qkv((1, 1), 16, 16, 24, F32, DEVICE)
    compiled = torch.compile(fat.flash_attention_triton, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="head dim 24"):
        compiled(q, k, v)
