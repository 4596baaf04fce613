"""The same model as TransformerLM in plain PyTorch modules: a baseline to compare against.

Parameter names match TransformerLM's, so `ReferenceLM.load_from` is a strict
state-dict copy: a missing or extra parameter fails loudly instead of staying random.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from model.config import ModelConfig
from model.transformer import TransformerLM


def _rotary_tables(
    config: ModelConfig, device: torch.device | str | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every (position, pair) angle, each (context_length, head_dim / 2)."""
    half = torch.arange(0, config.head_dim, 2, device=device, dtype=torch.float32)
    inv_freq = 1.0 / config.rope_theta ** (half / config.head_dim)
    positions = torch.arange(config.context_length, device=device, dtype=torch.float32)
    angles = torch.outer(positions, inv_freq)
    return angles.cos(), angles.sin()


def _apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # Adjacent features (2i, 2i + 1) form pair i.
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)  # (B, H, T, Dh / 2) each
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)  # (B, H, T, Dh)


class _Attention(nn.Module):
    def __init__(self, config: ModelConfig, **factory: object) -> None:
        super().__init__()
        d = config.d_model
        self.num_heads = config.num_heads
        self.q_proj = nn.Linear(d, d, bias=False, **factory)
        self.k_proj = nn.Linear(d, d, bias=False, **factory)
        self.v_proj = nn.Linear(d, d, bias=False, **factory)
        self.output_proj = nn.Linear(d, d, bias=False, **factory)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq_len, d_model = x.shape
        heads = (batch, seq_len, self.num_heads, d_model // self.num_heads)
        q = self.q_proj(x).view(heads).transpose(1, 2)  # (B, H, T, Dh)
        k = self.k_proj(x).view(heads).transpose(1, 2)  # (B, H, T, Dh)
        v = self.v_proj(x).view(heads).transpose(1, 2)  # (B, H, T, Dh)
        q, k = _apply_rotary(q, cos, sin), _apply_rotary(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, Dh)
        return self.output_proj(out.transpose(1, 2).reshape(batch, seq_len, d_model))


class _FeedForward(nn.Module):
    def __init__(self, config: ModelConfig, **factory: object) -> None:
        super().__init__()
        d, f = config.d_model, config.d_ff
        self.w1 = nn.Linear(d, f, bias=False, **factory)
        self.w2 = nn.Linear(f, d, bias=False, **factory)
        self.w3 = nn.Linear(d, f, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))  # (B, T, D)


class _Block(nn.Module):
    def __init__(self, config: ModelConfig, **factory: object) -> None:
        super().__init__()
        self.ln1 = nn.RMSNorm(config.d_model, eps=config.norm_eps, **factory)
        self.attn = _Attention(config, **factory)
        self.ln2 = nn.RMSNorm(config.d_model, eps=config.norm_eps, **factory)
        self.ffn = _FeedForward(config, **factory)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), cos, sin)  # (B, T, D)
        return x + self.ffn(self.ln2(x))  # (B, T, D)


class ReferenceLM(nn.Module):
    """TransformerLM's architecture from torch.nn modules, F.silu and F.sdpa.

    The rotary tables are computed in fp32 the usual way, not copied from RotaryEmbedding.
    """

    def __init__(
        self,
        config: ModelConfig,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        factory = {"device": device, "dtype": dtype}
        self.token_embeddings = nn.Embedding(config.vocab_size, d, **factory)
        self.layers = nn.ModuleList(_Block(config, **factory) for _ in range(config.num_layers))
        self.ln_final = nn.RMSNorm(d, eps=config.norm_eps, **factory)
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False, **factory)
        cos, sin = _rotary_tables(config, device)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    @classmethod
    def load_from(cls, lm: TransformerLM) -> ReferenceLM:
        """A ReferenceLM with `lm`'s config, device, dtype and a copy of its weights."""
        weight = lm.lm_head.weight
        reference = cls(lm.config, device=weight.device, dtype=weight.dtype)
        reference.load_state_dict(lm.state_dict(), strict=True)
        return reference

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        seq_len = token_ids.shape[1]
        if seq_len > self.config.context_length:
            raise ValueError(f"seq_len {seq_len} exceeds context_length {self.config.context_length}")
        cos, sin = self.cos[:seq_len], self.sin[:seq_len]  # (T, Dh / 2)
        x = self.token_embeddings(token_ids)  # (B, T, D)
        for layer in self.layers:
            x = layer(x, cos, sin)  # (B, T, D)
        return self.lm_head(self.ln_final(x))  # (B, T, V)
