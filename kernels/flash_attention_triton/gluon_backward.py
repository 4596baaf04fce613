"""The FlashAttention backward in Gluon for Hopper (sm_90), FlashAttention-3 style: one pass, five
matrix products per (key tile, query tile) pair, where the Triton backward (backward_kernels) runs two
passes and seven. launch.attention_backward runs it where _gluon_backward_applies.

One program per 128 keys and (batch x head), three partitions (gl.warp_specialize):

  * a 1-warp producer: loads K and V once, then Q_i and dO_i (64 query rows each) through TMA into a
    ring of NUM_STAGES shared-memory buffers, with ready/empty mbarriers as in gluon_forward;
  * two consumer warpgroups, each owning 64 of the keys. Per query tile, on transposed tiles (keys
    along rows): S^T = K Q_i^T and dP^T = V dO_i^T (async wgmma, both in flight), P^T = exp2(S^T c - L),
    dV += P^T dO_i (P^T in registers as the A operand), dS^T = P^T (dP^T - D), dK += dS^T Q_i. dS^T goes
    to shared memory too; once both warpgroups have written theirs (an mbarrier of count 2), warpgroup
    c computes dQ_i[:, c*d/2:(c+1)*d/2] = dS K[:, half c] over all 128 keys and adds it into an fp32 dQ
    (the launcher's dq_acc) by a TMA bulk reduction (cp.reduce.async.bulk), so each dQ element gets one
    add per key tile. dS is double-buffered: a warpgroup reuses a buffer only after both have passed
    the next tile's barrier, by when the other's dQ product on it has completed.

Conventions as the one-pass (ATOMIC_DQ) Triton form: L is the forward's natural-log logsumexp, D =
rowsum(dO * O), dQ is accumulated unscaled (the launcher multiplies by the softmax scale when it
converts), dK is scaled here. Causal is top-left aligned: a key tile visits query tiles from its own
start on; tiles crossing the diagonal, a ragged last query tile and a ragged key tile are masked
(P = 0 there, so dS = 0 and nothing leaks into other rows). Inputs are contiguous (batch, heads, seq,
d) read through TMA over 2-d (batch*heads*seq, d) views: rows past seq belong to the next head (or
read as zero past the end); they are masked, and the reductions add exact zeros there.

Head dims 64, 80, 96 and 128, split as in gluon_forward (head_split) into a main and a rest chunk of
power-of-two widths (80 = 64 + 16, 96 = 64 + 32), each with its own buffers and TMA descriptors: S^T and
dP^T take two wgmma each into one accumulator, dK and dV a main and a rest accumulator, and warpgroup c
computes half c of dQ's main columns and half c of its rest columns (two wgmma, two bulk reductions).
Without a rest (64, 128) its code is left out at compile time.
"""

from __future__ import annotations

import math

import torch
import triton

from kernels.flash_attention_triton import direct
from kernels.flash_attention_triton.gluon_forward import (
    FORWARD_HEAD_DIMS,
    HAVE_GLUON,
    LOG2E,
    check_inputs,
    head_split,
    row_descriptor,
    shared_layout,
)

if HAVE_GLUON:  # Gluon of triton 3.6, as gluon_forward imports it, and what only the backward needs
    from triton._C.libtriton import ir
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language._core import builtin
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    from kernels.flash_attention_triton.gluon_forward import load_into_ring, tma_load

    # The warpgroup's barrier (bar.sync), named gl.barrier from Triton 3.7 on (gl.thread_barrier before).
    thread_barrier = getattr(gl, "thread_barrier", None) or gl.barrier

BLOCK_M = 64  # query rows per step (wgmma N of S^T and dP^T, M of dQ)
BLOCK_K = 64  # keys per consumer warpgroup (wgmma M)
BLOCK_N = 2 * BLOCK_K  # keys per program
BACKWARD_HEAD_DIMS = FORWARD_HEAD_DIMS  # 64, 80, 96, 128
MAXNREG = 168  # 3 warpgroups x 128 threads x 168 <= 64K registers; redistributed per partition


