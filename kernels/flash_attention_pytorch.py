"""FlashAttention-2 in plain PyTorch: tiled over keys with an online softmax, backward by recomputation.

The score matrix is never held whole: the forward walks the keys one tile at a time, keeping a running
row max m, a running normalizer l and an unnormalized output, and saves only the logsumexp
L = m + log(l) per query row. The backward recomputes each tile's probabilities from L.

All queries form one block (vectorized) and only the key tiles are a Python loop. Under torch.compile
that loop is unrolled, so the key tile grows with the key length to keep at most MAX_KEY_TILES
iterations (see `key_tile_size`). Inputs and masking follow kernels/attention_inputs.py; causal
attention skips the key tiles after the last query, which no query sees, and masks the rest by index.

`flash_backward` is a plain function of tensors so that it can go through torch.compile; the autograd
Function runs it compiled when the module's COMPILE_BACKWARD is True (off by default). A module global,
not a class attribute: torch.compile of a whole forward+backward reads it without a graph break.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from kernels.attention_inputs import as_heads, check_attention_inputs, check_logsumexp, check_output_grad

# 16: the smallest tile a tensor-core matmul (and Triton's tl.dot) takes, so tile shapes carry over
# to the Triton kernel. 32 iterations: torch.compile unrolls the loop, and its compile time grows with
# the count (flash_backward, causal, 2-core CPU, cold cache: 18 s at 8 tiles, 61 s at 32, 117 s at 64).
MIN_KEY_TILE = 16
MAX_KEY_TILES = 32


def key_tile_size(seq_k: int) -> int:
    """The smallest multiple of MIN_KEY_TILE that covers seq_k in at most MAX_KEY_TILES tiles.

    seq_k <= 512 gives 16; beyond, the tile grows as seq_k / 32 (rounded up to 16), so one tile's
    scores, (batch, heads, seq_q, tile), are about 1/32 of the full score matrix.
    """
    per_tile = -(-seq_k // MAX_KEY_TILES)
    return max(MIN_KEY_TILE, -(-per_tile // MIN_KEY_TILE) * MIN_KEY_TILE)


def _resolve_key_tile(seq_k: int, key_tile: int | None) -> int:
    if key_tile is None:
        return key_tile_size(seq_k)
    if not isinstance(key_tile, int) or key_tile < MIN_KEY_TILE or key_tile % MIN_KEY_TILE:
        raise ValueError(f"key_tile must be a positive multiple of {MIN_KEY_TILE}; got {key_tile!r}")
    return key_tile


def _visible_keys(seq_q: int, seq_k: int, is_causal: bool) -> int:
    # Causal and top-left aligned: the last query, seq_q - 1, sees keys up to seq_q - 1, so tiles from
    # seq_q on are in the future of every query and are skipped whole.
    return min(seq_k, seq_q) if is_causal else seq_k


def _masked_scores(
    q_scaled: torch.Tensor, k_tile: torch.Tensor, key_start: int, is_causal: bool
) -> torch.Tensor:
    """Scaled scores of every query against one key tile, with keys in a query's future at -inf.

    Every tile takes all queries, even those before the tile that the causal mask blanks out whole.
    Leaving those rows out halves causal work in eager mode but gives every tile its own shapes, and
    torch.compile then builds kernels for each: compiling flash_backward (causal, 32 tiles, 2-core CPU)
    took 243 s that way against 61 s with equal shapes.
    """
    scores = q_scaled @ k_tile.transpose(-2, -1)  # (B, H, Tq, tile)
    if is_causal:
        rows = torch.arange(q_scaled.shape[-2], device=q_scaled.device)
        cols = torch.arange(key_start, key_start + k_tile.shape[-2], device=q_scaled.device)
        scores = scores.masked_fill(cols[None, :] > rows[:, None], float("-inf"))
    return scores


def flash_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, *, key_tile: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output in q's shape and dtype, and the fp32 logsumexp L of shape q.shape[:-1]."""
    check_attention_inputs(q, k, v)
    q4, k4, v4 = as_heads(q), as_heads(k), as_heads(v)  # (B, H, Tq, d), (B, H, Tk, d), (B, H, Tk, d)
    seq_q, seq_k = q4.shape[-2], k4.shape[-2]
    tile = _resolve_key_tile(seq_k, key_tile)
    # fp32 throughout: fp16/bf16 inputs are exact in fp32, so only the final cast rounds to their dtype.
    q_scaled = q4.float() * (1.0 / math.sqrt(q4.shape[-1]))  # (B, H, Tq, d)
    row_max = q_scaled.new_full(q4.shape[:-1], float("-inf"))  # m: (B, H, Tq)
    row_sum = q_scaled.new_zeros(q4.shape[:-1])  # l = sum exp(s - m): (B, H, Tq)
    acc = q_scaled.new_zeros(q4.shape)  # sum exp(s - m) v: (B, H, Tq, d)
    for start in range(0, _visible_keys(seq_q, seq_k, is_causal), tile):
        k_tile = k4[..., start : start + tile, :].float()  # (B, H, tile, d)
        v_tile = v4[..., start : start + tile, :].float()  # (B, H, tile, d)
        scores = _masked_scores(q_scaled, k_tile, start, is_causal)  # (B, H, Tq, tile)
        # Every query sees key 0, in the first tile, so m is finite from then on and no exp() is NaN.
        new_max = torch.maximum(row_max, scores.amax(dim=-1))  # (B, H, Tq)
        probs = torch.exp(scores - new_max[..., None])  # (B, H, Tq, tile)
        rescale = torch.exp(row_max - new_max)  # (B, H, Tq)
        row_sum = rescale * row_sum + probs.sum(dim=-1)
        acc = rescale[..., None] * acc + probs @ v_tile
        row_max = new_max
    out = (acc / row_sum[..., None]).to(q.dtype)  # (B, H, Tq, d)
    lse = row_max + torch.log(row_sum)  # L: (B, H, Tq)
    return out.view(q.shape), lse.view(q.shape[:-1])


