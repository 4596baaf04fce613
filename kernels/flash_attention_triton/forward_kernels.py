"""The forward kernel: one program per (query tile, batch x head), an online softmax over key tiles.

Algorithm (Dao, "FlashAttention-2", 2023): a program walks over key tiles keeping a running row max m
and row sum l in fp32, rescales what it accumulated when the max grows, and saves only the output O
and the logsumexp L = m + log(l), from which the backward recomputes the probabilities. The softmax
runs on exp2, the scale folded into log2 units.

Causal attention (top-left aligned, as in F.scaled_dot_product_attention: query i sees keys 0..i)
skips the key tiles wholly in the future and masks only those from the diagonal's first key on,
rounded down to a key tile, so any two tile sizes work; the tiles every row sees whole run without a
mask. The last query tiles, which have the most keys to visit, start first.

USE_TMA: the main parts of q, k, v and O move through TMA descriptors (see launch), else through
pointers. fp32 launches pass V as a column-major copy (V_COLUMN_MAJOR): TF32 tensor cores read the B
operand of P @ V only contiguous along the keys.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.flash_attention_triton.tiles import (
    LOG2E,
    _batch_and_head,
    _contiguous_ptrs,
    _head_dim_offsets,
    _load_rest,
    _load_rows,
    _store_rows,
    _strided_tile_ptrs,
    _tile_ptrs,
)


@triton.jit
def _forward_tiles(
    acc, acc_r, row_sum, row_max, q, q_r, k_ptrs, v_ptrs, kr_ptrs, vr_ptrs, desc_k, desc_v, b, h,
    stride_kn, stride_vn, offs_m, offs_n, d_ok, lo, hi, seq_k, qk_scale,
    BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, D_MAIN: tl.constexpr, D_REST: tl.constexpr,
    MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr, USE_TMA: tl.constexpr,
    V_COLUMN_MAJOR: tl.constexpr,
):  # fmt: skip
    """Online softmax over key tiles [lo, hi): rescale what was accumulated when the row max grows."""
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n  # (BLOCK_N,)
        in_range = cols < seq_k
        k = _load_rows(k_ptrs + start_n * stride_kn, desc_k, b, h, start_n, in_range, d_ok,
                       BLOCK_N, HEAD_DIM, D_MAIN, MASKED, USE_TMA)  # fmt: skip
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N), unscaled
        if D_REST > 0:
            k_r = _load_rest(kr_ptrs + start_n * stride_kn, in_range, MASKED, D_REST)
            s = tl.dot(q_r, tl.trans(k_r), s, input_precision=DOT_PRECISION)
        if MASKED:
            keep = in_range[None, :]
            if IS_CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None])
            s = tl.where(keep, s * qk_scale, float("-inf"))
            # Key 0 is in the first tile and visible to every row, so new_max is finite from then on.
            new_max = tl.maximum(row_max, tl.max(s, 1))
            s = s - new_max[:, None]
        else:
            # The scale (positive) goes into the row max and one multiply-add per score.
            new_max = tl.maximum(row_max, tl.max(s, 1) * qk_scale)
            s = s * qk_scale - new_max[:, None]
        p = tl.math.exp2(s)  # log2 units
        correction = tl.math.exp2(row_max - new_max)
        row_sum = row_sum * correction + tl.sum(p, 1)
        acc = acc * correction[:, None]
        if USE_TMA and V_COLUMN_MAJOR:  # a (head dim, BLOCK_N) tile of the (batch, heads, d, seq) copy
            v = tl.trans(desc_v.load([b, h, 0, start_n]).reshape(D_MAIN, BLOCK_N))
        else:
            v = _load_rows(v_ptrs + start_n * stride_vn, desc_v, b, h, start_n, in_range, d_ok,
                           BLOCK_N, HEAD_DIM, D_MAIN, MASKED, USE_TMA)  # fmt: skip
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
        if D_REST > 0:
            v_r = _load_rest(vr_ptrs + start_n * stride_vn, in_range, MASKED, D_REST)
            acc_r = tl.dot(p.to(v_r.dtype), v_r, acc_r * correction[:, None], input_precision=DOT_PRECISION)
        row_max = new_max
    return acc, acc_r, row_sum, row_max


@triton.jit
def forward_kernel(
    Q, K, V, Out, L, desc_q, desc_k, desc_v, desc_o,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_vd,
    heads, seq_q, seq_k, sm_scale,
    SEQ_Q_BUCKET, SEQ_K_BUCKET, WITH_DESCRIPTORS,  # autotuning keys only
    HEAD_DIM: tl.constexpr, D_MAIN: tl.constexpr, D_REST: tl.constexpr, IS_CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr, V_COLUMN_MAJOR: tl.constexpr,
    EVEN_M: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, USE_TMA: tl.constexpr,
):  # fmt: skip
    """One program per (query tile, batch x head). Out and L are contiguous (batch, heads, seq_q, ...).

    USE_TMA: the main parts of q, k, v and Out move through the tensor memory accelerator (descriptors
    desc_*), which loads a tile asynchronously into shared memory; otherwise through pointers (Q, K,
    V, Out). A rest part of the head dim (D_REST) always moves through pointers.
    V_COLUMN_MAJOR: V is a column-major copy (TF32), and desc_v spans it as (batch, heads, d, seq).
    """
    # Causal: the last query tiles have the most keys to visit; starting them first shortens the tail.
    num_m = tl.cdiv(seq_q, BLOCK_M)
    pid_m = num_m - 1 - tl.program_id(0) if IS_CAUSAL else tl.program_id(0)
    bh, b, h = _batch_and_head(heads)
    start_m = pid_m * BLOCK_M

    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d, offs_r = _head_dim_offsets(D_MAIN, D_REST)
    d_ok, m_ok = offs_d < HEAD_DIM, offs_m < seq_q
    q_ptrs = _tile_ptrs(Q, b, h, offs_m, offs_d, stride_qb, stride_qh, stride_qm)
    k_ptrs = _tile_ptrs(K, b, h, offs_n, offs_d, stride_kb, stride_kh, stride_kn)
    # V is the B operand of P @ V, whose shared-memory tile TF32 tensor cores need contiguous along
    # the keys: fp32 launches pass a column-major V (stride_vn == 1), 16-bit ones a row-major one.
    v_ptrs = _strided_tile_ptrs(V, b, h, offs_n, offs_d, stride_vb, stride_vh, stride_vn, stride_vd)
    kr_ptrs = _tile_ptrs(K, b, h, offs_n, offs_r, stride_kb, stride_kh, stride_kn)
    vr_ptrs = _strided_tile_ptrs(V, b, h, offs_n, offs_r, stride_vb, stride_vh, stride_vn, stride_vd)
    b32, h32 = b.to(tl.int32), h.to(tl.int32)  # descriptor coordinates are 32-bit
    q = _load_rows(q_ptrs, desc_q, b32, h32, start_m, m_ok, d_ok, BLOCK_M, HEAD_DIM, D_MAIN, not EVEN_M,
                   USE_TMA)  # fmt: skip
    q_r = _load_rest(_tile_ptrs(Q, b, h, offs_m, offs_r, stride_qb, stride_qh, stride_qm), m_ok,
                     not EVEN_M, D_REST)  # fmt: skip

    acc = tl.zeros([BLOCK_M, D_MAIN], dtype=tl.float32)
    acc_r = tl.zeros([BLOCK_M, D_REST if D_REST > 0 else 16], dtype=tl.float32)
    row_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    row_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    qk_scale = sm_scale * LOG2E  # the softmax runs on exp2

    # Tiles every row sees whole: below the diagonal (causal) and inside seq_k. No mask. The key
    # tile holding the diagonal's first key starts at start_m rounded down to a key tile.
    full_tiles_end = (seq_k // BLOCK_N) * BLOCK_N
    if IS_CAUSAL:
        full_tiles_end = tl.minimum((start_m // BLOCK_N) * BLOCK_N, full_tiles_end)
        end = tl.minimum(start_m + BLOCK_M, seq_k)
    else:
        end = seq_k
    acc, acc_r, row_sum, row_max = _forward_tiles(
        acc, acc_r, row_sum, row_max, q, q_r, k_ptrs, v_ptrs, kr_ptrs, vr_ptrs, desc_k, desc_v, b32, h32,
        stride_kn, stride_vn, offs_m, offs_n, d_ok, 0, full_tiles_end, seq_k, qk_scale,
        BLOCK_N, HEAD_DIM, D_MAIN, D_REST, False, IS_CAUSAL, DOT_PRECISION, USE_TMA, V_COLUMN_MAJOR,
    )  # fmt: skip
    # Tiles crossing the diagonal, and the ragged last tile of keys: masked.
    acc, acc_r, row_sum, row_max = _forward_tiles(
        acc, acc_r, row_sum, row_max, q, q_r, k_ptrs, v_ptrs, kr_ptrs, vr_ptrs, desc_k, desc_v, b32, h32,
        stride_kn, stride_vn, offs_m, offs_n, d_ok, full_tiles_end, end, seq_k, qk_scale,
        BLOCK_N, HEAD_DIM, D_MAIN, D_REST, True, IS_CAUSAL, DOT_PRECISION, USE_TMA, V_COLUMN_MAJOR,
    )  # fmt: skip

    out = (acc / row_sum[:, None]).to(Out.dtype.element_ty)
    out_r = (acc_r / row_sum[:, None]).to(Out.dtype.element_ty)
    lse = (row_max + tl.math.log2(row_sum)) / LOG2E  # natural-log logsumexp of the scores
    o_ptrs = _contiguous_ptrs(Out, bh, offs_m, offs_d, seq_q, HEAD_DIM)
    or_ptrs = _contiguous_ptrs(Out, bh, offs_m, offs_r, seq_q, HEAD_DIM)
    l_ptrs = L + bh * seq_q + offs_m
    if USE_TMA:  # rows past seq_q and columns past the head dim are not written
        desc_o.store([b32, h32, start_m, 0], out.reshape(1, 1, BLOCK_M, D_MAIN))
        if D_REST > 0:
            tl.store(or_ptrs, out_r, mask=m_ok[:, None])
        tl.store(l_ptrs, lse, mask=m_ok)
    else:
        _store_rows(o_ptrs, or_ptrs, out, out_r, m_ok, d_ok, not EVEN_M, HEAD_DIM, D_MAIN, D_REST)
        if EVEN_M:
            tl.store(l_ptrs, lse)
        else:
            tl.store(l_ptrs, lse, mask=m_ok)