if HAVE_GLUON:

    @builtin
    def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
        """global[box at coord] += shared src (cp.reduce.async.bulk.tensor add): Triton 3.6 builds the
        op (ttng.async_tma_reduce) but Gluon exposes no wrapper. Completes like a TMA store (store_wait)."""
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                                  src.handle)  # fmt: skip

    @gluon.jit
    def _producer(q_desc, do_desc, k_desc, v_desc, k_smem, v_smem, q_smem, do_smem, rest, kv_bar, q_ready,
                  q_empty, do_ready, do_empty, row_kv, start_n, m_lo, n_iters, HEAD_MAIN: gl.constexpr,
                  HEAD_REST: gl.constexpr, BLOCK_M: gl.constexpr, NUM_STAGES: gl.constexpr):  # fmt: skip
        """TMA loads: K and V once, then Q_i and dO_i into stage i % NUM_STAGES; with a rest chunk (`rest`:
        its Q, dO, K, V descriptors and buffers) each tile in two column chunks on one barrier."""
        if HEAD_REST > 0:
            q_rest_desc, do_rest_desc, k_rest_desc, v_rest_desc, q_rest, do_rest, k_rest, v_rest = rest
            mbarrier.expect(kv_bar, 2 * (k_desc.block_type.nbytes + k_rest_desc.block_type.nbytes))  # K and V
            tma_load(k_rest_desc, [row_kv + start_n, HEAD_MAIN], kv_bar, k_rest)
            tma_load(v_rest_desc, [row_kv + start_n, HEAD_MAIN], kv_bar, v_rest)
        else:
            q_rest_desc, do_rest_desc, q_rest, do_rest = None, None, None, None
            mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        tma_load(k_desc, [row_kv + start_n, 0], kv_bar, k_smem)
        tma_load(v_desc, [row_kv + start_n, 0], kv_bar, v_smem)
        for i in range(n_iters):
            row = row_kv + m_lo + i * BLOCK_M
            load_into_ring(q_desc, q_smem, q_ready, q_empty, row, i, NUM_STAGES, q_rest_desc, q_rest,
                           HEAD_MAIN)  # fmt: skip
            load_into_ring(do_desc, do_smem, do_ready, do_empty, row, i, NUM_STAGES, do_rest_desc, do_rest,
                           HEAD_MAIN)  # fmt: skip

    @gluon.jit
    def _consumer(c: gl.constexpr, dq_desc, dk_ptr, dv_ptr, lse_ptr, delta_ptr, k_smem, v_smem, q_smem,
                  do_smem, ds_smem, dq_smem, rest, kv_bar, q_ready, q_empty, do_ready, do_empty, ds_bar,
                  row_kv, start_n, m_lo, n_iters, seq, qk_scale, sm_scale, HEAD_MAIN: gl.constexpr,
                  HEAD_REST: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr,
                  NUM_STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr):  # fmt: skip
        """One warpgroup: dK, dV of keys start_n + c*BLOCK_K .. + BLOCK_K, and half c of each dQ_i's main
        columns (and of its rest columns: `rest` holds dQ's rest descriptor, the Q, dO, K, V rest buffers
        and this warpgroup's rest staging buffer)."""
        dtype: gl.constexpr = q_smem.dtype
        HEAD_DIM: gl.constexpr = HEAD_MAIN + HEAD_REST
        HALF: gl.constexpr = HEAD_MAIN // 2
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_M, 16]
        )
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_MAIN, 16]
        )
        dq_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HALF, 16]
        )
        op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
        col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
        # wgmma groups of dP^T: one per column chunk, still running when S^T is waited for.
        DP_GROUPS: gl.constexpr = 2 if HEAD_REST > 0 else 1

        key0 = start_n + c * BLOCK_K
        keys = key0 + gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, s_layout))
        k_c = k_smem.slice(c * BLOCK_K, BLOCK_K)  # this warpgroup's keys, all columns
        v_c = v_smem.slice(c * BLOCK_K, BLOCK_K)
        k_half = k_smem.slice(c * HALF, HALF, dim=1)  # all keys, this warpgroup's half of the columns
        s_zero = gl.zeros([BLOCK_K, BLOCK_M], gl.float32, layout=s_layout)
        dq_zero = gl.zeros([BLOCK_M, HALF], gl.float32, layout=dq_layout)
        dk = gl.zeros([BLOCK_K, HEAD_MAIN], gl.float32, layout=acc_layout)
        dv = gl.zeros([BLOCK_K, HEAD_MAIN], gl.float32, layout=acc_layout)
        if HEAD_REST > 0:  # the rest chunk's accumulators and dQ piece, with their own layouts
            dq_rest_desc, q_rest, do_rest, k_rest, v_rest, dqr_smem = rest
            R_HALF: gl.constexpr = HEAD_REST // 2
            r_layout: gl.constexpr = gl.NVMMADistributedLayout(
                version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_REST, 16]
            )
            dqr_layout: gl.constexpr = gl.NVMMADistributedLayout(
                version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, R_HALF, 16]
            )
            rop_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=r_layout, k_width=2)
            kr_c = k_rest.slice(c * BLOCK_K, BLOCK_K)
            vr_c = v_rest.slice(c * BLOCK_K, BLOCK_K)
            # Half c of the rest columns: 8 (d=80) or 16 (d=96) columns, 16 or 32 bytes into the 32- or
            # 64-byte swizzled rows; the sub-row slice k_half takes at 64 (32 columns of 128-byte rows).
            kr_half = k_rest.slice(c * R_HALF, R_HALF, dim=1)
            dqr_zero = gl.zeros([BLOCK_M, R_HALF], gl.float32, layout=dqr_layout)
            dk_rest = gl.zeros([BLOCK_K, HEAD_REST], gl.float32, layout=r_layout)
            dv_rest = gl.zeros([BLOCK_K, HEAD_REST], gl.float32, layout=r_layout)
        offs_1 = gl.arange(0, BLOCK_M, layout=gl.BlockedLayout([1], [32], [4], [0]))

        mbarrier.wait(kv_bar, 0)
        for i in range(n_iters):
            st = i % NUM_STAGES
            ph = (i // NUM_STAGES) & 1
            m0 = m_lo + i * BLOCK_M
            # L and D of the tile: one element per thread (few registers), spread to the columns later.
            in_seq = (m0 + offs_1) < seq
            lse2 = gl.load(lse_ptr + (row_kv + m0) + offs_1, mask=in_seq, other=0.0) * 1.4426950408889634
            delta = gl.load(delta_ptr + (row_kv + m0) + offs_1, mask=in_seq, other=0.0)
            q = q_smem.index(st)
            do = do_smem.index(st)
            mbarrier.wait(q_ready.index(st), ph)
            s_tok = warpgroup_mma(k_c, q.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            if HEAD_REST > 0:  # S^T += K_rest Q_rest^T into the same accumulator
                qr = q_rest.index(st)
                dor = do_rest.index(st)
                s_tok = warpgroup_mma(kr_c, qr.permute((1, 0)), s_tok, is_async=True)
            mbarrier.wait(do_ready.index(st), ph)
            dp_tok = warpgroup_mma(v_c, do.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            if HEAD_REST > 0:
                dp_tok = warpgroup_mma(vr_c, dor.permute((1, 0)), dp_tok, is_async=True)
            s = warpgroup_mma_wait(DP_GROUPS, deps=[s_tok])  # in order: S^T done, dP^T may still run
            p = gl.exp2(s * qk_scale - gl.expand_dims(gl.convert_layout(lse2, col_s), 0))
            masked = (m0 + BLOCK_M > seq) | (key0 + BLOCK_K > seq)
            if IS_CAUSAL:
                masked = masked | (m0 < key0 + BLOCK_K)
            if masked:  # keys past seq, queries past seq, and (causal) keys after the query
                cols = m0 + gl.arange(0, BLOCK_M, layout=col_s)
                keep = (gl.expand_dims(keys, 1) < seq) & gl.expand_dims(cols < seq, 0)
                if IS_CAUSAL:
                    keep = keep & (gl.expand_dims(keys, 1) <= gl.expand_dims(cols, 0))
                p = gl.where(keep, p, 0.0)
            dp = warpgroup_mma_wait(0, deps=[dp_tok])
            ds = (p * (dp - gl.expand_dims(gl.convert_layout(delta, col_s), 0))).to(dtype)
            p16 = p.to(dtype)
            p_op = gl.convert_layout(p16, op_layout)
            dv_tok = warpgroup_mma(p_op, do, dv, is_async=True)
            if HEAD_REST > 0:  # P^T and dS^T as the A operand of each accumulator (no-ops if layouts agree)
                pr_op = gl.convert_layout(p16, rop_layout)
                dvr_tok = warpgroup_mma(pr_op, dor, dv_rest, is_async=True)
            ds_op = gl.convert_layout(ds, op_layout)
            dk_tok = warpgroup_mma(ds_op, q, dk, is_async=True)
            if HEAD_REST > 0:
                dsr_op = gl.convert_layout(ds, rop_layout)
                dkr_tok = warpgroup_mma(dsr_op, qr, dk_rest, is_async=True)
            buf = i % 2
            ds_smem.index(buf).slice(c * BLOCK_K, BLOCK_K).store(ds)
            fence_async_shared()
            thread_barrier()  # all four warps' dS^T written before the one arrive
            mbarrier.arrive(ds_bar.index(buf))
            mbarrier.wait(ds_bar.index(buf), (i // 2) & 1)  # the other warpgroup's dS^T is there too
            ds_t = ds_smem.index(buf).permute((1, 0))
            dq_tok = warpgroup_mma(ds_t, k_half, dq_zero, use_acc=False, is_async=True)
            if HEAD_REST > 0:
                dqr_tok = warpgroup_mma(ds_t, kr_half, dqr_zero, use_acc=False, is_async=True)
                dv, dk, dq, p_op, ds_op, dv_rest, dk_rest, dqr, pr_op, dsr_op = warpgroup_mma_wait(
                    0, deps=[dv_tok, dk_tok, dq_tok, p_op, ds_op, dvr_tok, dkr_tok, dqr_tok, pr_op, dsr_op]
                )
            else:
                dv, dk, dq, p_op, ds_op = warpgroup_mma_wait(0, deps=[dv_tok, dk_tok, dq_tok, p_op, ds_op])
            mbarrier.arrive(do_empty.index(st))
            mbarrier.arrive(q_empty.index(st))
            # dQ_i's pieces: staged in shared memory (after the last reductions from it have read it),
            # then one bulk add in L2 each. Rows past seq hold exact zeros.
            tma.store_wait(0)
            dq_smem.store(dq)
            if HEAD_REST > 0:
                dqr_smem.store(dqr)
            fence_async_shared()
            _tma_reduce_add(dq_desc, [row_kv + m0, c * HALF], dq_smem)
            if HEAD_REST > 0:
                _tma_reduce_add(dq_rest_desc, [row_kv + m0, HEAD_MAIN + c * R_HALF], dqr_smem)

        # Epilogue: dK (times the softmax scale) and dV in the input dtype, rows past seq not stored.
        tma.store_wait(0)
        rows = key0 + gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, acc_layout))
        offs_d = gl.arange(0, HEAD_MAIN, layout=gl.SliceLayout(0, acc_layout))
        offsets = gl.expand_dims((row_kv + rows).to(gl.int64) * HEAD_DIM, 1) + gl.expand_dims(offs_d, 0)
        row_ok = gl.expand_dims(rows < seq, 1)
        gl.store(dk_ptr + offsets, (dk * sm_scale).to(dtype), mask=row_ok)
        gl.store(dv_ptr + offsets, dv.to(dtype), mask=row_ok)
        if HEAD_REST > 0:  # columns HEAD_MAIN.. of the same rows
            r_rows = key0 + gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, r_layout))
            r_cols = HEAD_MAIN + gl.arange(0, HEAD_REST, layout=gl.SliceLayout(0, r_layout))
            r_offsets = gl.expand_dims((row_kv + r_rows).to(gl.int64) * HEAD_DIM, 1) + gl.expand_dims(
                r_cols, 0
            )
            r_ok = gl.expand_dims(r_rows < seq, 1)
            gl.store(dk_ptr + r_offsets, (dk_rest * sm_scale).to(dtype), mask=r_ok)
            gl.store(dv_ptr + r_offsets, dv_rest.to(dtype), mask=r_ok)

    @gluon.jit
    def _attention_backward_kernel(q_desc, do_desc, k_desc, v_desc, dq_desc, dk_ptr, dv_ptr, lse_ptr,
                                   delta_ptr, seq, qk_scale, sm_scale, q_rest_desc, do_rest_desc,
                                   k_rest_desc, v_rest_desc, dq_rest_desc, HEAD_MAIN: gl.constexpr,
                                   HEAD_REST: gl.constexpr, IS_CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
                                   BLOCK_K: gl.constexpr, NUM_STAGES: gl.constexpr):  # fmt: skip
        # The *_rest_desc read columns HEAD_MAIN..; where HEAD_REST is 0 they are None (constexprs, no
        # kernel parameters), so 64 and 128 compile as without them.
        BLOCK_N: gl.constexpr = 2 * BLOCK_K
        HALF: gl.constexpr = HEAD_MAIN // 2
        dtype: gl.constexpr = q_desc.dtype
        # Grid (key tiles, batch*heads): under causal the first key tiles see the most queries and
        # start first; one head's key tiles run together and share its Q and dO in L2.
        start_n = gl.program_id(0) * BLOCK_N
        row_kv = gl.program_id(1) * seq  # first row of this head in the 2-d views
        m_lo = 0
        if IS_CAUSAL:
            m_lo = start_n  # earlier queries see none of these keys
        n_iters = gl.cdiv(seq - m_lo, BLOCK_M)

        k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_MAIN], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_MAIN], v_desc.layout)
        q_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_MAIN], q_desc.layout)
        do_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_MAIN], do_desc.layout)
        ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)
        ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M], ds_layout)
        dq0_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M, HALF], dq_desc.layout)
        dq1_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M, HALF], dq_desc.layout)
        if HEAD_REST > 0:  # the rest chunk's buffers; each partition gets what it uses of them
            R_HALF: gl.constexpr = HEAD_REST // 2
            k_rest = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_REST], k_rest_desc.layout)
            v_rest = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_REST], v_rest_desc.layout)
            q_rest = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_REST], q_rest_desc.layout)
            do_rest = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_REST], do_rest_desc.layout)
            dqr0_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M, R_HALF], dq_rest_desc.layout)
            dqr1_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M, R_HALF], dq_rest_desc.layout)
            rest0 = (dq_rest_desc, q_rest, do_rest, k_rest, v_rest, dqr0_smem)
            rest1 = (dq_rest_desc, q_rest, do_rest, k_rest, v_rest, dqr1_smem)
            load_rest = (q_rest_desc, do_rest_desc, k_rest_desc, v_rest_desc, q_rest, do_rest, k_rest, v_rest)
        else:  # empty: no extra arguments reach the partitions, so 64 and 128 compile as before
            rest0 = ()
            rest1 = ()
            load_rest = ()
        kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        q_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        do_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        do_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        ds_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_bar, count=1)
        for i in gl.static_range(NUM_STAGES):
            mbarrier.init(q_ready.index(i), count=1)
            mbarrier.init(do_ready.index(i), count=1)
            mbarrier.init(q_empty.index(i), count=2)  # one arrive per consumer warpgroup
            mbarrier.init(do_empty.index(i), count=2)
        for i in gl.static_range(2):
            mbarrier.init(ds_bar.index(i), count=2)

        gl.warp_specialize([
            (_consumer, (0, dq_desc, dk_ptr, dv_ptr, lse_ptr, delta_ptr, k_smem, v_smem, q_smem, do_smem,
                         ds_smem, dq0_smem, rest0, kv_bar, q_ready, q_empty, do_ready, do_empty, ds_bar,
                         row_kv, start_n, m_lo, n_iters, seq, qk_scale, sm_scale, HEAD_MAIN, HEAD_REST,
                         BLOCK_M, BLOCK_K, NUM_STAGES, IS_CAUSAL)),
            (_consumer, (1, dq_desc, dk_ptr, dv_ptr, lse_ptr, delta_ptr, k_smem, v_smem, q_smem, do_smem,
                         ds_smem, dq1_smem, rest1, kv_bar, q_ready, q_empty, do_ready, do_empty, ds_bar,
                         row_kv, start_n, m_lo, n_iters, seq, qk_scale, sm_scale, HEAD_MAIN, HEAD_REST,
                         BLOCK_M, BLOCK_K, NUM_STAGES, IS_CAUSAL)),
            (_producer, (q_desc, do_desc, k_desc, v_desc, k_smem, v_smem, q_smem, do_smem, load_rest, kv_bar,
                         q_ready, q_empty, do_ready, do_empty, row_kv, start_n, m_lo, n_iters, HEAD_MAIN,
                         HEAD_REST, BLOCK_M, NUM_STAGES)),
        ], [4, 1], [240, 24])  # fmt: skip