def flash_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    is_causal: bool = False,
    *,
    key_tile: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of q, k, v in their shapes and dtype, from `out` and `lse` as flash_forward gave them.

    Per key tile: P = exp(S - L), dV = P^T dO, dP = dO V^T, dS = P * (dP - D) with D = rowsum(dO * O),
    dQ += dS K * scale, dK = dS^T Q * scale.
    """
    check_attention_inputs(q, k, v)
    check_output_grad(grad_out, q.shape, q.dtype)
    check_logsumexp(lse, q)
    q4, k4, v4 = as_heads(q), as_heads(k), as_heads(v)  # (B, H, Tq, d), (B, H, Tk, d), (B, H, Tk, d)
    seq_q, seq_k = q4.shape[-2], k4.shape[-2]
    tile = _resolve_key_tile(seq_k, key_tile)
    scale = 1.0 / math.sqrt(q4.shape[-1])
    q_scaled = q4.float() * scale  # (B, H, Tq, d)
    grad_o = as_heads(grad_out).float()  # (B, H, Tq, d)
    lse4 = lse.view(q4.shape[:-1])  # (B, H, Tq)
    delta = (grad_o * as_heads(out).float()).sum(dim=-1)  # D: (B, H, Tq)
    grad_q = torch.zeros_like(q_scaled)  # (B, H, Tq, d)
    # Zeros: key tiles skipped as causal future get no gradient.
    grad_k = torch.zeros(k4.shape, dtype=torch.float32, device=k4.device)  # (B, H, Tk, d)
    grad_v = torch.zeros(v4.shape, dtype=torch.float32, device=v4.device)  # (B, H, Tk, d)
    for start in range(0, _visible_keys(seq_q, seq_k, is_causal), tile):
        stop = min(start + tile, seq_k)
        k_tile = k4[..., start:stop, :].float()  # (B, H, tile, d)
        v_tile = v4[..., start:stop, :].float()  # (B, H, tile, d)
        scores = _masked_scores(q_scaled, k_tile, start, is_causal)  # (B, H, Tq, tile)
        probs = torch.exp(scores - lse4[..., None])  # P: (B, H, Tq, tile)
        grad_v[..., start:stop, :] = probs.transpose(-2, -1) @ grad_o
        grad_probs = grad_o @ v_tile.transpose(-2, -1)  # dP: (B, H, Tq, tile)
        grad_scores = probs * (grad_probs - delta[..., None])  # dS: (B, H, Tq, tile)
        grad_q += grad_scores @ k_tile
        # q_scaled already carries the scale.
        grad_k[..., start:stop, :] = grad_scores.transpose(-2, -1) @ q_scaled
    grad_q = (grad_q * scale).to(q.dtype)
    return grad_q.view(q.shape), grad_k.to(k.dtype).view(k.shape), grad_v.to(v.dtype).view(v.shape)


COMPILE_BACKWARD = False


@functools.cache
def compiled_flash_backward() -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """flash_backward through torch.compile, built on first use and shared after.

    dynamic=False: the unrolled loop depends on the key length anyway, so each shape gets its own graph.
    Past torch._dynamo.config.recompile_limit shapes (8 by default) dynamo warns and runs it eagerly.
    """
    return torch.compile(flash_backward, dynamic=False)


class FlashAttentionPyTorch(torch.autograd.Function):
    """apply(q, k, v, is_causal=False): attention whose backward recomputes the scores from L.

    Saved for backward: q, k, v, the output O and L (fp32, shape q.shape[:-1]), in that order.
    The backward runs `flash_backward` eagerly; set this module's `COMPILE_BACKWARD = True` to run it
    through `compiled_flash_backward()` instead, compiled at the first backward of each shape (13 to
    18 s for one small shape on a 2-core CPU, cold cache).
    """

    @classmethod
    def apply(cls, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False):
        # torch.autograd.Function.apply takes keyword arguments only from torch 2.12 on.
        return super().apply(q, k, v, is_causal)

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        is_causal: bool = False,
    ) -> torch.Tensor:
        out, lse = flash_forward(q, k, v, is_causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.is_causal = is_causal
        return out

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        q, k, v, out, lse = ctx.saved_tensors
        backward = compiled_flash_backward() if COMPILE_BACKWARD else flash_backward
        grad_q, grad_k, grad_v = backward(q, k, v, out, lse, grad_out, ctx.is_causal)
        return grad_q, grad_k, grad_v, None


def flash_attention_pytorch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + causal mask) v, in q's shape and dtype; differentiable in q, k, v."""
    return FlashAttentionPyTorch.apply(q, k, v, is_causal)
