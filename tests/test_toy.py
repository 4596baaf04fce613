import pytest
import torch
import torch.nn.functional as F

from model.loss import cross_entropy
from model.toy import ToyModel, autocast_dtypes

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
LOW = {"bf16": BF16, "fp16": F16}


def torch_cross_entropy(logits, targets):
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten())


# The loss is fp32 either way, for different reasons: ours upcasts the logits itself, torch's
# cross_entropy is on autocast's fp32 list.
LOSSES = [pytest.param(cross_entropy, id="own-loss"), pytest.param(torch_cross_entropy, id="torch-loss")]


def run(precision, device, loss_fn=cross_entropy):
    torch.manual_seed(0)
    model = ToyModel(6, 5).to(device)
    x = torch.randn(3, 4, 6, device=device)  # (B, T, in_features)
    return autocast_dtypes(model, x, precision, device, loss_fn=loss_fn)


def test_forward_shape():
    assert ToyModel(6, 5)(torch.randn(3, 4, 6)).shape == (3, 4, 5)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, cuda_only])])
def test_fp32_is_fp32_throughout(device):
    assert run("fp32", device) == dict(params=F32, fc1=F32, ln=F32, logits=F32, loss=F32, grads=F32)


@pytest.mark.gpu
@cuda_only
@pytest.mark.parametrize("loss_fn", LOSSES)
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_cuda_autocast_dtypes(precision, loss_fn):
    # CUDA autocast runs linear in low precision and layer_norm in fp32 (it is on the fp32 list),
    # so fc2 takes an fp32 input and casts it down again.
    low = LOW[precision]
    expected = dict(params=F32, fc1=low, ln=F32, logits=low, loss=F32, grads=F32)
    assert run(precision, "cuda", loss_fn) == expected


@pytest.mark.parametrize("loss_fn", LOSSES)
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_cpu_autocast_dtypes(precision, loss_fn):
    # Unlike CUDA, CPU autocast has no layer_norm entry in its fp32 list (seen on torch 2.13):
    # layer_norm runs on the low-precision fc1 output and returns low precision. Gradients still
    # come back fp32 because the parameters are fp32.
    low = LOW[precision]
    expected = dict(params=F32, fc1=low, ln=low, logits=low, loss=F32, grads=F32)
    assert run(precision, "cpu", loss_fn) == expected


def test_hooks_removed_and_grads_replaced():
    torch.manual_seed(0)
    model = ToyModel(6, 5)
    x = torch.randn(8, 6)
    autocast_dtypes(model, x, "bf16", "cpu")
    first = [p.grad.clone() for p in model.parameters()]
    autocast_dtypes(model, x, "bf16", "cpu")
    for p, g in zip(model.parameters(), first, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=0, atol=0)  # replaced, not accumulated
    assert all(not m._forward_hooks for m in model.modules())


def test_mixed_parameter_dtypes_are_reported():
    model = ToyModel(6, 5)
    model.ln.to(BF16)
    with pytest.raises(ValueError, match="parameters do not share one dtype"):
        autocast_dtypes(model, torch.randn(2, 6), "bf16", "cpu")
