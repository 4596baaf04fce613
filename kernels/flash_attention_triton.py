"""FlashAttention-2 forward and backward as Triton kernels.

Layout of this module: the kernels, the tile configurations and their override, the launchers
(which own every check and grid), the registered operators with their autograd formula, and the
public function.

Algorithm (Dao, "FlashAttention-2", 2023): the forward walks over key tiles with an online
softmax, keeping a running row max m and row sum l in fp32, and saves only the output O and the
logsumexp L = m + log(l). The backward recomputes each probability tile from L: P = exp(S - L),
dV = P^T dO, dP = dO V^T, dS = P * (dP - D) with D = rowsum(dO * O), dQ = dS K, dK = dS^T Q (both
times the softmax scale). It has two forms, and the autotuner picks per shape. Two passes, so that
nothing is written by two programs: one program per key tile accumulates dK and dV over the queries,
one per query tile accumulates dQ over the keys. Or one pass (ATOMIC_DQ), which saves recomputing S
and dP for dQ: each key tile's program also adds its share of dQ into an fp32 buffer. With pointer
atomics those adds cost more than they save (1.09 to 1.31 times the two passes on an H100, bf16);
as one TMA bulk reduction per tile, measured on the same GPU, the one pass took 0.95 times the time
of the two passes at head dim 64, causal, sequences of 4096 and 16384; 1.01 to 1.05 times at head
dim 64 non-causal or at 1024, and 1.11 times at head dim 128 (which keeps to the two passes).
Only a launch that may run the one pass (forced, tuned to it, or not tuned yet with it among the
candidates) gets the fp32 buffer, the size of q.

Causal attention (top-left aligned, as in F.scaled_dot_product_attention: query i sees keys 0..i)
skips the tiles wholly in the future and applies the mask only on tiles that cross the diagonal;
the others run without any mask. The forward rounds the diagonal's start down to a key tile, and
the dK/dV pass masks the query tiles from the key tile's start up to the larger of the two tile
sizes, so any two tile sizes work there; the dQ pass needs its query tiles a multiple of its key
tiles, so that the diagonal starts on a key tile boundary.

Head dims: tl.arange and tl.dot take powers of two, so a head dim d runs as a main part of D_MAIN
columns and, where what is left is a power of two of 16 or more, a rest part of D_REST columns beside
it (head_dim_parts): scores sum the two parts' dots, and each output, dQ, dK and dV part has a dot of
its own. 80 = 64 + 16 and 96 = 64 + 32 run without padding; other head dims run as one part of the
next power of two, whose padding columns loads mask and stores leave out (padded_share).

Loads: on Hopper and later, 16-bit q, k, v and O move through the tensor memory accelerator (TMA):
a descriptor per tensor, one asynchronous copy per tile into shared memory, and reads past the end
of a sequence (or of the head dim, for a padded part) returned as zeros; so do fp32 ones in the
forward from 128 columns on (_loads_through_tma). A rest part moves through pointers.
Other inputs (fp32 elsewhere, older GPUs, bases or strides not a multiple of 16 bytes) and calls too
small to hide the descriptors' host cost (TMA_MIN_WORK, TMA_MIN_WORK_FP32) load through pointers.

Precision: accumulators, the softmax and L are fp32. fp16 and bf16 inputs use the tensor cores in
their own type. fp32 inputs use TF32 tensor-core dots (inputs rounded to a 10-bit mantissa, fp32
accumulation): about eight times the throughput of full-fp32 dots, with errors comparable to fp16.
TF32 dots read their second operand from column-major copies where it is reduced over its rows
(see COLUMN_MAJOR_TF32_OPERANDS).

What fp32 costs: its tiles take twice the bytes, and the dK/dV pass reads q and dO in both layouts,
four tiles per step where 16-bit reads two. At head dim 128 the backward fills a multiprocessor:
on an H100 at (4, 16, 4096, 128), Nsight Compute showed one program of 8 warps per multiprocessor,
224 KiB of shared memory, 255 registers with spills, and one pipeline stage whose loads pass
through registers (29% of stall samples were shared-memory stores waiting on them); bf16 ran three
stages in 160 KiB. Measured slower for the fp32 backward (H100, head dims 64 and 128): the one
pass, TMA loads, 16 warps, K and V as register operands, the next step's tiles prefetched into
registers (more spills; 1.01 to 1.27 times the backward's time, best tiles against best tiles) and
mma.sync products (DISABLE_MMA_V3: 1.08 to 1.57 times).

Tile sizes, warps and pipeline stages are autotuned per (length bucket, head dim, causal, dtype),
once per machine: the timings are kept in Triton's cache directory (see _tuned). Later calls of a
tuned case launch its configuration directly (see _Kernel).
To force one configuration, for example to compare with the autotuned one, set
FLASH_TRITON_CONFIG, one entry per kernel separated by ';':

    FLASH_TRITON_CONFIG="forward:BLOCK_M=64,BLOCK_N=32,num_warps=4,num_stages=2"
    FLASH_TRITON_CONFIG="forward:BLOCK_M=64,BLOCK_N=32;backward:BLOCK_M1=32,BLOCK_N1=64,BLOCK_M2=64,BLOCK_N2=32"

The backward entry names the dK/dV pass's query and key tiles (BLOCK_M1, BLOCK_N1) and the dQ
pass's (BLOCK_M2, BLOCK_N2), and takes ATOMIC_DQ=1 for the one-pass form.

Kernels not named keep autotuning; a kernel named takes exactly the values given (unnamed values
default to num_warps=4, num_stages=2). `forced_configs()` says what is in force.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os

import torch
import triton
import triton.language as tl

from kernels import flash_triton_tuning
from kernels.attention_inputs import as_heads, check_attention_inputs, check_output_grad

try:  # host-side TMA descriptors: Triton 3.3 and later
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton loads through pointers only
    TensorDescriptor = None

# exp(x) == exp2(x * log2(e)): exp2 is a single instruction on the GPU. A constexpr, so kernels can read it.
LOG2E = tl.constexpr(1.4426950408889634)


# --------------------------------------------------------------------------- head dim parts
# A head dim runs as a main part of D_MAIN columns and a rest part of D_REST (0 for none), both
# powers of two (head_dim_parts, and the module docstring).
@triton.jit
def _head_dim_offsets(D_MAIN: tl.constexpr, D_REST: tl.constexpr):
    """Column offsets of the main part and of the rest part; without a rest part its offsets are a
    placeholder of 16 columns that nothing loads."""
    return tl.arange(0, D_MAIN), D_MAIN + tl.arange(0, D_REST if D_REST > 0 else 16)


@triton.jit
def _batch_and_head(heads):
    """This program's (batch x head) index, batch and head, from the grid's second axis. int64: the
    offsets of large batches pass 2^31 elements."""
    bh = tl.program_id(1).to(tl.int64)
    return bh, bh // heads, bh % heads


@triton.jit
def _tile_ptrs(base, b, h, rows, cols, stride_b, stride_h, stride_row):
    """Pointers to a (rows, cols) tile of one batch and head; the head dim has unit stride."""
    return base + b * stride_b + h * stride_h + rows[:, None] * stride_row + cols[None, :]


@triton.jit
def _strided_tile_ptrs(base, b, h, rows, cols, stride_b, stride_h, stride_row, stride_d):
    """Pointers to a (rows, cols) tile of one batch and head, with any strides."""
    return base + b * stride_b + h * stride_h + rows[:, None] * stride_row + cols[None, :] * stride_d


@triton.jit
def _column_major_ptrs(base, bh, rows, cols, seq, HEAD_DIM: tl.constexpr):
    """Pointers to a (rows, cols) tile of a (batch x heads, head dim, seq) contiguous copy."""
    return base + bh * HEAD_DIM * seq + rows[:, None] + cols[None, :] * seq


@triton.jit
def _contiguous_ptrs(base, bh, rows, cols, seq, HEAD_DIM: tl.constexpr):
    """Pointers to a (rows, cols) tile of a contiguous (batch x heads, seq, head dim) tensor."""
    return base + bh * seq * HEAD_DIM + rows[:, None] * HEAD_DIM + cols[None, :]


@triton.jit
def _masked_load(ptrs, row_ok, col_ok, ROWS: tl.constexpr, COLS: tl.constexpr):
    """A tile through pointers, masked to row_ok (if ROWS) and col_ok (if COLS); 0 where masked."""
    if ROWS and COLS:
        tile = tl.load(ptrs, mask=row_ok[:, None] & col_ok[None, :], other=0.0)
    elif ROWS:
        tile = tl.load(ptrs, mask=row_ok[:, None], other=0.0)
    elif COLS:
        tile = tl.load(ptrs, mask=col_ok[None, :], other=0.0)
    else:
        tile = tl.load(ptrs)
    return tile


@triton.jit
def _masked_store(ptrs, value, row_ok, col_ok, ROWS: tl.constexpr, COLS: tl.constexpr):
    if ROWS and COLS:
        tl.store(ptrs, value, mask=row_ok[:, None] & col_ok[None, :])
    elif ROWS:
        tl.store(ptrs, value, mask=row_ok[:, None])
    elif COLS:
        tl.store(ptrs, value, mask=col_ok[None, :])
    else:
        tl.store(ptrs, value)


@triton.jit
def _load_rest(ptrs, row_ok, ROWS: tl.constexpr, D_REST: tl.constexpr):
    """The rest part of a tile (columns D_MAIN on), through pointers, masked to row_ok if ROWS; 0.0
    where there is none. A rest part is never padded (head_dim_parts), so no column is masked."""
    if D_REST > 0:
        if ROWS:
            tile = tl.load(ptrs, mask=row_ok[:, None], other=0.0)
        else:
            tile = tl.load(ptrs)
    else:
        tile = 0.0
    return tile


@triton.jit
def _load_parts(base, b, h, rows, offs_d, offs_r, stride_b, stride_h, stride_row, row_ok, d_ok,
                ROWS: tl.constexpr, HEAD_DIM: tl.constexpr, D_MAIN: tl.constexpr,
                D_REST: tl.constexpr):  # fmt: skip
    """Both parts of a (rows, head dim) tile through pointers, rows masked to row_ok if ROWS: the tiles
    a backward program keeps for all its loop (k and v of a key tile, q and dO of a query tile)."""
    main_ptrs = _tile_ptrs(base, b, h, rows, offs_d, stride_b, stride_h, stride_row)
    rest_ptrs = _tile_ptrs(base, b, h, rows, offs_r, stride_b, stride_h, stride_row)
    main = _masked_load(main_ptrs, row_ok, d_ok, ROWS, D_MAIN > HEAD_DIM)
    rest = _load_rest(rest_ptrs, row_ok, ROWS, D_REST)
    return main, rest


@triton.jit
def _load_rows(ptrs, desc, b, h, start, row_ok, col_ok, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr,
               D_MAIN: tl.constexpr, MASKED: tl.constexpr, USE_TMA: tl.constexpr):  # fmt: skip
    """The main part of a (BLOCK, D_MAIN) tile of rows from start: through a TMA descriptor over
    (batch, heads, seq, d), whose reads past the end of either dim come back as zeros, or through
    pointers, masked to row_ok if MASKED and to the head dim where D_MAIN pads it."""
    if USE_TMA:
        tile = desc.load([b, h, start, 0]).reshape(BLOCK, D_MAIN)
    else:
        tile = _masked_load(ptrs, row_ok, col_ok, MASKED, D_MAIN > HEAD_DIM)
    return tile


@triton.jit
def _store_rows(ptrs, ptrs_r, value, value_r, row_ok, col_ok, ROWS: tl.constexpr, HEAD_DIM: tl.constexpr,
                D_MAIN: tl.constexpr, D_REST: tl.constexpr):  # fmt: skip
    """Both parts of a tile through pointers: rows masked to row_ok if ROWS, padding columns never."""
    _masked_store(ptrs, value, row_ok, col_ok, ROWS, D_MAIN > HEAD_DIM)
    if D_REST > 0:
        _masked_store(ptrs_r, value_r, row_ok, col_ok, ROWS, False)


@triton.jit
def _column_major_copy_kernel(
    Src, Dst, stride_b, stride_h, stride_t, heads, seq, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_T: tl.constexpr,
):  # fmt: skip
    """Dst (batch x heads, head dim, seq) from Src (batch, heads, seq, head dim): a tile is read along
    the head dim and written along seq, both coalesced (Triton transposes it through shared memory).
    BLOCK_D is the head dim rounded up to a power of two, its padding masked."""
    bh, b, h = _batch_and_head(heads)
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (rows < seq)[:, None] & (offs_d < HEAD_DIM)[None, :]
    tile = tl.load(_tile_ptrs(Src, b, h, rows, offs_d, stride_b, stride_h, stride_t), mask=mask)
    tl.store(_column_major_ptrs(Dst, bh, rows, offs_d, seq, HEAD_DIM), tile, mask=mask)


# --------------------------------------------------------------------------- forward kernel
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
def _forward_kernel(
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


# --------------------------------------------------------------------------- backward kernels
@triton.jit
def _row_dot_kernel(
    Out, DO, Delta, stride_dob, stride_doh, stride_dom, heads, seq_q,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """D = rowsum(dO * O) in fp32: the softmax's backward term, computed once per row. BLOCK_D is the
    head dim rounded up to a power of two, its padding masked."""
    bh, b, h = _batch_and_head(heads)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_ok, d_ok = offs_m < seq_q, offs_d < HEAD_DIM
    o = _masked_load(_contiguous_ptrs(Out, bh, offs_m, offs_d, seq_q, HEAD_DIM), m_ok, d_ok, True, True)
    do_ptrs = _tile_ptrs(DO, b, h, offs_m, offs_d, stride_dob, stride_doh, stride_dom)
    do = _masked_load(do_ptrs, m_ok, d_ok, True, True)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    tl.store(Delta + bh * seq_q + offs_m, delta, mask=m_ok)


@triton.jit
def _dkdv_tiles(
    dk, dv, dk_r, dv_r, k, v, k_r, v_r, q_ptrs, do_ptrs, qc_ptrs, doc_ptrs, qr_ptrs, dor_ptrs, qcr_ptrs,
    docr_ptrs, l_ptrs, delta_ptrs, stride_qm, stride_dom, desc_q, desc_do, desc_dq, dq_ptrs, dqr_ptrs,
    b, h, offs_n, offs_m, d_ok, lo, hi, seq_q, qk_scale,
    BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, D_MAIN: tl.constexpr, D_REST: tl.constexpr,
    EVEN_M: tl.constexpr, CAUSAL_MASK: tl.constexpr, DOT_PRECISION: tl.constexpr,
    COLUMN_MAJOR_COPIES: tl.constexpr, ATOMIC_DQ: tl.constexpr, USE_TMA: tl.constexpr,
    TMA_REDUCE: tl.constexpr,
):  # fmt: skip
    """Accumulate dK and dV of one key tile over query tiles [lo, hi), working on transposed tiles
    (keys along rows) so that every product is a plain dot with the key tile on the left. With
    ATOMIC_DQ, also add this key tile's share of each query tile's dQ into the fp32 dQ (dq_ptrs)."""
    for start_m in range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        rows = start_m + offs_m  # (BLOCK_M,)
        # Rows past seq_q load q = dO = 0 and D = 0, which makes their dS and dV terms exactly 0.
        in_range = rows < seq_q
        q = _load_rows(q_ptrs + start_m * stride_qm, desc_q, b, h, start_m, in_range, d_ok,
                       BLOCK_M, HEAD_DIM, D_MAIN, not EVEN_M, USE_TMA)  # fmt: skip
        do = _load_rows(do_ptrs + start_m * stride_dom, desc_do, b, h, start_m, in_range, d_ok,
                        BLOCK_M, HEAD_DIM, D_MAIN, not EVEN_M, USE_TMA)  # fmt: skip
        if EVEN_M:
            lse = tl.load(l_ptrs + start_m)  # (BLOCK_M,)
            delta = tl.load(delta_ptrs + start_m)
        else:
            lse = tl.load(l_ptrs + start_m, mask=in_range, other=0.0)
            delta = tl.load(delta_ptrs + start_m, mask=in_range, other=0.0)
        # q and dO as the B operands of dK and dV: from column-major copies under TF32 (see
        # attention_backward), the same tiles otherwise.
        q_b, do_b = q, do
        if COLUMN_MAJOR_COPIES:
            q_b = _masked_load(qc_ptrs + start_m, in_range, d_ok, not EVEN_M, D_MAIN > HEAD_DIM)
            do_b = _masked_load(doc_ptrs + start_m, in_range, d_ok, not EVEN_M, D_MAIN > HEAD_DIM)
        s_t = tl.dot(k, tl.trans(q), input_precision=DOT_PRECISION)  # (BLOCK_N, BLOCK_M)
        if D_REST > 0:
            q_r = _load_rest(qr_ptrs + start_m * stride_qm, in_range, not EVEN_M, D_REST)  # fmt: skip
            s_t = tl.dot(k_r, tl.trans(q_r), s_t, input_precision=DOT_PRECISION)
        p_t = tl.math.exp2(s_t * qk_scale - lse[None, :] * LOG2E)
        if CAUSAL_MASK:
            p_t = tl.where(offs_n[:, None] <= rows[None, :], p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do_b, input_precision=DOT_PRECISION)
        dp_t = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)  # (BLOCK_N, BLOCK_M)
        if D_REST > 0:
            do_r = _load_rest(dor_ptrs + start_m * stride_dom, in_range, not EVEN_M, D_REST)  # fmt: skip
            q_br, do_br = q_r, do_r
            if COLUMN_MAJOR_COPIES:
                q_br = _load_rest(qcr_ptrs + start_m, in_range, not EVEN_M, D_REST)
                do_br = _load_rest(docr_ptrs + start_m, in_range, not EVEN_M, D_REST)
            dv_r += tl.dot(p_t.to(do.dtype), do_br, input_precision=DOT_PRECISION)
            dp_t = tl.dot(v_r, tl.trans(do_r), dp_t, input_precision=DOT_PRECISION)
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk += tl.dot(ds_t, q_b, input_precision=DOT_PRECISION)
        if D_REST > 0:
            dk_r += tl.dot(ds_t, q_br, input_precision=DOT_PRECISION)
        if ATOMIC_DQ:
            # Unscaled: the launcher's conversion of the fp32 sum multiplies by the scale once.
            dq = tl.dot(tl.trans(ds_t), k, input_precision=DOT_PRECISION)  # (BLOCK_M, D_MAIN)
            if TMA_REDUCE:  # one bulk add of the tile in L2; rows past seq_q and padding are dropped
                desc_dq.atomic_add([b, h, start_m, 0], dq.reshape(1, 1, BLOCK_M, D_MAIN))
            elif D_MAIN > HEAD_DIM:
                mask = in_range[:, None] & d_ok[None, :]
                tl.atomic_add(dq_ptrs + start_m * HEAD_DIM, dq, mask=mask, sem="relaxed")
            else:
                tl.atomic_add(dq_ptrs + start_m * HEAD_DIM, dq, mask=in_range[:, None], sem="relaxed")
            if D_REST > 0:
                dq_r = tl.dot(tl.trans(ds_t), k_r, input_precision=DOT_PRECISION)  # (BLOCK_M, D_REST)
                tl.atomic_add(dqr_ptrs + start_m * HEAD_DIM, dq_r, mask=in_range[:, None], sem="relaxed")
    return dk, dv, dk_r, dv_r


@triton.jit
def _dkdv_program(
    Q, K, V, DO, QC, DOC, L, Delta, DK, DV, DQ_ACC, desc_q, desc_do, desc_dq, b, h, bh,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
    start_n, seq_q, seq_k, sm_scale,
    HEAD_DIM: tl.constexpr, D_MAIN: tl.constexpr, D_REST: tl.constexpr, IS_CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, COLUMN_MAJOR_COPIES: tl.constexpr, ATOMIC_DQ: tl.constexpr,
    USE_TMA: tl.constexpr, TMA_REDUCE: tl.constexpr,
):  # fmt: skip
    """dK and dV of the key tile at start_n, over every query that sees it (and its share of their dQ
    with ATOMIC_DQ)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d, offs_r = _head_dim_offsets(D_MAIN, D_REST)
    d_ok, n_ok = offs_d < HEAD_DIM, offs_n < seq_k
    # Keys past seq_k load as 0; their rows of dK and dV are never stored.
    k, k_r = _load_parts(K, b, h, offs_n, offs_d, offs_r, stride_kb, stride_kh, stride_kn, n_ok, d_ok,
                         not EVEN_N, HEAD_DIM, D_MAIN, D_REST)  # fmt: skip
    v, v_r = _load_parts(V, b, h, offs_n, offs_d, offs_r, stride_vb, stride_vh, stride_vn, n_ok, d_ok,
                         not EVEN_N, HEAD_DIM, D_MAIN, D_REST)  # fmt: skip
    q_ptrs = _tile_ptrs(Q, b, h, offs_m, offs_d, stride_qb, stride_qh, stride_qm)
    do_ptrs = _tile_ptrs(DO, b, h, offs_m, offs_d, stride_dob, stride_doh, stride_dom)
    qc_ptrs = _column_major_ptrs(QC, bh, offs_m, offs_d, seq_q, HEAD_DIM)
    doc_ptrs = _column_major_ptrs(DOC, bh, offs_m, offs_d, seq_q, HEAD_DIM)
    qr_ptrs = _tile_ptrs(Q, b, h, offs_m, offs_r, stride_qb, stride_qh, stride_qm)
    dor_ptrs = _tile_ptrs(DO, b, h, offs_m, offs_r, stride_dob, stride_doh, stride_dom)
    qcr_ptrs = _column_major_ptrs(QC, bh, offs_m, offs_r, seq_q, HEAD_DIM)
    docr_ptrs = _column_major_ptrs(DOC, bh, offs_m, offs_r, seq_q, HEAD_DIM)
    l_ptrs = L + bh * seq_q + offs_m
    delta_ptrs = Delta + bh * seq_q + offs_m
    dq_ptrs = _contiguous_ptrs(DQ_ACC, bh, offs_m, offs_d, seq_q, HEAD_DIM)
    dqr_ptrs = _contiguous_ptrs(DQ_ACC, bh, offs_m, offs_r, seq_q, HEAD_DIM)
    b32, h32 = b.to(tl.int32), h.to(tl.int32)  # descriptor coordinates are 32-bit

    dk = tl.zeros([BLOCK_N, D_MAIN], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D_MAIN], dtype=tl.float32)
    dk_r = tl.zeros([BLOCK_N, D_REST if D_REST > 0 else 16], dtype=tl.float32)
    dv_r = tl.zeros([BLOCK_N, D_REST if D_REST > 0 else 16], dtype=tl.float32)
    qk_scale = sm_scale * LOG2E
    lo = 0
    if IS_CAUSAL:
        # Queries before start_n see none of these keys; those in [start_n, start_n + BLOCK_N) cross
        # the diagonal and take the mask, in query tiles from start_n (the larger of the two tile
        # sizes, both powers of two, spans them); later ones see the whole tile.
        diagonal_end = start_n + (BLOCK_N if BLOCK_N >= BLOCK_M else BLOCK_M)
        dk, dv, dk_r, dv_r = _dkdv_tiles(
            dk, dv, dk_r, dv_r, k, v, k_r, v_r, q_ptrs, do_ptrs, qc_ptrs, doc_ptrs, qr_ptrs, dor_ptrs,
            qcr_ptrs, docr_ptrs, l_ptrs, delta_ptrs, stride_qm, stride_dom, desc_q, desc_do, desc_dq,
            dq_ptrs, dqr_ptrs, b32, h32, offs_n, offs_m, d_ok,
            start_n, tl.minimum(diagonal_end, seq_q), seq_q, qk_scale,
            BLOCK_M, HEAD_DIM, D_MAIN, D_REST, EVEN_M, True, DOT_PRECISION, COLUMN_MAJOR_COPIES,
            ATOMIC_DQ, USE_TMA, TMA_REDUCE,
        )  # fmt: skip
        lo = diagonal_end
    dk, dv, dk_r, dv_r = _dkdv_tiles(
        dk, dv, dk_r, dv_r, k, v, k_r, v_r, q_ptrs, do_ptrs, qc_ptrs, doc_ptrs, qr_ptrs, dor_ptrs,
        qcr_ptrs, docr_ptrs, l_ptrs, delta_ptrs, stride_qm, stride_dom, desc_q, desc_do, desc_dq,
        dq_ptrs, dqr_ptrs, b32, h32, offs_n, offs_m, d_ok, lo, seq_q, seq_q, qk_scale,
        BLOCK_M, HEAD_DIM, D_MAIN, D_REST, EVEN_M, False, DOT_PRECISION, COLUMN_MAJOR_COPIES,
        ATOMIC_DQ, USE_TMA, TMA_REDUCE,
    )  # fmt: skip

    # dK and dV are contiguous (batch x heads, seq_k, head dim): one offset for both.
    offset = bh * seq_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    offset_r = bh * seq_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_r[None, :]
    _store_rows(DK + offset, DK + offset_r, (dk * sm_scale).to(DK.dtype.element_ty),
                (dk_r * sm_scale).to(DK.dtype.element_ty), n_ok, d_ok, not EVEN_N, HEAD_DIM, D_MAIN,
                D_REST)  # fmt: skip
    _store_rows(DV + offset, DV + offset_r, dv.to(DV.dtype.element_ty), dv_r.to(DV.dtype.element_ty),
                n_ok, d_ok, not EVEN_N, HEAD_DIM, D_MAIN, D_REST)  # fmt: skip