def _stages(head_dim: int, is_causal: bool) -> int:
    """Q/dO ring depth. Head dim 128 fits only 2 in 227 KB beside K, V, dS and the dQ staging; at 64, 3 and
    4 stages measured no faster than 2 on an H100 (within 2%, 4 slower at 4096). At 96, and at 80 causal,
    3 were the faster on an H200 (NOTES.md: Gluon head dims 80 and 96): 156 KB and 177 KB at 80, 181 KB at
    96, each further stage 20 KB (80) or 24 KB (96)."""
    return 3 if head_dim == 96 or (head_dim == 80 and is_causal) else 2


def _descriptors(q, grad_out, k, v, dq_acc, width: int) -> tuple:
    """TMA descriptors of q, dO, k, v in blocks `width` columns wide and of dq_acc (fp32) in blocks of
    width // 2 (one warpgroup's half); the kernel places them at column 0 or HEAD_MAIN."""
    q_layout = shared_layout([BLOCK_M, width], q.dtype)
    kv_layout = shared_layout([BLOCK_N, width], q.dtype)
    dq_layout = shared_layout([BLOCK_M, width // 2], "float32")
    return (
        row_descriptor(q, [BLOCK_M, width], q_layout),
        row_descriptor(grad_out, [BLOCK_M, width], q_layout),
        row_descriptor(k, [BLOCK_N, width], kv_layout),
        row_descriptor(v, [BLOCK_N, width], kv_layout),
        row_descriptor(dq_acc, [BLOCK_M, width // 2], dq_layout),
    )


# The kernel's arguments that each call hands over (direct.DirectLaunch), in this order: the tensors, and
# the descriptors rebuilt around them (q, dO, k, v, dq_acc again for the rest chunk; None without one).
PER_CALL = (
    "q_desc", "do_desc", "k_desc", "v_desc", "dq_desc", "dk_ptr", "dv_ptr", "lse_ptr", "delta_ptr",
    "q_rest_desc", "do_rest_desc", "k_rest_desc", "v_rest_desc", "dq_rest_desc",
)  # fmt: skip


def gluon_attention_backward_into(
    q, k, v, grad_out, lse, delta, dq_acc, dk, dv, is_causal, *, num_stages=None, keep=None
) -> None:
    """Launch the kernel: adds the unscaled dQ into dq_acc (fp32, zeroed by the caller) and writes dk, dv.
    All tensors contiguous (batch, heads, seq, d), L and D (batch, heads, seq) fp32. launch._gluon_backward
    computes D, zeroes dq_acc and converts it. keep: (kept launches, the call's signature), as
    gluon_forward.gluon_attention_forward's."""
    check_inputs(q, k, v, grad_out, head_dims=BACKWARD_HEAD_DIMS)
    batch, heads, seq, head_dim = q.shape
    main, rest = head_split(head_dim)
    q_desc, do_desc, k_desc, v_desc, dq_desc = _descriptors(q, grad_out, k, v, dq_acc, main)
    # Without a rest chunk: None, which Triton specializes to constexprs, nothing encoded or passed.
    q_rest, do_rest, k_rest, v_rest, dq_rest = (
        _descriptors(q, grad_out, k, v, dq_acc, rest) if rest else (None,) * 5
    )
    sm_scale = 1.0 / math.sqrt(head_dim)
    named = dict(
        q_desc=q_desc, do_desc=do_desc, k_desc=k_desc, v_desc=v_desc, dq_desc=dq_desc, dk_ptr=dk, dv_ptr=dv,
        lse_ptr=lse, delta_ptr=delta, seq=seq, qk_scale=sm_scale * LOG2E, sm_scale=sm_scale,
        q_rest_desc=q_rest, do_rest_desc=do_rest, k_rest_desc=k_rest, v_rest_desc=v_rest,
        dq_rest_desc=dq_rest, HEAD_MAIN=main, HEAD_REST=rest, IS_CAUSAL=bool(is_causal), BLOCK_M=BLOCK_M,
        BLOCK_K=BLOCK_K, NUM_STAGES=num_stages or _stages(head_dim, is_causal), num_warps=4,
        maxnreg=MAXNREG,
    )  # fmt: skip
    grid = (triton.cdiv(seq, BLOCK_N), batch * heads)
    with torch.cuda.device(q.device):
        direct.launch_keeping(_attention_backward_kernel, grid, named, PER_CALL, q.device.index, keep)
