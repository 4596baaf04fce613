"""Model sizes: one frozen config, named presets, parameter and FLOP counts in closed form."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

FLOP_MODES = ("forward", "forward_backward", "train_step")
# How flops_per_token counts the attention scores: the causal half, or the whole square.
ATTENTION_FLOP_COUNTS = ("causal", "full")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a pre-norm decoder-only Transformer (RMSNorm, RoPE, SwiGLU, untied LM head)."""

    name: str
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    vocab_size: int = 10_000
    context_length: int = 512
    batch_size: int = 4
    rope_theta: float = 10_000.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ModelConfig.name must be a non-empty str; got {self.name!r}")
        for field in (
            "d_model",
            "d_ff",
            "num_layers",
            "num_heads",
            "vocab_size",
            "context_length",
            "batch_size",
        ):
            value = getattr(self, field)
            # bool is an int subclass; True as a layer count is a bug, not a 1.
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"ModelConfig.{field} must be a positive int; got {value!r}")
        for field in ("rope_theta", "norm_eps"):
            value = getattr(self, field)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"ModelConfig.{field} must be a positive float; got {value!r}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"ModelConfig.d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(
                f"ModelConfig.head_dim = d_model / num_heads = {self.head_dim} must be even: "
                "rotary embeddings rotate pairs of features"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def replace(self, **changes: object) -> ModelConfig:
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    def num_parameters(self, include_embedding: bool = True) -> int:
        """Parameter count of `TransformerLM(self)`, in closed form.

        Per layer: q, k, v, o projections (4 * d_model^2), the three SwiGLU matrices
        (3 * d_model * d_ff) and two RMSNorm weights (2 * d_model). Outside the layers:
        the token embedding (vocab_size * d_model), the final RMSNorm (d_model) and the
        untied LM head (d_model * vocab_size). `include_embedding=False` drops only the
        token embedding table, which is a lookup, not a matmul; the LM head stays.
        """
        d, f, v = self.d_model, self.d_ff, self.vocab_size
        per_layer = 4 * d * d + 3 * d * f + 2 * d
        total = self.num_layers * per_layer + d + d * v
        return total + v * d if include_embedding else total

    def flops_per_token(self, seq_len: int, mode: str = "forward", *, attention: str = "causal") -> int:
        """Floating-point operations per token of a sequence of `seq_len` tokens.

        Convention of PaLM (Chowdhery et al., 2022, "PaLM: Scaling Language Modeling
        with Pathways", Appendix B), used for model FLOPs utilization (MFU):

            N_matmul = num_layers * (4 * d_model^2 + 3 * d_model * d_ff) + d_model * vocab_size
            forward  = 2 * N_matmul + 4 * num_layers * seq_len * d_model    (attention="full")
            forward  = 2 * N_matmul + 2 * num_layers * seq_len * d_model    (attention="causal")

        2 * N_matmul: one multiply and one add per weight of the q, k, v, o projections,
        the three SwiGLU matrices and the LM head (embedding lookup and norms do no
        matmul). 4 * num_layers * seq_len * d_model: QK^T and AV, each 2 * seq_len * d_model
        per token, over the whole seq_len x seq_len square, as PaLM counts them.

        `attention="causal"` (the default) counts half of that square: the model's attention is
        causal, and the upper triangle the mask removes is work a causal kernel skips (SDPA's
        flash backend and kernels.FlashAttentionTriton do), so the step's useful work is half the
        square, as the attention benchmarks count it (kernels.attention_inputs.attention_flops).
        The naive attention computes the whole square and then masks it: its MFU counts the model's
        work, not the masked half it does beyond it. `attention="full"` counts the whole square,
        what a counter of the naive attention's matmuls (FlopCounterMode) sees.

        `forward_backward` and `train_step` are 3 * forward: the backward computes two
        matmuls (input and weight gradients) for each forward one; AdamW's elementwise
        update is negligible. MFU = flops_per_token * tokens per second / peak FLOP/s.
        """
        if mode not in FLOP_MODES:
            raise ValueError(f"unknown mode {mode!r}; accepted: {', '.join(FLOP_MODES)}")
        if attention not in ATTENTION_FLOP_COUNTS:
            raise ValueError(
                f"attention: unknown value {attention!r}; accepted: {', '.join(ATTENTION_FLOP_COUNTS)}"
            )
        if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len <= 0:
            raise ValueError(f"seq_len must be a positive int; got {seq_len!r}")
        if seq_len > self.context_length:
            raise ValueError(
                f"seq_len ({seq_len}) exceeds context_length ({self.context_length}) of preset {self.name!r}"
            )
        d, f, v, n_layers = self.d_model, self.d_ff, self.vocab_size, self.num_layers
        n_matmul = n_layers * (4 * d * d + 3 * d * f) + d * v
        # QK^T and AV per token: 2 * seq_len * d each over the whole square, half of it when causal.
        attention_matmuls = (2 if attention == "causal" else 4) * n_layers * seq_len * d
        forward = 2 * n_matmul + attention_matmuls
        return forward if mode == "forward" else 3 * forward


PRESETS: dict[str, ModelConfig] = {
    config.name: config
    for config in (
        # Tiny sizes for CPU tests and smoke runs.
        ModelConfig("tiny", d_model=64, d_ff=256, num_layers=2, num_heads=4, context_length=128),
        ModelConfig("mini", d_model=256, d_ff=1024, num_layers=4, num_heads=4, context_length=256),
        ModelConfig("small", d_model=768, d_ff=3072, num_layers=12, num_heads=12),
        ModelConfig("medium", d_model=1024, d_ff=4096, num_layers=24, num_heads=16),
        ModelConfig("large", d_model=1280, d_ff=5120, num_layers=36, num_heads=20),
        ModelConfig("xl", d_model=1600, d_ff=6400, num_layers=48, num_heads=25),
        ModelConfig("2.7b", d_model=2560, d_ff=10240, num_layers=32, num_heads=32),
    )
}


def get_preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; accepted: {', '.join(PRESETS)}") from None