@triton.jit
def _dq_tiles(
    dq, dq_r, q, do, q_r, do_r, lse2, delta, k_ptrs, v_ptrs, kc_ptrs, kr_ptrs, vr_ptrs, kcr_ptrs,
    stride_kn, stride_vn, offs_m, offs_n, d_ok, lo, hi, seq_k, qk_scale,
    BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, D_MAIN: tl.constexpr, D_REST: tl.constexpr,
    EVEN_N: tl.constexpr, CAUSAL_MASK: tl.constexpr, DOT_PRECISION: tl.constexpr,
    COLUMN_MAJOR_COPIES: tl.constexpr,
):  # fmt: skip
    """Accumulate dQ of one query tile over key tiles [lo, hi)."""
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        # Keys past seq_k load as k = v = 0: their dS is finite and multiplies k = 0 into dQ.
        n_ok = cols < seq_k
        k = _masked_load(k_ptrs + start_n * stride_kn, n_ok, d_ok, not EVEN_N, D_MAIN > HEAD_DIM)
        v = _masked_load(v_ptrs + start_n * stride_vn, n_ok, d_ok, not EVEN_N, D_MAIN > HEAD_DIM)
        k_b = k  # K as the B operand of dQ: from its column-major copy under TF32
        if COLUMN_MAJOR_COPIES:
            k_b = _masked_load(kc_ptrs + start_n, n_ok, d_ok, not EVEN_N, D_MAIN > HEAD_DIM)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N)
        if D_REST > 0:
            k_r = _load_rest(kr_ptrs + start_n * stride_kn, n_ok, not EVEN_N, D_REST)
            s = tl.dot(q_r, tl.trans(k_r), s, input_precision=DOT_PRECISION)
        p = tl.math.exp2(s * qk_scale - lse2[:, None])
        if CAUSAL_MASK:
            p = tl.where(cols[None, :] <= offs_m[:, None], p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N)
        if D_REST > 0:
            v_r = _load_rest(vr_ptrs + start_n * stride_vn, n_ok, not EVEN_N, D_REST)
            dp = tl.dot(do_r, tl.trans(v_r), dp, input_precision=DOT_PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k_b, input_precision=DOT_PRECISION)
        if D_REST > 0:
            k_br = k_r
            if COLUMN_MAJOR_COPIES:
                k_br = _load_rest(kcr_ptrs + start_n, n_ok, not EVEN_N, D_REST)
            dq_r += tl.dot(ds.to(k.dtype), k_br, input_precision=DOT_PRECISION)
    return dq, dq_r


