"""What the FlashAttention implementations accept, checked in one place.

Both implementations take q of shape (batch, seq_q, d) or (batch, heads, seq_q, d) and k, v of the
same rank with seq_k rows; they work on the 4-d form and give the output back in the input's form.

Causal masking is aligned top-left, as in `torch.nn.functional.scaled_dot_product_attention`:
query i sees keys 0..i, whatever the two lengths. With more queries than keys the last queries see
every key; no row is ever empty, because key 0 is always visible.
"""

from __future__ import annotations

import torch

# Every multiple of 8 from 16 to 256: the head dims of the model presets (80 for 2.7b) and the usual
# others (96, 112, 160, 192, 256). 16 is the smallest tile a tensor-core matmul (tl.dot) takes.
HEAD_DIMS = tuple(range(16, 257, 8))
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _names(dtypes: tuple[torch.dtype, ...]) -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in dtypes)


def check_attention_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise ValueError naming the argument at fault and what is accepted."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
        if t.ndim not in (3, 4):
            raise ValueError(
                f"{name} must have 3 dimensions (batch, seq, d) or 4 (batch, heads, seq, d); "
                f"got shape {tuple(t.shape)}"
            )
        if t.dtype not in DTYPES:
            raise ValueError(f"{name} has dtype {t.dtype}; accepted: {_names(DTYPES)}")
        if t.shape[-2] == 0:
            raise ValueError(f"{name} has no rows (shape {tuple(t.shape)}); a sequence needs at least one")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; all three must share a device")
        if t.dtype != q.dtype:
            raise ValueError(f"{name} has dtype {t.dtype} but q has {q.dtype}; all three must share a dtype")
        if t.ndim != q.ndim:
            raise ValueError(
                f"{name} has {t.ndim} dimensions but q has {q.ndim}; all three must share a rank"
            )
        if t.shape[:-2] != q.shape[:-2]:
            raise ValueError(
                f"{name} has leading (batch, heads) dimensions {tuple(t.shape[:-2])} but q has "
                f"{tuple(q.shape[:-2])}; they must match"
            )
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(
            f"q has head dim {q.shape[-1]}; accepted: multiples of 8 from {HEAD_DIMS[0]} to {HEAD_DIMS[-1]} "
            f"({HEAD_DIMS[0]}, {HEAD_DIMS[1]}, ..., {HEAD_DIMS[-1]})"
        )
    for name, t in (("k", k), ("v", v)):
        if t.shape[-1] != q.shape[-1]:
            raise ValueError(f"{name} has head dim {t.shape[-1]} but q has {q.shape[-1]}; they must match")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k has {k.shape[-2]} rows but v has {v.shape[-2]}; keys and values must pair up")


def check_output_grad(grad_out: torch.Tensor, out_shape: torch.Size, dtype: torch.dtype) -> None:
    if grad_out.shape != out_shape:
        raise ValueError(f"grad_out has shape {tuple(grad_out.shape)}; expected {tuple(out_shape)}")
    if grad_out.dtype != dtype:
        raise ValueError(f"grad_out has dtype {grad_out.dtype}; expected {dtype}, the output's dtype")


def check_logsumexp(lse: torch.Tensor, q: torch.Tensor) -> None:
    """The forward's logsumexp L: float32, one value per query row, on q's device."""
    if lse.shape != q.shape[:-1] or lse.dtype != torch.float32 or lse.device != q.device:
        raise ValueError(
            f"lse has shape {tuple(lse.shape)}, dtype {lse.dtype} on {lse.device}; expected float32 of "
            f"shape {tuple(q.shape[:-1])} (q.shape[:-1]) on {q.device}"
        )


def as_heads(t: torch.Tensor) -> torch.Tensor:
    """(batch, seq, d) -> (batch, 1, seq, d) as a view; 4-d tensors are returned as they are."""
    return t.unsqueeze(1) if t.ndim == 3 else t


def attention_flops(batch: int, heads: int, seq_q: int, seq_k: int, head_dim: int, is_causal: bool) -> float:
    """Matmul FLOPs of one forward: q k^T and p v, 2 * seq_q * seq_k * d each (x2 for multiply-add).

    Causal attention skips about half of the score matrix (exactly half for long square inputs).
    Backward does 2.5 times the forward's matmul work (five matmuls to the forward's two), so
    forward+backward is 3.5 times.
    """
    flops = 4.0 * batch * heads * seq_q * seq_k * head_dim
    return flops / 2 if is_causal else flops
