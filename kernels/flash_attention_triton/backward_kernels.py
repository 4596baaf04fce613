"""The backward kernels: D = rowsum(dO * O) (row_dot_kernel), then dK, dV and dQ in one launch
(backward_kernel).

The backward recomputes each probability tile from the forward's L: P = exp(S - L), dV = P^T dO,
dP = dO V^T, dS = P * (dP - D), dQ = dS K, dK = dS^T Q (both times the softmax scale). It has two
forms, and the autotuner picks per tuning key (ATOMIC_DQ in the configuration):

- Two passes, so that nothing is written by two programs: one program per key tile accumulates dK
  and dV over the queries, one per query tile accumulates dQ over the keys. Program i runs key tile i
  and query tile i: under a causal mask the first has the most work when i is small, the second when
  i is large.
- One pass (ATOMIC_DQ), which saves recomputing S and dP for dQ: each key tile's program also adds
  its share of dQ into an fp32 buffer, as one TMA bulk reduction per tile where the launch has
  descriptors (TMA_REDUCE), else through pointer atomics. In bf16 it beat the two passes at head dim
  64, causal, on long sequences, was slightly slower at head dim 64 non-causal or at 1024, and slower
  through pointer atomics (NOTES.md: Measurements behind comments in the code). It is a candidate
  only for 16-bit rows of up to 96 columns (configs): it lost at head dim 128, and in fp32 it would
  read K along the reduced dim.

Causal: the dK/dV pass masks the query tiles from its key tile's start up to the larger of the two
tile sizes, so any two tile sizes work; the dQ pass needs its query tiles a multiple of its key tiles,
so that the diagonal starts on a key tile boundary.

fp32 (COLUMN_MAJOR_COPIES): TF32 dots read their B operand only contiguous along the reduced dim, so
q, dO and K come also from column-major copies (see launch), and the dK/dV pass reads four tiles per
step where 16-bit reads two. At head dim 128 the backward then fills a multiprocessor: one program per
multiprocessor, registers that spill, and one pipeline stage whose loads pass through registers, where
bf16 runs three stages (Nsight Compute's profile, and other forms of the fp32 backward measured slower:
NOTES.md, Forms measured and dropped).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.flash_attention_triton.tiles import (
    LOG2E,
    _batch_and_head,
    _column_major_ptrs,
    _contiguous_ptrs,
    _head_dim_offsets,
    _load_parts,
    _load_rest,
    _load_rows,
    _masked_load,
    _store_rows,
    _tile_ptrs,
)


@triton.jit
def row_dot_kernel(
    Out, DO, Delta, DQ_ACC, stride_dob, stride_doh, stride_dom, heads, seq_q,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, ZERO_DQ_ACC: tl.constexpr,
):  # fmt: skip
    """D = rowsum(dO * O) in fp32: the softmax's backward term, computed once per row. BLOCK_D is the
    head dim rounded up to a power of two, its padding masked. ZERO_DQ_ACC: also zero the same rows of
    DQ_ACC (contiguous fp32, q's shape), which a one-pass backward adds into: one launch less."""
    bh, b, h = _batch_and_head(heads)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_ok, d_ok = offs_m < seq_q, offs_d < HEAD_DIM
    o = _masked_load(_contiguous_ptrs(Out, bh, offs_m, offs_d, seq_q, HEAD_DIM), m_ok, d_ok, True, True)
    do_ptrs = _tile_ptrs(DO, b, h, offs_m, offs_d, stride_dob, stride_doh, stride_dom)
    do = _masked_load(do_ptrs, m_ok, d_ok, True, True)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    tl.store(Delta + bh * seq_q + offs_m, delta, mask=m_ok)
    if ZERO_DQ_ACC:
        dq_ptrs = _contiguous_ptrs(DQ_ACC, bh, offs_m, offs_d, seq_q, HEAD_DIM)
        tl.store(dq_ptrs, tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32), mask=m_ok[:, None] & d_ok[None, :])


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
def backward_kernel(
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