@triton.jit
def _dq_program(
    Q, K, V, DO, KC, L, Delta, DQ, b, h, bh,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
    start_m, seq_q, seq_k, sm_scale,
    HEAD_DIM: tl.constexpr, D_MAIN: tl.constexpr, D_REST: tl.constexpr, IS_CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, COLUMN_MAJOR_COPIES: tl.constexpr,
):  # fmt: skip
    """dQ of the query tile at start_m, over every key it sees."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d, offs_r = _head_dim_offsets(D_MAIN, D_REST)
    d_ok, m_ok = offs_d < HEAD_DIM, offs_m < seq_q
    q, q_r = _load_parts(Q, b, h, offs_m, offs_d, offs_r, stride_qb, stride_qh, stride_qm, m_ok, d_ok,
                         not EVEN_M, HEAD_DIM, D_MAIN, D_REST)  # fmt: skip
    do, do_r = _load_parts(DO, b, h, offs_m, offs_d, offs_r, stride_dob, stride_doh, stride_dom, m_ok, d_ok,
                           not EVEN_M, HEAD_DIM, D_MAIN, D_REST)  # fmt: skip
    if EVEN_M:
        lse = tl.load(L + bh * seq_q + offs_m)
        delta = tl.load(Delta + bh * seq_q + offs_m)
    else:
        lse = tl.load(L + bh * seq_q + offs_m, mask=m_ok, other=0.0)
        delta = tl.load(Delta + bh * seq_q + offs_m, mask=m_ok, other=0.0)
    lse2 = lse * LOG2E
    k_ptrs = _tile_ptrs(K, b, h, offs_n, offs_d, stride_kb, stride_kh, stride_kn)
    v_ptrs = _tile_ptrs(V, b, h, offs_n, offs_d, stride_vb, stride_vh, stride_vn)
    kc_ptrs = _column_major_ptrs(KC, bh, offs_n, offs_d, seq_k, HEAD_DIM)
    kr_ptrs = _tile_ptrs(K, b, h, offs_n, offs_r, stride_kb, stride_kh, stride_kn)
    vr_ptrs = _tile_ptrs(V, b, h, offs_n, offs_r, stride_vb, stride_vh, stride_vn)
    kcr_ptrs = _column_major_ptrs(KC, bh, offs_n, offs_r, seq_k, HEAD_DIM)

    dq = tl.zeros([BLOCK_M, D_MAIN], dtype=tl.float32)
    dq_r = tl.zeros([BLOCK_M, D_REST if D_REST > 0 else 16], dtype=tl.float32)
    qk_scale = sm_scale * LOG2E
    if IS_CAUSAL:
        dq, dq_r = _dq_tiles(
            dq, dq_r, q, do, q_r, do_r, lse2, delta, k_ptrs, v_ptrs, kc_ptrs, kr_ptrs, vr_ptrs, kcr_ptrs,
            stride_kn, stride_vn, offs_m, offs_n, d_ok, 0, tl.minimum(start_m, seq_k), seq_k, qk_scale,
            BLOCK_N, HEAD_DIM, D_MAIN, D_REST, EVEN_N, False, DOT_PRECISION, COLUMN_MAJOR_COPIES,
        )  # fmt: skip
        dq, dq_r = _dq_tiles(
            dq, dq_r, q, do, q_r, do_r, lse2, delta, k_ptrs, v_ptrs, kc_ptrs, kr_ptrs, vr_ptrs, kcr_ptrs,
            stride_kn, stride_vn, offs_m, offs_n, d_ok, start_m, tl.minimum(start_m + BLOCK_M, seq_k),
            seq_k, qk_scale, BLOCK_N, HEAD_DIM, D_MAIN, D_REST, EVEN_N, True, DOT_PRECISION,
            COLUMN_MAJOR_COPIES,
        )  # fmt: skip
    else:
        dq, dq_r = _dq_tiles(
            dq, dq_r, q, do, q_r, do_r, lse2, delta, k_ptrs, v_ptrs, kc_ptrs, kr_ptrs, vr_ptrs, kcr_ptrs,
            stride_kn, stride_vn, offs_m, offs_n, d_ok, 0, seq_k, seq_k, qk_scale,
            BLOCK_N, HEAD_DIM, D_MAIN, D_REST, EVEN_N, False, DOT_PRECISION, COLUMN_MAJOR_COPIES,
        )  # fmt: skip

    dq_ptrs = _contiguous_ptrs(DQ, bh, offs_m, offs_d, seq_q, HEAD_DIM)
    dqr_ptrs = _contiguous_ptrs(DQ, bh, offs_m, offs_r, seq_q, HEAD_DIM)
    _store_rows(dq_ptrs, dqr_ptrs, (dq * sm_scale).to(DQ.dtype.element_ty),
                (dq_r * sm_scale).to(DQ.dtype.element_ty), m_ok, d_ok, not EVEN_M, HEAD_DIM, D_MAIN,
                D_REST)  # fmt: skip


@triton.jit
def _backward_kernel(
    Q, K, V, DO, QC, KC, DOC, L, Delta, DQ, DK, DV, DQ_ACC, desc_q, desc_do, desc_dq,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
    heads, seq_q, seq_k, sm_scale,
    SEQ_Q_BUCKET, SEQ_K_BUCKET, WITH_DESCRIPTORS,  # autotuning keys only
    HEAD_DIM: tl.constexpr, D_MAIN: tl.constexpr, D_REST: tl.constexpr, IS_CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    EVEN_M1: tl.constexpr, EVEN_N1: tl.constexpr, EVEN_M2: tl.constexpr, EVEN_N2: tl.constexpr,
    BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr,
    COLUMN_MAJOR_COPIES: tl.constexpr, ATOMIC_DQ: tl.constexpr,
    USE_TMA: tl.constexpr, TMA_REDUCE: tl.constexpr, DQ_ACC_ZEROED: tl.constexpr,
):  # fmt: skip
    """Program i computes dK, dV of key tile i (tiles of BLOCK_N1) and dQ of query tile i (BLOCK_M2).

    Both passes in one launch: under a causal mask key tile i has the most work when i is small and
    query tile i when i is large, so pairing them gives every program about the same work. dQ, dK
    and dV are contiguous (batch, heads, seq, d).

    ATOMIC_DQ: one pass instead. Key tile i's program also adds its share of every query tile's dQ
    into DQ_ACC (fp32, zeroed before launch, converted by the launcher), which saves recomputing the
    scores and dP for dQ at the price of the adds; with USE_TMA its q and dO tiles come through TMA
    descriptors and (TMA_REDUCE) each add of the head dim's main part is one bulk reduction in L2.
    """
    tl.static_assert(BLOCK_M2 % BLOCK_N2 == 0)
    tl.static_assert(DQ_ACC_ZEROED or not ATOMIC_DQ)
    pid = tl.program_id(0)
    bh, b, h = _batch_and_head(heads)
    if pid * BLOCK_N1 < seq_k:
        _dkdv_program(
            Q, K, V, DO, QC, DOC, L, Delta, DK, DV, DQ_ACC, desc_q, desc_do, desc_dq, b, h, bh,
            stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
            stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
            pid * BLOCK_N1, seq_q, seq_k, sm_scale,
            HEAD_DIM, D_MAIN, D_REST, IS_CAUSAL, DOT_PRECISION, EVEN_M1, EVEN_N1, BLOCK_M1, BLOCK_N1,
            COLUMN_MAJOR_COPIES, ATOMIC_DQ, USE_TMA, TMA_REDUCE,
        )  # fmt: skip
    if not ATOMIC_DQ and pid * BLOCK_M2 < seq_q:
        _dq_program(
            Q, K, V, DO, KC, L, Delta, DQ, b, h, bh,
            stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
            stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
            pid * BLOCK_M2, seq_q, seq_k, sm_scale,
            HEAD_DIM, D_MAIN, D_REST, IS_CAUSAL, DOT_PRECISION, EVEN_M2, EVEN_N2, BLOCK_M2, BLOCK_N2,
            COLUMN_MAJOR_COPIES,
        )  # fmt: skip


# --------------------------------------------------------------------------- configurations
CONFIG_ENV = "FLASH_TRITON_CONFIG"
BLOCK_NAMES = {
    "forward": ("BLOCK_M", "BLOCK_N"),
    "backward": ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2"),
}
_LAUNCH_NAMES = ("num_warps", "num_stages")
# Switches of a configuration besides its tiles, 0 or 1, with their defaults: ATOMIC_DQ picks the
# backward's one-pass form (see _backward_kernel).
SWITCHES = {"forward": {}, "backward": {"ATOMIC_DQ": 0}}

_ONE_PASS = {"ATOMIC_DQ": 1}
# Candidates as block sizes, then (num_warps, num_stages) and any switches. Chosen from a sweep of 120 to 144
# configurations per kernel on an H100 (bf16 and fp32, head dims 64 and 128, lengths 1024 to 16384):
# these were within 3% of the best there. "wide" rows (head dim x element size >= 256 bytes) need
# smaller tiles to fit in shared memory. The one-pass backward is a candidate for "narrow" and "mid"
# rows only: it was slower at head dim 128 (see the module docstring for the measurements).
_CANDIDATES = {
    ("forward", "narrow"): [((64, 64), 4, 3), ((64, 64), 4, 2), ((128, 64), 8, 3), ((128, 64), 8, 4),
                            ((128, 64), 4, 3), ((128, 128), 8, 3), ((64, 128), 4, 3), ((64, 128), 4, 2)],
    ("forward", "wide"): [((128, 64), 8, 3), ((128, 64), 4, 2), ((128, 32), 8, 3), ((128, 32), 8, 4),
                          ((64, 64), 4, 3), ((64, 32), 4, 3)],
    ("backward", "narrow"): [((32, 128, 128, 64), 4, 2), ((32, 128, 128, 64), 8, 3),
                             ((32, 128, 128, 64), 4, 4), ((32, 64, 64, 32), 4, 2), ((16, 64, 64, 16), 4, 3),
                             ((64, 64, 64, 64), 4, 3, _ONE_PASS), ((64, 64, 64, 64), 4, 4, _ONE_PASS)],
    ("backward", "wide"): [((64, 128, 128, 64), 8, 2), ((64, 128, 128, 32), 8, 2), ((32, 128, 128, 32), 8, 2),
                           ((32, 128, 128, 64), 8, 3), ((32, 64, 64, 32), 4, 2)],
    # fp32 at head dim 128, with the column-major operand copies: from a sweep of 288 backward
    # configurations, single-stage wide tiles were 1.4-2.0x faster than the "wide" rows' best. The
    # single-stage forward tiles of 4 warps were the fastest with TMA loads.
    ("forward", "widest"): [((128, 64), 8, 2), ((128, 32), 8, 3), ((128, 32), 8, 4), ((64, 32), 4, 2),
                            ((128, 64), 4, 1), ((128, 32), 4, 1)],
    ("backward", "widest"): [((32, 128, 128, 64), 8, 1), ((32, 128, 128, 32), 8, 1),
                             ((16, 128, 128, 32), 8, 2), ((32, 64, 64, 32), 4, 2)],
    # 16-bit rows of 80 or 96 columns (head dims 80 and 96, 2.7b's 80): narrow by bytes, but up to 1.5
    # times the columns the narrow rows were chosen at. The narrow and wide tiles that Triton 3.6
    # compiles for sm_90 without register spills at head dims 80 and 96 (two 4-warp narrow backward
    # tiles spilled 416 to 488 bytes per thread there), one one-pass form among them.
    ("forward", "mid"): [((64, 64), 4, 3), ((64, 64), 4, 2), ((128, 64), 8, 3), ((128, 64), 8, 4),
                         ((128, 128), 8, 3), ((64, 128), 4, 3), ((64, 128), 4, 2), ((128, 32), 8, 3)],
    ("backward", "mid"): [((32, 128, 128, 64), 8, 3), ((32, 64, 64, 32), 4, 2), ((16, 64, 64, 16), 4, 3),
                          ((64, 128, 128, 64), 8, 2), ((32, 128, 128, 32), 8, 2), ((64, 128, 128, 32), 8, 2),
                          ((64, 64, 64, 64), 4, 3, _ONE_PASS)],
    # More than 128 columns (head dims 136 to 256): not swept on a GPU. The tiles that Triton 3.6 compiles
    # for sm_90 within the shared memory of an H100 (227 KiB) and without register spills at head dims
    # 160, 192 and 256; 4 warps spilled 0.2 to 6 KiB per thread in the backward, 8 warps none.
    ("forward", "deep"): [((128, 64), 8, 2), ((128, 32), 8, 2), ((64, 64), 4, 2), ((64, 32), 4, 2),
                          ((128, 64), 8, 3), ((64, 64), 8, 2)],
    ("backward", "deep"): [((32, 64, 64, 32), 8, 2), ((16, 64, 64, 16), 8, 2), ((32, 32, 32, 32), 8, 2),
                           ((16, 32, 32, 16), 8, 2), ((32, 32, 32, 32), 8, 3)],
    ("forward", "deepest"): [((64, 32), 8, 2), ((32, 32), 8, 2), ((64, 16), 8, 2), ((128, 16), 8, 2),
                             ((64, 16), 4, 2), ((32, 16), 4, 2)],
    ("backward", "deepest"): [((16, 32, 32, 16), 8, 2), ((16, 16, 16, 16), 8, 2), ((16, 16, 16, 16), 4, 2),
                              ((16, 32, 16, 16), 8, 2)],
}  # fmt: skip
# The CPU interpreter gets one small configuration: it is for correctness, and small tiles make
# short test sequences span several tiles, diagonal and ragged ones included.
_INTERPRETER = {"forward": ((32, 16), 4, 1), "backward": ((16, 32, 32, 16), 4, 1)}


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


# Row width class of each candidate, by id: _prune reads it. Not an attribute of the Config, which
# must stay rebuildable as Config(**config.__dict__) for the autotuner's on-disk cache.
_WIDTH_OF: dict[int, str] = {}


def _config(
    kernel: str, blocks: tuple[int, ...], warps: int, stages: int, switches: dict[str, int] | None = None,
    *, width: str = "",
) -> triton.Config:  # fmt: skip
    kwargs = dict(zip(BLOCK_NAMES[kernel], blocks, strict=True)) | SWITCHES[kernel] | (switches or {})
    config = triton.Config(kwargs, num_warps=warps, num_stages=stages)
    if width:
        _WIDTH_OF[id(config)] = width
    return config


def _candidates(kernel: str) -> list[triton.Config]:
    if _interpreting():
        return [_config(kernel, *_INTERPRETER[kernel])]
    return [_config(kernel, *row, width=width) for width in _WIDTHS for row in _CANDIDATES[kernel, width]]


_WIDTHS = ("narrow", "mid", "wide", "widest", "deep", "deepest")


def _row_width(head_dim: int, element_size: int) -> str:
    """The candidates' class of a tile's rows, by the columns its parts hold (head_dim_parts): up to 128
    columns by bytes per row ('narrow' below 256, 'wide' below 512, 'widest' fp32 at 128 columns),
    16-bit rows of 80 or 96 columns 'mid'; more than 128 columns 'deep' (16-bit) or 'deepest' (fp32),
    where the fp32 accumulators of dK and dV alone take BLOCK_N1 x 2 x columns x 4 bytes of registers."""
    columns = sum(head_dim_parts(head_dim))
    if columns > 128:
        return "deepest" if element_size >= 4 else "deep"
    row_bytes = columns * element_size
    if row_bytes >= 256:
        return "widest" if row_bytes >= 512 else "wide"
    return "mid" if columns > 64 else "narrow"


def head_dim_parts(head_dim: int) -> tuple[int, int]:
    """(main, rest): the power-of-two column counts the kernels split a head dim into, rest 0 for none.

    The main part is the largest power of two within the head dim, and the rest what is left where that
    is itself a power of two of at least 16 (tl.dot's smallest): 48 = 32 + 16, 80 = 64 + 16,
    96 = 64 + 32, 144, 160, 192 = 128 + 16, 32, 64. Other head dims run as one part, the next power of
    two, its padding columns masked (72 as 128). A rest part padded to a power of two saves most of
    that padding, but on an H100 (Triton 3.6) forwards with key tiles of 64 rows or more that loaded
    one under a row and a column mask read out of bounds (head dims 40 and 72, 40 keys), where
    unpadded rest parts (80) and padded main parts (24) ran correctly.
    """
    main = max(16, 1 << (head_dim.bit_length() - 1))
    rest = head_dim - main
    if rest <= 0:
        return main, 0
    return (main, rest) if rest >= 16 and rest & (rest - 1) == 0 else (2 * main, 0)


def padded_share(head_dim: int) -> float:
    """The share of the kernels' head-dim columns that are padding: matmul work that counts for nothing
    (0 at 16, 32, 48, 64, 80, 96, 128, 144, 160, 192, 256; 0.44 at 72, 0.47 at 136)."""
    return 1 - head_dim / sum(head_dim_parts(head_dim))


def _prune(configs, named_args, **kwargs):
    """The candidates of the inputs' row width; fp32 keeps the two-pass backward, whose TF32 operands
    come from column-major copies (the one pass would read K along the reduced dim)."""
    element_size = named_args["Q"].element_size()
    width = _row_width(kwargs.get("HEAD_DIM", named_args.get("HEAD_DIM")), element_size)
    return [
        c
        for c in configs
        if _WIDTH_OF.get(id(c), width) == width and not (element_size == 4 and c.kwargs.get("ATOMIC_DQ"))
    ]


def _check_blocks(kernel: str, blocks: dict[str, int]) -> None:
    """In the backward's dQ pass the diagonal must start on a key tile boundary (see the module
    docstring); the forward and the dK/dV pass take any two tile sizes."""
    if kernel == "backward" and blocks["BLOCK_M2"] % blocks["BLOCK_N2"]:
        raise ValueError(f"{CONFIG_ENV}: the {kernel} entry needs BLOCK_M2 a multiple of BLOCK_N2")


@functools.lru_cache(maxsize=16)
def _parse_forced(raw: str) -> dict[str, dict[str, int]]:
    forced: dict[str, dict[str, int]] = {}
    for entry in filter(None, (e.strip() for e in raw.split(";"))):
        kernel, sep, values = entry.partition(":")
        kernel = kernel.strip()
        if not sep or kernel not in BLOCK_NAMES:
            raise ValueError(
                f"{CONFIG_ENV}: entry {entry!r} must start with one of {', '.join(BLOCK_NAMES)} and a colon, "
                f"e.g. forward:BLOCK_M=64,BLOCK_N=32,num_warps=4,num_stages=2"
            )
        switches = SWITCHES[kernel]
        accepted = (*BLOCK_NAMES[kernel], *_LAUNCH_NAMES)
        params = {"num_warps": 4, "num_stages": 2, **switches}
        for item in filter(None, (i.strip() for i in values.split(","))):
            key, eq, value = (part.strip() for part in item.partition("="))
            if eq and key in switches and value in ("0", "1"):
                params[key] = int(value)
                continue
            if not eq or key not in accepted or not value.isdigit() or int(value) == 0:
                raise ValueError(
                    f"{CONFIG_ENV}: {item!r} in the {kernel} entry must be NAME=positive integer "
                    f"with NAME one of {', '.join(accepted)}"
                    + "".join(f", or {name}=0 or 1" for name in switches)
                )
            params[key] = int(value)
        for block in BLOCK_NAMES[kernel]:
            size = params.get(block)
            if size is None or size < 16 or size & (size - 1):
                raise ValueError(f"{CONFIG_ENV}: the {kernel} entry needs {block}, a power of two >= 16")
        _check_blocks(kernel, params)
        forced[kernel] = params
    return forced


def forced_configs() -> dict[str, dict[str, int]]:
    """The configurations FLASH_TRITON_CONFIG forces, per kernel (read at every launch)."""
    return _parse_forced(os.environ.get(CONFIG_ENV, ""))


def _bucket(n: int) -> int:
    """Autotuning key for a length: lengths within a power of two share a tuned configuration."""
    return triton.next_power_of_2(n)


# WITH_DESCRIPTORS: loads through TMA or pointers time differently, the one-pass backward most.
_AUTOTUNE_KEY = ["SEQ_Q_BUCKET", "SEQ_K_BUCKET", "WITH_DESCRIPTORS", "HEAD_DIM", "IS_CAUSAL"]
# Short timing per candidate: the differences that decide are mostly tens of percent, and a long sweep
# per shape would make the first call of every new shape take minutes. But 25 ms is only three calls
# of a 7 ms backward, too few to tell candidates 5% apart: see _tuning_bench.
TUNING_MS = 25
TUNING_MIN_CALLS = 10


def _tuning_bench(kernel_call, quantiles=None):
    """The autotuner's timing of one candidate: do_bench over TUNING_MS, or over TUNING_MIN_CALLS calls
    where those take longer. At (1, 32, 16384, 64) causal bf16 on an H100, the one-pass backward (7.3 ms)
    beats the best two-pass one by 5%; timed over 25 ms the autotuner picked the two-pass one in 2 of
    28 tunings, over ten calls in none of 16."""
    timing = triton.testing.do_bench(kernel_call, warmup=5, rep=TUNING_MS, quantiles=quantiles)
    typical = timing[0] if quantiles else timing  # the autotuner asks for quantiles, the median first
    if typical * TUNING_MIN_CALLS > TUNING_MS:
        # One call more: do_bench counts its calls from an estimate that includes clearing the L2.
        rep = typical * (TUNING_MIN_CALLS + 1)
        timing = triton.testing.do_bench(kernel_call, warmup=0, rep=rep, quantiles=quantiles)
    return timing


def _convert_dq(dq_acc: torch.Tensor, sm_scale: float, dq: torch.Tensor) -> None:
    """The one-pass form's dQ: its fp32 sum of unscaled shares, scaled and cast into dq in one pass."""
    torch.mul(dq_acc, sm_scale, out=dq)


