import pytest
import torch
import torch.nn.functional as F

from model.loss import cross_entropy

# fp32 against fp32: the two differ only in summation order.
TOL = dict(rtol=1e-6, atol=1e-6)

SHAPES = [(2, 3, 7), (5, 33), (64,)]  # (B, T, V), (N, V), a single position (V,)


def make_inputs(shape, scale=1.0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(shape, generator=gen) * scale).to(dtype)
    targets = torch.randint(shape[-1], shape[:-1], generator=gen)
    return logits, targets


def torch_reference(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_torch_value_and_grad(shape):
    logits, targets = make_inputs(shape)
    ours_in = logits.clone().requires_grad_()
    ref_in = logits.clone().requires_grad_()
    ours, ref = cross_entropy(ours_in, targets), torch_reference(ref_in, targets)
    torch.testing.assert_close(ours, ref, **TOL)
    ours.backward()
    ref.backward()
    torch.testing.assert_close(ours_in.grad, ref_in.grad, **TOL)


def test_huge_logits_stay_finite_and_exact():
    # exp(1e4) overflows even fp64; without the max subtracted the loss would be inf or nan.
    logits, targets = make_inputs((4, 9, 50), scale=1e4)
    ours = cross_entropy(logits, targets)
    assert torch.isfinite(ours)
    torch.testing.assert_close(ours.double(), torch_reference(logits.double(), targets), rtol=1e-6, atol=0)


def test_bf16_logits_are_computed_in_fp32():
    logits, targets = make_inputs((4, 9, 1000), dtype=torch.bfloat16)
    ours = cross_entropy(logits, targets)
    assert ours.dtype == torch.float32
    # Upcasting bf16 to fp32 is exact, so the fp32 computation on the same values is the reference.
    torch.testing.assert_close(ours, torch_reference(logits.float(), targets), **TOL)
    exact = torch_reference(logits.double(), targets)
    torch_bf16 = torch_reference(logits, targets)
    assert torch_bf16.dtype == torch.bfloat16
    assert (ours.double() - exact).abs() <= (torch_bf16.double() - exact).abs()


def test_bf16_grad_keeps_input_dtype():
    logits, targets = make_inputs((3, 17), dtype=torch.bfloat16)
    logits.requires_grad_()
    cross_entropy(logits, targets).backward()
    assert logits.grad.dtype == torch.bfloat16 and torch.isfinite(logits.grad).all()


def test_rejects_float_targets():
    logits, targets = make_inputs((2, 5))
    with pytest.raises(ValueError, match="targets must be int64"):
        cross_entropy(logits, targets.float())


def test_rejects_mismatched_shapes():
    logits, targets = make_inputs((2, 3, 5))
    with pytest.raises(ValueError, match=r"must share leading dims, got \(2, 3, 5\) and \(3,\)"):
        cross_entropy(logits, targets[0])
