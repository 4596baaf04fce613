"""FlashAttentionTriton and flash_attention_triton: eager calls through an autograd.Function, calls
under torch.compile through registered operators, both over the launchers.

The operators, `torch.ops.kernels.flash_attention_forward` and `..._backward`, are torch.library custom
ops registered when this module is imported. Their fake implementations let torch.compile trace
through them without a graph break (Dynamo cannot trace the autotuner's Python) and keep each call one
opaque node; the backward operator is the forward's autograd formula. The fakes take symbolic lengths,
so a new sequence length recompiles a model once, into a graph with the length dynamic.
"""

from __future__ import annotations

import torch

from kernels.attention_inputs import as_heads, check_attention_inputs, check_output_grad
from kernels.flash_attention_triton.launch import attention_backward, attention_forward, check_runnable


def _forward_impl(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """O in q's shape and dtype and L of shape q.shape[:-1] in fp32, from 3-d or 4-d inputs."""
    out, lse = attention_forward(as_heads(q), as_heads(k), as_heads(v), is_causal)
    if q.ndim == 4:  # a view costs host time even where it changes nothing
        return out, lse
    return out.view(q.shape[:-1] + out.shape[-1:]), lse.view(q.shape[:-1])


def _backward_impl(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    is_causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV, contiguous, in the inputs' shapes and dtype."""
    if q.ndim == 4:  # a view costs host time even where it changes nothing
        return attention_backward(q, k, v, out, lse, grad_out, is_causal)
    out4 = as_heads(out)
    dq, dk, dv = attention_backward(
        as_heads(q), as_heads(k), as_heads(v), out4, lse.view(out4.shape[:-1]), as_heads(grad_out), is_causal
    )
    return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape)


# The operators for torch.compile, with their fake implementations and the autograd formula (see the
# module docstring).
_forward_op = torch.library.custom_op("kernels::flash_attention_forward", _forward_impl, mutates_args=())


@_forward_op.register_fake
def _(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    return q.new_empty(q.shape[:-1] + v.shape[-1:]), q.new_empty(q.shape[:-1], dtype=torch.float32)


_backward_op = torch.library.custom_op("kernels::flash_attention_backward", _backward_impl, mutates_args=())


@_backward_op.register_fake
def _(q, k, v, out, lse, grad_out, is_causal):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _save_for_backward(ctx, inputs, output) -> None:
    q, k, v, is_causal = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.mark_non_differentiable(lse)
    ctx.is_causal = bool(is_causal)


def _backward(ctx, grad_out: torch.Tensor, _grad_lse: torch.Tensor | None):
    q, k, v, out, lse = ctx.saved_tensors
    check_output_grad(grad_out, out.shape, out.dtype)
    dq, dk, dv = _backward_op(q, k, v, out, lse, grad_out, ctx.is_causal)
    return dq, dk, dv, None


_forward_op.register_autograd(_backward, setup_context=_save_for_backward)


class _EagerFunction(torch.autograd.Function):
    """The same launchers for eager calls: the operators' dispatch costs host time that an
    autograd.Function does not (NOTES.md: Host cost per attention call)."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool):
        out, lse = _forward_impl(q, k, v, is_causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.is_causal = is_causal
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        check_output_grad(grad_out, out.shape, out.dtype)
        return (*_backward_impl(q, k, v, out, lse, grad_out, ctx.is_causal), None)


class FlashAttentionTriton:
    """softmax(q k^T / sqrt(d) [+ causal mask]) v with Triton kernels, forward and backward.

    q: (batch, seq_q, d) or (batch, heads, seq_q, d); k, v: the same rank with seq_k rows. Head dims:
    every multiple of 8 from 16 to 256; fp32 (TF32 dots), fp16, bf16. Saves the logsumexp L, shape
    q.shape[:-1], fp32.
    `apply` works as an autograd.Function's would: eagerly through one, under torch.compile through
    the operators `torch.ops.kernels.flash_attention_forward` and `..._backward`.
    """

    @staticmethod
    def apply(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
        check_attention_inputs(q, k, v)
        check_runnable(q)
        if torch.compiler.is_compiling():
            out, _lse = _forward_op(q, k, v, bool(is_causal))
            return out
        return _EagerFunction.apply(q, k, v, bool(is_causal))


def flash_attention_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False
) -> torch.Tensor:
    return FlashAttentionTriton.apply(q, k, v, is_causal)