def _convert_dq_while_tuning(args, exception=None) -> None:
    """Autotuner post-hook: converting the one-pass form's fp32 dQ is part of that form's cost, so
    the timings that choose between the forms include it (after a chosen run, the launcher converts)."""
    if exception is None and args.get("ATOMIC_DQ"):
        _convert_dq(args["DQ_ACC"], args["sm_scale"], args["DQ"])


def _tuned(kernel: str, fn, post_hook=None):
    # cache_results: the timings of each (kernel source, GPU, key) are kept in Triton's cache
    # directory (TRITON_CACHE_DIR, ~/.triton/cache by default), so a shape is tuned once per machine,
    # not in every process. A change of the kernel, the candidates or Triton tunes again; deleting
    # the "*.autotune.json" files there does too.
    return triton.autotune(
        configs=_candidates(kernel),
        key=_AUTOTUNE_KEY,
        prune_configs_by={"early_config_prune": _prune},
        do_bench=_tuning_bench,
        post_hook=post_hook,
        cache_results=True,
    )(fn)


def _zero_dq_acc_for_one_pass(args) -> bool:
    """Heuristic for DQ_ACC_ZEROED: the one-pass form adds into DQ_ACC, so it is zeroed right before
    each launch of that form (autotuning runs included); the two-pass form leaves it alone."""
    if not args["ATOMIC_DQ"]:
        return False
    args["DQ_ACC"].zero_()
    return True


