"""Scaled dot-product attention implementations, chosen by name, and the attention layer.

Every implementation takes q of shape (..., Tq, d), k and v of shape (..., Tk, d) and `is_causal`,
and returns (..., Tq, d) in the dtype of q. The causal mask is aligned top-left, as in
F.scaled_dot_product_attention: query i sees keys 0..i, whatever the two lengths.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from model.layers import Linear, RotaryEmbedding

AttentionFn = Callable[..., torch.Tensor]


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> None:
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ValueError(
            f"q, k, v must be (..., T, d); got shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the last dimension; got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length; got {k.shape[-2]} and {v.shape[-2]}")


def _causal_mask(seq_q: int, seq_k: int, device: torch.device) -> torch.Tensor:
    """True above the diagonal: key j is in the future of query i when j > i."""
    return torch.ones(seq_q, seq_k, dtype=torch.bool, device=device).triu(diagonal=1)


def naive_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = True
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + mask) v, materializing the full (T, T) score matrix."""
    _check_qkv(q, k, v, is_causal)
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])  # (..., Tq, Tk)
    if is_causal:
        scores = scores.masked_fill(_causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    # Subtracting the row max keeps exp() <= 1; key 0 is never masked, so the max is finite.
    scores = scores - scores.amax(dim=-1, keepdim=True)
    weights = scores.exp()
    weights = weights / weights.sum(dim=-1, keepdim=True)  # (..., Tq, Tk)
    return torch.einsum("...qk,...kd->...qd", weights, v)  # (..., Tq, d)


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = True) -> torch.Tensor:
    """PyTorch's fused kernel (flash, memory-efficient or math backend, picked by PyTorch)."""
    _check_qkv(q, k, v, is_causal)
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)  # (..., Tq, d)


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = True
) -> torch.Tensor:
    """The definition in float64, for checking the others; returns float64."""
    _check_qkv(q, k, v, is_causal)
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Tq, Tk)
    if is_causal:
        mask = torch.zeros(q.shape[-2], k.shape[-2], dtype=torch.float64, device=q.device)
        scores = scores + mask.masked_fill(_causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (..., Tq, d)


def flash_pytorch_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = True
) -> torch.Tensor:
    """kernels.FlashAttentionPyTorch: tiled online softmax in plain PyTorch (head dims 16 to 256)."""
    from kernels.flash_attention_pytorch import flash_attention_pytorch  # imported on first use

    return flash_attention_pytorch(q, k, v, is_causal=is_causal)


def flash_triton_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = True
) -> torch.Tensor:
    """kernels.FlashAttentionTriton: Triton kernels forward and backward (CUDA, or Triton's interpreter).

    Imported on first use, so that the model imports on machines without Triton.
    """
    from kernels.flash_attention_triton import flash_attention_triton

    return flash_attention_triton(q, k, v, is_causal=is_causal)


ATTENTION_IMPLS: dict[str, AttentionFn] = {
    "naive": naive_attention,
    "sdpa": sdpa_attention,
    "flash_pytorch": flash_pytorch_attention,
    "flash_triton": flash_triton_attention,
}


def register_attention(name: str, fn: AttentionFn, *, replace: bool = False) -> None:
    """Make `fn(q, k, v, is_causal=True)` selectable by `name` in the model."""
    if name in ATTENTION_IMPLS and not replace:
        raise ValueError(f"attention {name!r} is already registered; pass replace=True to override it")
    ATTENTION_IMPLS[name] = fn


def get_attention(name: str) -> AttentionFn:
    try:
        return ATTENTION_IMPLS[name]
    except KeyError:
        raise ValueError(f"unknown attention {name!r}; accepted: {', '.join(ATTENTION_IMPLS)}") from None


class CausalMultiHeadSelfAttention(nn.Module):
    """Multi-head causal self-attention with RoPE on queries and keys."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        rope: RotaryEmbedding | None,
        attention: str = "naive",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        if rope is not None and rope.head_dim != d_model // num_heads:
            raise ValueError(
                f"rope.head_dim ({rope.head_dim}) must equal d_model / num_heads ({d_model // num_heads})"
            )
        # Resolved here so that a bad name fails at construction, not at the first forward.
        self.attention_fn = get_attention(attention)
        self.attention = attention
        self.num_heads = num_heads
        self.rope = rope
        self.q_proj = Linear(d_model, d_model, device=device, dtype=dtype)
        self.k_proj = Linear(d_model, d_model, device=device, dtype=dtype)
        self.v_proj = Linear(d_model, d_model, device=device, dtype=dtype)
        self.output_proj = Linear(d_model, d_model, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # view/transpose rather than einops.rearrange: less host time per call (NOTES.md: Measurements
        # behind comments in the code), and the larger presets' bf16 steps are bound by host time
        # (NOTES.md: Whole training step as a CUDA graph).
        batch, seq_len, d_model = x.shape
        heads = (batch, seq_len, self.num_heads, d_model // self.num_heads)
        q = self.q_proj(x).view(heads).transpose(1, 2)  # (B, H, T, Dh)
        k = self.k_proj(x).view(heads).transpose(1, 2)  # (B, H, T, Dh)
        v = self.v_proj(x).view(heads).transpose(1, 2)  # (B, H, T, Dh)
        if self.rope is not None:
            q, k = self.rope(q), self.rope(k)
        out = self.attention_fn(q, k, v, is_causal=True)  # (B, H, T, Dh)
        out = out.transpose(1, 2).reshape(batch, seq_len, d_model)  # (B, T, D)
        return self.output_proj(out)  # (B, T, D)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, attention={self.attention!r}"
