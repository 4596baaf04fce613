"""Decoder-only Transformer language model built from model.layers."""

from __future__ import annotations

import torch
from torch import nn

from model.attention import CausalMultiHeadSelfAttention
from model.config import ModelConfig, get_preset
from model.layers import Embedding, Linear, RMSNorm, RotaryEmbedding, SwiGLU

TOKEN_DTYPES = (torch.int32, torch.int64)


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attn(ln1(x)), then x + ffn(ln2(x))."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        rope: RotaryEmbedding | None,
        attention: str = "naive",
        eps: float = 1e-5,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.ln1 = RMSNorm(d_model, eps=eps, device=device, dtype=dtype)
        self.attn = CausalMultiHeadSelfAttention(
            d_model, num_heads, rope, attention=attention, device=device, dtype=dtype
        )
        self.ln2 = RMSNorm(d_model, eps=eps, device=device, dtype=dtype)
        self.ffn = SwiGLU(d_model, d_ff, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))  # (B, T, D)
        return x + self.ffn(self.ln2(x))  # (B, T, D)


class TransformerLM(nn.Module):
    """Token ids (B, T) -> next-token logits (B, T, vocab_size); LM head untied."""

    def __init__(
        self,
        config: ModelConfig,
        attention: str = "naive",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        c = config
        self.token_embeddings = Embedding(c.vocab_size, c.d_model, device=device, dtype=dtype)
        # One table for all layers: it depends only on head_dim and the positions.
        rope = RotaryEmbedding(c.head_dim, c.context_length, theta=c.rope_theta, device=device)
        self.layers = nn.ModuleList(
            TransformerBlock(
                c.d_model,
                c.num_heads,
                c.d_ff,
                rope,
                attention=attention,
                eps=c.norm_eps,
                device=device,
                dtype=dtype,
            )
            for _ in range(c.num_layers)
        )
        self.ln_final = RMSNorm(c.d_model, eps=c.norm_eps, device=device, dtype=dtype)
        self.lm_head = Linear(c.d_model, c.vocab_size, device=device, dtype=dtype)

    @classmethod
    def from_preset(
        cls,
        name: str,
        attention: str = "naive",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> TransformerLM:
        return cls(get_preset(name), attention=attention, device=device, dtype=dtype)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        # Shape and dtype only: checking id values would read them back, a device sync.
        if token_ids.ndim != 2 or token_ids.dtype not in TOKEN_DTYPES:
            raise ValueError(
                f"token_ids must be a (batch, seq_len) tensor of int32 or int64; got shape "
                f"{tuple(token_ids.shape)} and dtype {token_ids.dtype}"
            )
        seq_len = token_ids.shape[1]
        if not 0 < seq_len <= self.config.context_length:
            raise ValueError(
                f"seq_len {seq_len} must lie in [1, {self.config.context_length}] "
                f"(context_length of {self.config.name!r})"
            )
        x = self.token_embeddings(token_ids)  # (B, T, D)
        for layer in self.layers:
            x = layer(x)  # (B, T, D)
        return self.lm_head(self.ln_final(x))  # (B, T, V)
