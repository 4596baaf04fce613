"""Building blocks of the model, written from their definitions."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Module):
    """y = x W^T, no bias; W ~ truncated normal with std sqrt(2 / (in + out)) (Glorot)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        std = math.sqrt(2.0 / (in_features + out_features))
        weight = torch.empty(out_features, in_features, device=device, dtype=dtype)
        nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-3 * std, b=3 * std)
        self.weight = nn.Parameter(weight)  # (out, in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # F.linear rather than x @ W.T: autocast casts its inputs to the low-precision dtype.
        return F.linear(x, self.weight)  # (..., in) -> (..., out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class Embedding(nn.Module):
    """Lookup table; rows ~ truncated normal with std 1, cut at +-3."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        weight = torch.empty(num_embeddings, embedding_dim, device=device, dtype=dtype)
        nn.init.trunc_normal_(weight, mean=0.0, std=1.0, a=-3.0, b=3.0)
        self.weight = nn.Parameter(weight)  # (V, D)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        # F.embedding's backward is a dedicated scatter-add, cheaper than indexing's index_put.
        return F.embedding(token_ids, self.weight)  # (...) -> (..., D)

    def extra_repr(self) -> str:
        return f"num_embeddings={self.num_embeddings}, embedding_dim={self.embedding_dim}"


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in fp32 and returned in the input dtype."""

    def __init__(
        self,
        d_model: int,
        eps: float = 1e-5,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model, device=device, dtype=dtype))  # (D,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The mean of squares over d_model features overflows fp16 and loses bits in bf16.
        # F.rms_norm is the same formula in fewer kernels. Written out (six launches), together
        # with the RoPE upcast below, it made the small preset's host-bound bf16 forward slower than
        # the torch.nn reference model; after both, on a par (NOTES.md: Measurements behind
        # comments in the code).
        x32 = x.float()  # (..., D)
        normed = F.rms_norm(x32, (x32.shape[-1],), self.weight.float(), self.eps)  # (..., D)
        return normed.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class RotaryEmbedding(nn.Module):
    """Rotary position embedding on interleaved pairs (x[..., 0::2], x[..., 1::2]).

    Pair i at position p is rotated by the angle p * theta^(-2i / head_dim), as in
    RoFormer (Su et al., 2021). The cos/sin tables hold positions [0, max_seq_len).
    """

    def __init__(
        self,
        head_dim: int,
        max_seq_len: int,
        theta: float = 10_000.0,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"head_dim must be even to form pairs; got {head_dim}")
        self.head_dim = head_dim
        self.max_seq_len = max_seq_len
        self.theta = theta
        # Angles in fp64, rounded once to fp32 tables: at p = 511 an fp32 angle is off by ~3e-5 rad.
        exponent = torch.arange(0, head_dim, 2, device=device, dtype=torch.float64) / head_dim
        inv_freq = theta**-exponent  # (head_dim / 2,)
        positions = torch.arange(max_seq_len, device=device, dtype=torch.float64)
        angles = torch.outer(positions, inv_freq)  # (max_seq_len, head_dim / 2)
        # Not persistent: derived from the config, so checkpoints need not carry them.
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Rotate x (..., T, head_dim) at `positions` (..., T), broadcastable to x without
        its last dimension; None means 0..T-1. Returns x's shape and dtype.

        Explicit positions are range-checked, which reads them back to the host (a device
        sync); None is checked against the shape only, so the model's forward passes None.
        """
        seq_len = x.shape[-2]
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"x has last dimension {x.shape[-1]}; expected head_dim {self.head_dim}")
        if positions is None:
            if seq_len > self.max_seq_len:
                raise ValueError(
                    f"sequence length {seq_len} exceeds max_seq_len {self.max_seq_len} of the rotary tables"
                )
            cos, sin = self.cos[:seq_len], self.sin[:seq_len]  # (T, head_dim / 2)
        else:
            if positions.is_floating_point() or positions.is_complex():
                raise ValueError(f"positions must be an integer tensor; got {positions.dtype}")
            if positions.numel():
                low, high = int(positions.min()), int(positions.max())
                if low < 0 or high >= self.max_seq_len:
                    raise ValueError(f"positions must lie in [0, {self.max_seq_len}); got [{low}, {high}]")
            cos, sin = self.cos[positions], self.sin[positions]  # (..., T, head_dim / 2)
        # Rotate in fp32: bf16 cos/sin would keep only 3 significant digits of each rotation.
        # One upcast, then the pairs as views: upcasting each strided half copied twice.
        x_even, x_odd = x.float().unflatten(-1, (-1, 2)).unbind(-1)  # (..., T, head_dim / 2) each
        rotated_even = x_even * cos - x_odd * sin
        rotated_odd = x_even * sin + x_odd * cos
        rotated = torch.stack((rotated_even, rotated_odd), dim=-1)  # (..., T, head_dim / 2, 2)
        return rotated.flatten(-2).to(x.dtype)  # (..., T, head_dim)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, max_seq_len={self.max_seq_len}, theta={self.theta}"


class SwiGLU(nn.Module):
    """Gated feed-forward: w2(silu(w1 x) * w3 x) (Shazeer, 2020)."""

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.w1 = Linear(d_model, d_ff, device=device, dtype=dtype)
        self.w2 = Linear(d_ff, d_model, device=device, dtype=dtype)
        self.w3 = Linear(d_model, d_ff, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = F.silu(self.w1(x))  # (..., F)
        return self.w2(gate * self.w3(x))  # (..., D)
