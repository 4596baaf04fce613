"""The language model under test: config and presets, layers, attention registry, LMs,
AdamW and cross-entropy, precision switches, and a toy model for precision experiments."""

from model.attention import (
    ATTENTION_IMPLS,
    CausalMultiHeadSelfAttention,
    get_attention,
    naive_attention,
    reference_attention,
    register_attention,
    sdpa_attention,
)
from model.config import PRESETS, ModelConfig, get_preset
from model.layers import Embedding, Linear, RMSNorm, RotaryEmbedding, SwiGLU
from model.loss import cross_entropy
from model.optim import OPTIMIZER_IMPLS, AdamW, build_optimizer, clip_grad_norm
from model.precision import (
    PRECISIONS,
    autocast,
    check_precision,
    grad_scaler,
    parse_dtype,
    tf32,
    tf32_enabled,
)
from model.reference import ReferenceLM
from model.toy import ToyModel, autocast_dtypes
from model.transformer import TransformerBlock, TransformerLM

__all__ = [
    "ATTENTION_IMPLS",
    "OPTIMIZER_IMPLS",
    "PRECISIONS",
    "PRESETS",
    "AdamW",
    "CausalMultiHeadSelfAttention",
    "Embedding",
    "Linear",
    "ModelConfig",
    "RMSNorm",
    "ReferenceLM",
    "RotaryEmbedding",
    "SwiGLU",
    "ToyModel",
    "TransformerBlock",
    "TransformerLM",
    "autocast",
    "autocast_dtypes",
    "build_optimizer",
    "check_precision",
    "clip_grad_norm",
    "cross_entropy",
    "get_attention",
    "get_preset",
    "grad_scaler",
    "naive_attention",
    "parse_dtype",
    "reference_attention",
    "register_attention",
    "sdpa_attention",
    "tf32",
    "tf32_enabled",
]