def _fit_descriptors(
    rows_of: dict[str, str], switch: str | None = None, columns_if: dict[str, str] | None = None
):
    """Heuristic for USE_TMA: whether the launcher passed descriptors (and the configuration about to
    run has `switch` on), whose tile shapes it then sets from that configuration: the autotuner picks
    the tiles after the descriptors exist. A descriptor named in columns_if spans a column-major copy,
    (batch, heads, d, seq), when the kernel argument named there is set: its tiles are (d, block)."""

    def fit(args) -> bool:
        if args["desc_q"] is None or (switch is not None and not args[switch]):
            return False
        for name, block in rows_of.items():
            tile = [args[block], args["D_MAIN"]]
            if columns_if and args.get(columns_if.get(name, ""), False):
                tile.reverse()
            args[name].block_shape = [1, 1, *tile]
        return True

    return fit


_forward_fixed = triton.heuristics(
    {
        "EVEN_M": lambda a: a["seq_q"] % a["BLOCK_M"] == 0,
        "USE_TMA": _fit_descriptors(
            {"desc_q": "BLOCK_M", "desc_o": "BLOCK_M", "desc_k": "BLOCK_N", "desc_v": "BLOCK_N"},
            columns_if={"desc_v": "V_COLUMN_MAJOR"},
        ),
    }
)(_forward_kernel)
_backward_fixed = triton.heuristics(
    {
        # Causal dK/dV query tiles start at a key tile: aligned to BLOCK_M1 only if it divides BLOCK_N1.
        "EVEN_M1": lambda a: (
            a["seq_q"] % a["BLOCK_M1"] == 0 and (not a["IS_CAUSAL"] or a["BLOCK_N1"] % a["BLOCK_M1"] == 0)
        ),
        "EVEN_N1": lambda a: a["seq_k"] % a["BLOCK_N1"] == 0,
        "EVEN_M2": lambda a: a["seq_q"] % a["BLOCK_M2"] == 0,
        "EVEN_N2": lambda a: a["seq_k"] % a["BLOCK_N2"] == 0,
        "USE_TMA": _fit_descriptors(
            {"desc_q": "BLOCK_M1", "desc_do": "BLOCK_M1", "desc_dq": "BLOCK_M1"}, switch="ATOMIC_DQ"
        ),
        # Triton's interpreter has no TMA reductions; it adds through pointers.
        "TMA_REDUCE": lambda a: a["USE_TMA"] and not _interpreting(),
        "DQ_ACC_ZEROED": _zero_dq_acc_for_one_pass,
    }
)(_backward_kernel)


