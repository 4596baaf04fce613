"""Tile addressing, loads and stores that the forward and backward kernels share, and the split of a
head dim into power-of-two parts.

tl.arange and tl.dot take powers of two, so a head dim d runs as a main part of D_MAIN columns and,
where what is left is a power of two of 16 or more, a rest part of D_REST columns beside it
(head_dim_parts): scores sum the two parts' dots, and each output, dQ, dK and dV part has a dot of its
own. 80 = 64 + 16 and 96 = 64 + 32 run without padding; other head dims run as one part of the next
power of two, whose padding columns loads mask and stores leave out (padded_share). At head dims 80
and 96 one padded 128-column tile is slower than the split (NOTES.md: FlashAttentionTriton at head
dims that are not powers of two).

A main part moves through a TMA descriptor or through pointers (_load_rows); a rest part always
through pointers, masked by rows only, since it is never padded (_load_rest).
"""

from __future__ import annotations

import triton
import triton.language as tl

# exp(x) == exp2(x * log2(e)): exp2 is a single instruction on the GPU. A constexpr, so kernels can read it.
LOG2E = tl.constexpr(1.4426950408889634)


def head_dim_parts(head_dim: int) -> tuple[int, int]:
    """(main, rest): the power-of-two column counts the kernels split a head dim into, rest 0 for none.

    The main part is the largest power of two within the head dim, and the rest what is left where that
    is itself a power of two of at least 16 (tl.dot's smallest): 48 = 32 + 16, 80 = 64 + 16,
    96 = 64 + 32, 144, 160, 192 = 128 + 16, 32, 64. Other head dims run as one part, the next power of
    two, its padding columns masked (72 as 128): a rest part padded to a power of two would waste less,
    but read out of bounds on a GPU (NOTES.md: FlashAttentionTriton at head dims that are not powers of
    two).
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


# --------------------------------------------------------------------------- jit helpers
# A head dim runs as a main part of D_MAIN columns and a rest part of D_REST (0 for none), both
# powers of two (head_dim_parts).
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
def column_major_copy_kernel(
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
