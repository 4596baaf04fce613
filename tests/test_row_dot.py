"""The backward's row-dot kernel: D = rowsum(dO * O), and the zeroed fp32 dQ a one-pass backward adds
into, written by the same launch (on a GPU when there is one, else in Triton's interpreter)."""

import pytest
import torch

from kernels.flash_attention_triton import launch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _row_dot(shape, zero: bool, strided_grad: bool = False):
    """Delta and the dQ buffer (first filled with NaN) after one row-dot launch on fp16 tensors."""
    batch, heads, seq, head_dim = shape
    torch.manual_seed(0)
    out = torch.randn(shape, device=DEVICE).half()
    grad_out = torch.randn(shape, device=DEVICE).half()
    if strided_grad:  # dO as (batch, seq, heads, d) seen through a transpose, as autograd may hand it
        grad_out = grad_out.transpose(1, 2).contiguous().transpose(1, 2)
    delta = torch.full((batch, heads, seq), float("nan"), device=DEVICE)
    dq_acc = torch.full(shape, float("nan"), device=DEVICE)
    signature = ("row-dot test", shape, zero, strided_grad)
    launch._row_dot(signature, out, grad_out, delta, heads, seq, head_dim, dq_acc if zero else None)
    expected = (out.float() * grad_out.float()).sum(-1)
    return delta, dq_acc, expected


@pytest.mark.parametrize("head_dim", [64, 80])  # 80: a power-of-two block of 128, its padding masked
@pytest.mark.parametrize("seq", [64, 100])  # 100: a ragged last block of rows
def test_the_row_dot_zeroes_dq_in_the_same_launch(head_dim, seq):
    shape = (2, 3, seq, head_dim)
    delta, dq_acc, expected = _row_dot(shape, zero=True)
    torch.testing.assert_close(delta, expected, atol=1e-3, rtol=1e-4)
    assert torch.equal(dq_acc, torch.zeros(shape, device=DEVICE))


def test_the_row_dot_leaves_dq_alone_unless_asked_and_reads_strided_grads():
    shape = (2, 3, 100, 80)
    delta, dq_acc, expected = _row_dot(shape, zero=False, strided_grad=True)
    torch.testing.assert_close(delta, expected, atol=1e-3, rtol=1e-4)
    assert dq_acc.isnan().all()  # a two-pass backward's row dot writes no dQ