class _Kernel:
    """A kernel launched three ways: forced (FLASH_TRITON_CONFIG), through Triton's autotuner the first
    time a tuning key is seen that the GPU's stored table (kernels/tuned/) does not hold, and from then
    on, or from the first call of a stored key, with that key's configuration straight through the jit
    function.

    The direct launch skips what the autotuner and heuristics do at every call: each rebuilds a dict
    of the kernel's 30 to 45 arguments, the heuristics once per rule. Here the dict is built once per
    launch and the same rules run on it. On an H100 host (Triton 3.6), alternating the two call by call,
    a bf16 forward+backward through autograd took 853 us of host time against 970 us at a size the GPU
    finishes at once, and (16, 16, 1024, 128) causal, bound by the host, 949 us per call against 1096 us.
    """

    def __init__(self, name: str, fixed, post_hook=None):
        self.name = name
        self.fixed = fixed  # the jit function under its heuristics
        self.tuned = _tuned(name, fixed, post_hook)
        self.chosen: dict[tuple, triton.Config] = {}  # tuning key -> the autotuner's choice
        self.last: triton.Config | None = None  # what the last autotuned launch ran with

    def named(self, args: tuple, kwargs: dict) -> dict:
        """A launch's arguments by the kernel's names: the first ones come positional, the rest as kwargs."""
        return dict(zip(self.fixed.arg_names, args, strict=False)) | kwargs

    def key(self, named: dict) -> tuple:
        """The autotuner's key for these arguments, with the dtype and device of the inputs."""
        q = named["Q"]
        return (*(named[name] for name in _AUTOTUNE_KEY), q.dtype, q.device)

    def known(self, key: tuple) -> triton.Config | None:
        """The key's configuration: tuned in this process, or stored for this GPU model (kernels/tuned/,
        see kernels/flash_triton_tuning.py) and from then on kept as if tuned; None: the autotuner
        chooses."""
        config = self.chosen.get(key)
        if config is None:
            gpu = flash_triton_tuning.gpu_name_of(key[-1])
            config = flash_triton_tuning.lookup(self.name, key, gpu, _could_choose)
            if config is not None:
                self.chosen[key] = config
        return config

    def may_run(self, switch: str, named: dict) -> bool:
        """Whether a launch with these key arguments (named as the kernel's) may run a configuration
        with `switch` on: the forced one, the key's tuned or stored choice, or before tuning any
        candidate that pruning keeps for it."""
        forced = forced_configs().get(self.name)
        if forced is not None:
            return bool(forced.get(switch))
        config = self.known(self.key(named))
        configs = [config] if config is not None else _prune(self.tuned.configs, named)
        return any(c.kwargs.get(switch) for c in configs)

    def launch(self, grid, *args, **kwargs) -> dict[str, int]:
        """Launch with the forced configuration if one is set, else autotuned; returns its kwargs."""
        forced = forced_configs().get(self.name)
        if forced is not None:
            self.fixed[grid](*args, **kwargs, **forced)
            return forced
        named = self.named(args, kwargs)
        key = self.key(named)
        config = self.known(key)
        if config is None:
            self.tuned[grid](*args, **kwargs)
            config = self.chosen[key] = self.tuned.best_config
        else:
            launch_options = config.all_kwargs()
            named |= launch_options
            for rule_name, rule in self.fixed.values.items():  # the heuristics, in their order
                named[rule_name] = rule(named)
            rules = {rule_name: named[rule_name] for rule_name in self.fixed.values}
            self.fixed.fn[grid(named)](*args, **kwargs, **launch_options, **rules)
        self.last = config
        return config.kwargs


def _could_choose(kernel: str, key: tuple, config: triton.Config) -> bool:
    """Whether the autotuner could pick `config` at a tuning key: one of the candidates _prune keeps
    for its head dim and dtype. A stored table's entries are checked with it."""
    named = {"Q": torch.empty(0, dtype=key[5]), "HEAD_DIM": key[3]}
    kept = _prune(_KERNELS[kernel].tuned.configs, named)
    return any(flash_triton_tuning.same_config(config, c) for c in kept)


_KERNELS = {
    "forward": _Kernel("forward", _forward_fixed),
    "backward": _Kernel("backward", _backward_fixed, _convert_dq_while_tuning),
}


def chosen_configs() -> dict[str, str | None]:
    """The configuration each kernel ran with last (autotuned or forced), for reports."""
    forced = forced_configs()
    chosen: dict[str, str | None] = {}
    for name, kernel in _KERNELS.items():
        if name in forced:
            chosen[name] = ", ".join(f"{k}={v}" for k, v in forced[name].items()) + " (forced)"
        else:
            chosen[name] = str(kernel.last) if kernel.last is not None else None
    return chosen


# --------------------------------------------------------------------------- launchers
def _check_runnable(q: torch.Tensor) -> None:
    if q.device.type != "cuda" and not _interpreting():
        raise ValueError(
            f"q is on {q.device}; FlashAttentionTriton runs on CUDA tensors, or on the CPU with "
            f"TRITON_INTERPRET=1 set before triton is imported"
        )


def _unit_stride_head_dim(t: torch.Tensor) -> torch.Tensor:
    """Rows are loaded as vectors, which needs the head dim contiguous; other strides are passed on."""
    return t if t.stride(-1) == 1 else t.contiguous()


def _dot_precision(dtype: torch.dtype) -> str:
    return "tf32" if dtype == torch.float32 else "ieee"  # 16-bit dots are exact products, fp32 sums


# Hopper's TF32 tensor cores (wgmma) read a B operand from shared memory only contiguous along
# the reduced dimension; 16-bit ones read either order. P @ V, dS^T @ Q, P^T @ dO and dS @ K reduce
# over rows of V, Q, dO and K, so fp32 launches hand the kernels column-major copies of those
# (one extra pass over each tensor). Switched off, fp32 ran 2.8 to 4.5 times the bf16 time.
COLUMN_MAJOR_TF32_OPERANDS = True


def _column_major_copies(dtype: torch.dtype) -> bool:
    return dtype == torch.float32 and COLUMN_MAJOR_TF32_OPERANDS


def _column_major(t: torch.Tensor) -> torch.Tensor:
    """(B, H, T, d) with the rows contiguous: the transpose of a contiguous (B, H, d, T).

    A Triton kernel rather than `t.transpose(-1, -2).contiguous()`, which on an H100 moved about
    1 TB/s and cost an fp32 (16, 32, 1024, 64) forward+backward 1.1 ms over its four copies."""
    batch, heads, seq, head_dim = t.shape
    t = _unit_stride_head_dim(t)
    copy = torch.empty(batch, heads, head_dim, seq, device=t.device, dtype=t.dtype)
    if copy.numel():
        block = 16 if _interpreting() else 64
        _column_major_copy_kernel[(triton.cdiv(seq, block), batch * heads)](
            t, copy, *t.stride()[:3], heads, seq, HEAD_DIM=head_dim,
            BLOCK_D=triton.next_power_of_2(head_dim), BLOCK_T=block,
        )  # fmt: skip
    return copy.transpose(-1, -2)


def _on_device(device: torch.device):
    """Launch on the tensors' GPU; entering torch.cuda.device costs host time, so only when needed."""
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


@functools.cache
def _has_tma(device: torch.device) -> bool:
    """The tensor memory accelerator came with Hopper (compute capability 9); the interpreter emulates it."""
    if _interpreting():
        return True
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


# Descriptors cost host time at every launch: measured on an H100 (Triton 3.6), 0.12 ms more per
# forward and 0.18 ms per backward. Below this much work (batch x heads x seq_q x seq_k x d) the
# calls are bound by the host and that cost shows (bf16 (16, 32, 1024, 64) causal fwd+bwd: 1.53 ms
# with them, 1.33 ms without); from it on the GPU hides it and TMA pays ((4, 32, 4096, 64) causal:
# 3.15 ms against 3.85 ms).
TMA_MIN_WORK = 2**36
# fp32 calls keep the GPU busy about three times as long as 16-bit ones of the same size, so the
# host cost hides from less work on: at (16, 16, 1024, 128), work 2^35, the fp32 forward+backward took
# 0.95 to 0.97 times the pointer loads' time with them, and 0.96 to 0.99 times timed call by call.
TMA_MIN_WORK_FP32 = 2**35


def _loads_through_tma(kernel: str, dtype: torch.dtype, head_dim: int) -> bool:
    """Whether a launch takes descriptors: 16-bit inputs do, and fp32 ones in the forward from 128
    columns on (head dims 72, 88 and 104 to 256), where its pointer loads run at one pipeline stage and
    stage each K and V tile through registers. There, on an H100, the forward with TMA took 0.66 to
    0.74 times the time of pointer loads at head dim 128 and 16384 tokens of sequence 4096 and 16384,
    causal or not. In standalone kernels (H100, (4, H, 4096, d), non-causal), fp32 at head dim 64 and
    fp32's backward passes at 64 and 128 were 1.04 to 1.22 times slower with it."""
    wide_fp32 = _row_width(head_dim, 4) in ("widest", "deepest")
    return dtype != torch.float32 or (kernel == "forward" and wide_fp32)


def _tma_can_load(work: int, *tensors: torch.Tensor) -> bool:
    """Whether TMA loads these 4-d tensors (batch, heads, then two dims, the last contiguous): not before
    Hopper, below TMA_MIN_WORK (TMA_MIN_WORK_FP32 for fp32), or where a base or a stride is not a
    multiple of 16 bytes."""
    first = tensors[0]
    if TensorDescriptor is None or not _has_tma(first.device):
        return False
    min_work = TMA_MIN_WORK_FP32 if first.dtype == torch.float32 else TMA_MIN_WORK
    if work < min_work and not _interpreting():  # the interpreter tests both paths at small sizes
        return False
    return not any(
        t.data_ptr() % 16 or any(s * t.element_size() % 16 for s in t.stride()[:-1]) or 0 in t.shape
        for t in tensors
    )


def _descriptors(work: int, *tensors: torch.Tensor) -> list | None:
    """TMA descriptors over the tensors where _tma_can_load, else None (loads go through pointers).
    The tile shape is a placeholder until launch."""
    if not _tma_can_load(work, *tensors):
        return None
    return [TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, 16, 16]) for t in tensors]


def _launch_descriptors(kernel: str, work: int, *tensors: torch.Tensor) -> list:
    """The descriptor arguments of a launch whose first tensor is q: descriptors where the policy
    (_loads_through_tma) and TMA's limits (_descriptors) allow them, None for each tensor otherwise."""
    q = tensors[0]
    made = _descriptors(work, *tensors) if _loads_through_tma(kernel, q.dtype, q.shape[-1]) else None
    return made or [None] * len(tensors)


def attention_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """O (batch, heads, seq_q, d) in q's dtype and L (batch, heads, seq_q) in fp32, from 4-d inputs."""
    batch, heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    q, k = _unit_stride_head_dim(q), _unit_stride_head_dim(k)
    out = torch.empty(batch, heads, seq_q, head_dim, device=q.device, dtype=q.dtype)
    lse = torch.empty(batch, heads, seq_q, device=q.device, dtype=torch.float32)
    work = batch * heads * seq_q * seq_k * head_dim
    copies = _column_major_copies(q.dtype)
    d_main, d_rest = head_dim_parts(head_dim)
    with _on_device(q.device):
        v = _column_major(v) if copies else _unit_stride_head_dim(v)
        # A column-major copy is read as the contiguous (batch, heads, d, seq) tensor it is.
        descriptors = _launch_descriptors("forward", work, q, k, v.transpose(-1, -2) if copies else v, out)
        _KERNELS["forward"].launch(
            lambda meta: (triton.cdiv(seq_q, meta["BLOCK_M"]), batch * heads),
            q, k, v, out, lse, *descriptors, *q.stride()[:3], *k.stride()[:3], *v.stride(),
            heads, seq_q, seq_k, 1.0 / math.sqrt(head_dim), _bucket(seq_q), _bucket(seq_k),
            descriptors[0] is not None,
            HEAD_DIM=head_dim, D_MAIN=d_main, D_REST=d_rest, IS_CAUSAL=bool(is_causal),
            DOT_PRECISION=_dot_precision(q.dtype), V_COLUMN_MAJOR=copies,
        )  # fmt: skip
    return out, lse


def attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    is_causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV as contiguous 4-d tensors in the inputs' dtype, from the forward's O and L.

    `out` and `lse` are the contiguous tensors attention_forward returned.
    """
    batch, heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    q, k, v = _unit_stride_head_dim(q), _unit_stride_head_dim(k), _unit_stride_head_dim(v)
    grad_out = _unit_stride_head_dim(grad_out)
    delta = torch.empty_like(lse)
    dq = torch.empty(q.shape, device=q.device, dtype=q.dtype)
    dk = torch.empty(k.shape, device=k.device, dtype=k.dtype)
    dv = torch.empty(v.shape, device=v.device, dtype=v.dtype)
    copies = _column_major_copies(q.dtype)
    work = batch * heads * seq_q * seq_k * head_dim
    d_main, d_rest = head_dim_parts(head_dim)
    # Whether the launch qualifies for TMA is part of the tuning key, whichever form then runs.
    with_descriptors = _loads_through_tma("backward", q.dtype, head_dim) and _tma_can_load(work, q, grad_out)
    key = {
        "Q": q, "SEQ_Q_BUCKET": _bucket(seq_q), "SEQ_K_BUCKET": _bucket(seq_k),
        "WITH_DESCRIPTORS": with_descriptors, "HEAD_DIM": head_dim, "IS_CAUSAL": bool(is_causal),
    }  # fmt: skip
    if _KERNELS["backward"].may_run("ATOMIC_DQ", key):
        # dQ in fp32 for the one-pass form, which adds into it (zeroed only when that form runs); only
        # that form reads the descriptors.
        dq_acc = torch.empty(q.shape, device=q.device, dtype=torch.float32)
        descriptors = _launch_descriptors("backward", work, q, grad_out, dq_acc)
    else:
        # The two-pass form runs (forced, tuned, or the only candidate): no fp32 copy of q's shape to
        # hold (twice q's bytes in 16-bit), and no descriptors to make.
        dq_acc = torch.empty(0, device=q.device, dtype=torch.float32)
        descriptors = [None] * 3
    sm_scale = 1.0 / math.sqrt(head_dim)
    rows = 64
    with _on_device(q.device):
        # Column-major copies for TF32, or the same tensors again (not read then).
        qc, kc, doc = (_column_major(t) for t in (q, k, grad_out)) if copies else (q, k, grad_out)
        _row_dot_kernel[(triton.cdiv(seq_q, rows), batch * heads)](
            out, grad_out, delta, *grad_out.stride()[:3], heads, seq_q, HEAD_DIM=head_dim,
            BLOCK_D=triton.next_power_of_2(head_dim), BLOCK_M=rows,
        )  # fmt: skip
        ran = _KERNELS["backward"].launch(
            lambda meta: (max(triton.cdiv(seq_k, meta["BLOCK_N1"]),
                              0 if meta["ATOMIC_DQ"] else triton.cdiv(seq_q, meta["BLOCK_M2"])),
                          batch * heads),
            q, k, v, grad_out, qc, kc, doc, lse, delta, dq, dk, dv, dq_acc, *descriptors,
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *grad_out.stride()[:3],
            heads, seq_q, seq_k, sm_scale, key["SEQ_Q_BUCKET"], key["SEQ_K_BUCKET"], with_descriptors,
            HEAD_DIM=head_dim, D_MAIN=d_main, D_REST=d_rest, IS_CAUSAL=bool(is_causal),
            DOT_PRECISION=_dot_precision(q.dtype), COLUMN_MAJOR_COPIES=copies,
        )  # fmt: skip
        if ran.get("ATOMIC_DQ"):
            _convert_dq(dq_acc, sm_scale, dq)
    return dq, dk, dv


# --------------------------------------------------------------------------- operators and autograd
def _forward_impl(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """O in q's shape and dtype and L of shape q.shape[:-1] in fp32, from 3-d or 4-d inputs."""
    out, lse = attention_forward(as_heads(q), as_heads(k), as_heads(v), is_causal)
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
    out4 = as_heads(out)
    dq, dk, dv = attention_backward(
        as_heads(q), as_heads(k), as_heads(v), out4, lse.view(out4.shape[:-1]), as_heads(grad_out), is_causal
    )
    return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape)


# Registered operators (torch.library) for torch.compile: it traces through them with the fake
# implementations below and keeps the kernels opaque, with no graph break (Dynamo cannot trace the
# autotuner's Python). The autograd formula is the backward operator.
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
    autograd.Function does not. With the launches stubbed out, on a 2-core CPU host: 95 against
    39 us per forward, 300 against 165 us per forward+backward."""

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
        _check_runnable(q)
        if torch.compiler.is_compiling():
            out, _lse = _forward_op(q, k, v, bool(is_causal))
            return out
        return _EagerFunction.apply(q, k, v, bool(is_causal))


def flash_attention_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False
) -> torch.Tensor:
    return FlashAttentionTriton.apply(q, k, v, is_causal)
