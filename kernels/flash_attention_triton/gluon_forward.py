"""The FlashAttention forward in Gluon for Hopper (sm_90), FlashAttention-3 style; launch runs it where
it beat the Triton forward (launch._gluon_forward_route).

One program per 128 query rows and (batch x head), three partitions (gl.warp_specialize):

  * a 1-warp producer: loads the two 64-row Q tiles once, then K and V tiles through TMA into a ring
    of NUM_STAGES shared-memory buffers; K and V have their own ready/empty mbarriers, so Q K^T of a
    tile can start before its V has landed;
  * two consumer warpgroups (the default partition and a 4-warp worker), each owning 64 query rows.
    Each issues S_j = Q K_j^T as an async wgmma, then O += P_{j-1} V_{j-1} (P in registers, the A
    operand layout), waits only for S_j and runs the online softmax on it while P V runs on the tensor
    cores. Both release a buffer by one arrive each (empty barriers count 2).

The softmax runs on exp2 with the scale folded in; L is saved in natural-log units. Causal is
top-left aligned: key tiles wholly in the future are not loaded, only tiles from the diagonal on
(and a ragged last tile) are masked, and within each head the query tiles with the most keys start
first; the grid runs one head's query tiles together, which then share its K and V in L2. Inputs are
contiguous (batch, heads, seq, head_dim), read through TMA over 2-d (batch*heads*seq, head_dim)
views: rows past seq belong to the next head (or are zero past the end) and are masked or not stored.

Head dims 64, 80, 96 and 128. Gluon's tensors have power-of-two shapes, so the head dim is a main chunk
and a rest chunk (head_split: 80 = 64 + 16, 96 = 64 + 32), each with its own shared buffers and TMA
descriptors over the same rows: S = Q_main K_main^T + Q_rest K_rest^T (two wgmma into one accumulator),
O a main and a rest accumulator. Without a rest (64, 128) its code is left out at compile time.

A consumer's main loop over one query tile (attend) and its epilogue (store_tile) serve gluon_persistent's
kernel too, which runs one program per multiprocessor over many tiles.
"""

from __future__ import annotations

import math

import torch
import triton

from kernels.flash_attention_triton import direct

try:  # Gluon of triton 3.6 (the GPU machine); other releases may lack or rename some of these.
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    # The TMA copies, named async_load / async_store from Triton 3.7 on (the old names then raise).
    tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
    HAVE_GLUON = True
except ImportError:  # pragma: no cover - only where Gluon is missing
    HAVE_GLUON = False

LOG2E = 1.4426950408889634
BLOCK_Q = 64  # query rows per consumer warpgroup (wgmma M)
NUM_CONSUMERS = 2  # consumer warpgroups per program
BLOCK_M = BLOCK_Q * NUM_CONSUMERS
BLOCK_N = 128  # key rows per tile; equal to BLOCK_M so both consumers visit the same tiles
FORWARD_HEAD_DIMS = (64, 80, 96, 128)  # head dims of the forward kernel (the backward takes the same)
MAXNREG = 168  # 3 warpgroups x 128 threads x 168 <= 64K registers; redistributed per partition


if HAVE_GLUON:

    @gluon.jit
    def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, rest, q_bar, k_ready, k_empty, v_ready,
                  v_empty, row_q, row_kv, n_tiles, HEAD_MAIN: gl.constexpr, HEAD_REST: gl.constexpr,
                  BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr):  # fmt: skip
        """TMA loads: both Q tiles once, then K_j and V_j into stage j % NUM_STAGES; with a rest chunk
        (`rest`: its Q, K, V descriptors and buffers) each tile in two column chunks on one barrier."""
        if HEAD_REST > 0:
            q_rest_desc, k_rest_desc, v_rest_desc, q_rest, k_rest, v_rest = rest
            mbarrier.expect(q_bar, 2 * (q_desc.block_type.nbytes + q_rest_desc.block_type.nbytes))
            for i in gl.static_range(2):
                tma_load(q_rest_desc, [row_q + i * BLOCK_Q, HEAD_MAIN], q_bar, q_rest.index(i))
        else:
            k_rest_desc, v_rest_desc, k_rest, v_rest = None, None, None, None
            mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
        tma_load(q_desc, [row_q, 0], q_bar, q_smem.index(0))
        tma_load(q_desc, [row_q + BLOCK_Q, 0], q_bar, q_smem.index(1))
        for j in range(n_tiles):
            row = row_kv + j * BLOCK_N
            load_into_ring(k_desc, k_smem, k_ready, k_empty, row, j, NUM_STAGES, k_rest_desc, k_rest,
                           HEAD_MAIN)  # fmt: skip
            load_into_ring(v_desc, v_smem, v_ready, v_empty, row, j, NUM_STAGES, v_rest_desc, v_rest,
                           HEAD_MAIN)  # fmt: skip

    @gluon.jit
    def load_into_ring(desc, smem, ready, empty, row, j, NUM_STAGES: gl.constexpr, rest_desc=None,
                       rest_smem=None, HEAD_MAIN: gl.constexpr = 0):  # fmt: skip
        """The producer's step of a ring of NUM_STAGES buffers: wait until load j's stage is released, then
        TMA-load desc's tile at `row` into it, completing on its ready barrier (both Gluon kernels); with
        rest_desc, the tile's columns from HEAD_MAIN on into rest_smem too, on the same barrier."""
        st = j % NUM_STAGES
        # A fresh barrier counts as having completed phase 1: the first round passes at once.
        mbarrier.wait(empty.index(st), ((j // NUM_STAGES) & 1) ^ 1)
        if rest_desc is not None:
            mbarrier.expect(ready.index(st), desc.block_type.nbytes + rest_desc.block_type.nbytes)
        else:
            mbarrier.expect(ready.index(st), desc.block_type.nbytes)
        tma_load(desc, [row, 0], ready.index(st), smem.index(st))
        if rest_desc is not None:
            tma_load(rest_desc, [row, HEAD_MAIN], ready.index(st), rest_smem.index(st))

    @gluon.jit
    def key_tiles(start_m, seq, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, IS_CAUSAL: gl.constexpr):
        """(the key tiles a query tile from row start_m reads, those of them that need no mask)."""
        if IS_CAUSAL:
            end = gl.minimum(start_m + BLOCK_M, seq)
            n_full = gl.minimum(start_m // BLOCK_N, seq // BLOCK_N)
        else:
            end = seq
            n_full = seq // BLOCK_N
        return gl.cdiv(end, BLOCK_N), n_full

    @gluon.jit
    def ring_barriers(NUM_STAGES: gl.constexpr):
        """The K/V ring's ready and empty barriers, one of each per stage, initialized: a stage is ready on
        its TMA load, empty once both consumer warpgroups have arrived."""
        k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NUM_STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=2)
            mbarrier.init(v_empty.index(i), count=2)
        return k_ready, k_empty, v_ready, v_empty

    @gluon.jit
    def _softmax_step(s, m_i, l_i, rows, cols, masked, seq, qk_scale, IS_CAUSAL: gl.constexpr):
        """One online-softmax step on raw scores s: returns P (fp32), the new max and sum, and the
        factor alpha that rescales what was accumulated under the old max (log2 units)."""
        if masked:
            keep = gl.expand_dims(cols, 0) < seq
            if IS_CAUSAL:
                keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1))
            s = gl.where(keep, s, float("-inf"))
        # Key 0 is in the first tile and visible to every row, so m_new is finite from then on.
        m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
        p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
        alpha = gl.exp2(m_i - m_new)
        l_i = l_i * alpha + gl.sum(p, 1)
        return p, m_new, l_i, alpha

    @gluon.jit
    def _consumer(c: gl.constexpr, o_desc, out_ptr, lse_ptr, q_smem, k_smem, v_smem, rest, q_bar, k_ready,
                  k_empty, v_ready, v_empty, row_q, start_m, seq, n_tiles, n_full, qk_scale,
                  HEAD_MAIN: gl.constexpr, HEAD_REST: gl.constexpr, BLOCK_Q: gl.constexpr,
                  BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr):  # fmt: skip
        """One warpgroup: rows start_m + c*BLOCK_Q .. + BLOCK_Q of the program's query tile. With a rest
        chunk (`rest`: O's rest descriptor, the Q, K, V rest buffers) O has a second accumulator."""
        if HEAD_REST > 0:
            o_rest_desc, q_rest_smem, k_rest, v_rest = rest
            q_rest = q_rest_smem.index(c)
        else:
            o_rest_desc, q_rest, k_rest, v_rest = None, None, None, None
        q = q_smem.index(c)
        mbarrier.wait(q_bar, 0)
        acc, acc_rest, m_i, l_i = attend(
            c, q, q_rest, k_smem, v_smem, k_rest, v_rest, k_ready, k_empty, v_ready, v_empty, None, 0,
            start_m, seq, n_tiles, n_full, qk_scale, HEAD_MAIN, HEAD_REST, BLOCK_Q, BLOCK_N, NUM_STAGES,
            IS_CAUSAL,
        )  # fmt: skip
        # O goes out through Q's buffers, no longer read.
        store_tile(c, acc, acc_rest, m_i, l_i, q, q_rest, o_desc, o_rest_desc, out_ptr, lse_ptr, row_q,
                   start_m, seq, HEAD_MAIN, HEAD_REST, BLOCK_Q, False)  # fmt: skip

    @gluon.jit
    def attend(c: gl.constexpr, q, q_rest, k_smem, v_smem, k_rest, v_rest, k_ready, k_empty, v_ready, v_empty,
               q_empty, g0, start_m, seq, n_tiles, n_full, qk_scale, HEAD_MAIN: gl.constexpr,
               HEAD_REST: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
               NUM_STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr):  # fmt: skip
        """Warpgroup c's main loop over one query tile's n_tiles key tiles, the ring's loads g0 .. g0 +
        n_tiles - 1: (O unnormalized, its rest part or O again where there is none, the rows' max and sum in
        log2 units). q_empty, where given, gets this warpgroup's arrive once its last read of Q is done."""
        dtype: gl.constexpr = q.dtype
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
        )
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_MAIN, 16]
        )
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
        row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
        # wgmma groups issued per P V step: one per chunk of O.
        PV_GROUPS: gl.constexpr = 2 if HEAD_REST > 0 else 1

        rows = start_m + c * BLOCK_Q + gl.arange(0, BLOCK_Q, layout=row_s)
        offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        m_i = gl.full([BLOCK_Q], float("-inf"), gl.float32, layout=row_s)
        l_i = gl.full([BLOCK_Q], 0.0, gl.float32, layout=row_s)
        s_zero = gl.zeros([BLOCK_Q, BLOCK_N], gl.float32, layout=s_layout)
        acc = gl.zeros([BLOCK_Q, HEAD_MAIN], gl.float32, layout=o_layout)
        if HEAD_REST > 0:  # the rest chunk's accumulator, with its own layouts
            r_layout: gl.constexpr = gl.NVMMADistributedLayout(
                version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_REST, 16]
            )
            pr_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=r_layout, k_width=2)
            row_r: gl.constexpr = gl.SliceLayout(1, r_layout)
            acc_rest = gl.zeros([BLOCK_Q, HEAD_REST], gl.float32, layout=r_layout)

        # Tile 0: S, softmax; its P V is issued with the next tile's Q K^T.
        st0 = g0 % NUM_STAGES
        mbarrier.wait(k_ready.index(st0), (g0 // NUM_STAGES) & 1)
        s0_tok = warpgroup_mma(q, k_smem.index(st0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        if HEAD_REST > 0:  # S += Q_rest K_rest^T into the same accumulator
            s0_tok = warpgroup_mma(q_rest, k_rest.index(st0).permute((1, 0)), s0_tok, is_async=True)
        s0 = warpgroup_mma_wait(0, deps=[s0_tok])
        mbarrier.arrive(k_empty.index(st0))
        if q_empty is not None:
            if n_tiles == 1:
                mbarrier.arrive(q_empty)
        p0, m_i, l_i, _alpha0 = _softmax_step(
            s0, m_i, l_i, rows, offs_n, 0 >= n_full, seq, qk_scale, IS_CAUSAL
        )
        p16 = p0.to(dtype)
        p_op = gl.convert_layout(p16, p_layout)
        if HEAD_REST > 0:  # P as the A operand of each accumulator (a no-op if the layouts agree)
            pr_op = gl.convert_layout(p16, pr_layout)

        for j in range(1, n_tiles):
            g = g0 + j
            st = g % NUM_STAGES
            pst = (g - 1) % NUM_STAGES
            mbarrier.wait(k_ready.index(st), (g // NUM_STAGES) & 1)
            s_tok = warpgroup_mma(q, k_smem.index(st).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            if HEAD_REST > 0:
                s_tok = warpgroup_mma(q_rest, k_rest.index(st).permute((1, 0)), s_tok, is_async=True)
            mbarrier.wait(v_ready.index(pst), ((g - 1) // NUM_STAGES) & 1)
            o_tok = warpgroup_mma(p_op, v_smem.index(pst), acc, is_async=True)
            if HEAD_REST > 0:
                r_tok = warpgroup_mma(pr_op, v_rest.index(pst), acc_rest, is_async=True)
            # wgmma groups complete in order: with only the P V groups outstanding, S_j (all of its
            # products) is done while P V still runs.
            s = warpgroup_mma_wait(PV_GROUPS, deps=[s_tok])
            mbarrier.arrive(k_empty.index(st))
            if q_empty is not None:
                if j == n_tiles - 1:
                    mbarrier.arrive(q_empty)
            p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, rows, offs_n + j * BLOCK_N, j >= n_full, seq,
                                               qk_scale, IS_CAUSAL)  # fmt: skip
            if HEAD_REST > 0:
                acc, p_op, acc_rest, pr_op = warpgroup_mma_wait(0, deps=[o_tok, p_op, r_tok, pr_op])
            else:
                acc, p_op = warpgroup_mma_wait(0, deps=[o_tok, p_op])
            mbarrier.arrive(v_empty.index(pst))
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
            p16 = p.to(dtype)
            p_op = gl.convert_layout(p16, p_layout)
            if HEAD_REST > 0:
                acc_rest = acc_rest * gl.expand_dims(gl.convert_layout(alpha, row_r), 1)
                pr_op = gl.convert_layout(p16, pr_layout)

        last = (g0 + n_tiles - 1) % NUM_STAGES
        mbarrier.wait(v_ready.index(last), ((g0 + n_tiles - 1) // NUM_STAGES) & 1)
        o_tok = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
        if HEAD_REST > 0:
            r_tok = warpgroup_mma(pr_op, v_rest.index(last), acc_rest, is_async=True)
            acc, p_op, acc_rest, pr_op = warpgroup_mma_wait(0, deps=[o_tok, p_op, r_tok, pr_op])
        else:
            acc, p_op = warpgroup_mma_wait(0, deps=[o_tok, p_op])
            acc_rest = acc
        mbarrier.arrive(v_empty.index(last))
        return acc, acc_rest, m_i, l_i

    @gluon.jit
    def store_tile(c: gl.constexpr, acc, acc_rest, m_i, l_i, o_buf, o_rest_buf, o_desc, o_rest_desc, out_ptr,
                   lse_ptr, row_q, start_m, seq, HEAD_MAIN: gl.constexpr, HEAD_REST: gl.constexpr,
                   BLOCK_Q: gl.constexpr, PERSISTENT: gl.constexpr):  # fmt: skip
        """Warpgroup c's epilogue: O = acc / l, L = ln(sum exp(scores)) = (m + log2 l) / log2(e). A whole
        tile goes out through o_buf (and o_rest_buf) and TMA, waited for here, or (PERSISTENT) before the
        buffer is written again, so that the store runs on beside the next tile; a ragged last tile by a
        masked store, so the next head's rows stay untouched."""
        dtype: gl.constexpr = o_buf.dtype
        HEAD_DIM: gl.constexpr = HEAD_MAIN + HEAD_REST
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_MAIN, 16]
        )
        row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
        rows = start_m + c * BLOCK_Q + gl.arange(0, BLOCK_Q, layout=m_i.type.layout)
        acc = acc / gl.expand_dims(gl.convert_layout(l_i, row_o), 1)
        lse = (m_i + gl.log2(l_i)) * (1.0 / 1.4426950408889634)
        gl.store(lse_ptr + (row_q - start_m) + rows, lse, mask=rows < seq)
        o = acc.to(dtype)
        if HEAD_REST > 0:
            r_layout: gl.constexpr = gl.NVMMADistributedLayout(
                version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_REST, 16]
            )
            row_r: gl.constexpr = gl.SliceLayout(1, r_layout)
            o_rest = (acc_rest / gl.expand_dims(gl.convert_layout(l_i, row_r), 1)).to(dtype)
        row0 = start_m + c * BLOCK_Q
        if row0 + BLOCK_Q <= seq:
            if PERSISTENT:  # the last tile's store has read the buffer
                tma.store_wait(0)
            o_buf.store(o)
            if HEAD_REST > 0:
                o_rest_buf.store(o_rest)
            fence_async_shared()
            tma_store(o_desc, [row_q + c * BLOCK_Q, 0], o_buf)
            if HEAD_REST > 0:
                tma_store(o_rest_desc, [row_q + c * BLOCK_Q, HEAD_MAIN], o_rest_buf)
            if not PERSISTENT:
                tma.store_wait(0)
        else:
            o_rows = row0 + gl.arange(0, BLOCK_Q, layout=row_o)
            o_cols = gl.arange(0, HEAD_MAIN, layout=gl.SliceLayout(0, o_layout))
            ptrs = (
                out_ptr
                + gl.expand_dims((row_q - start_m + o_rows).to(gl.int64) * HEAD_DIM, 1)
                + gl.expand_dims(o_cols, 0)
            )
            gl.store(ptrs, o, mask=gl.expand_dims(o_rows < seq, 1))
            if HEAD_REST > 0:  # columns HEAD_MAIN.. of the same rows
                r_rows = row0 + gl.arange(0, BLOCK_Q, layout=row_r)
                r_cols = HEAD_MAIN + gl.arange(0, HEAD_REST, layout=gl.SliceLayout(0, r_layout))
                r_ptrs = (
                    out_ptr
                    + gl.expand_dims((row_q - start_m + r_rows).to(gl.int64) * HEAD_DIM, 1)
                    + gl.expand_dims(r_cols, 0)
                )
                gl.store(r_ptrs, o_rest, mask=gl.expand_dims(r_rows < seq, 1))

    @gluon.jit
    def _attention_forward_kernel(q_desc, k_desc, v_desc, o_desc, out_ptr, lse_ptr, seq, qk_scale,
                                  q_rest_desc, k_rest_desc, v_rest_desc, o_rest_desc,
                                  HEAD_MAIN: gl.constexpr, HEAD_REST: gl.constexpr, IS_CAUSAL: gl.constexpr,
                                  BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
                                  NUM_STAGES: gl.constexpr):  # fmt: skip
        # The *_rest_desc read columns HEAD_MAIN..; where HEAD_REST is 0 they are None (constexprs, no
        # kernel parameters), so 64 and 128 take the same parameters as without them.
        BLOCK_M: gl.constexpr = 2 * BLOCK_Q
        dtype: gl.constexpr = q_desc.dtype
        # Grid (query tiles, batch*heads): programs running together share K and V in L2 (across heads
        # first was slower: NOTES.md, A Gluon forward).
        pid_m = gl.program_id(0)
        bh = gl.program_id(1)
        num_m = gl.num_programs(0)
        if IS_CAUSAL:  # the last query tiles (most keys) first
            pid_m = num_m - 1 - pid_m
        start_m = pid_m * BLOCK_M
        row_kv = bh * seq  # first row of this head in the 2-d views
        row_q = row_kv + start_m
        n_tiles, n_full = key_tiles(start_m, seq, BLOCK_M, BLOCK_N, IS_CAUSAL)

        q_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_Q, HEAD_MAIN], q_desc.layout)
        k_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_MAIN], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_MAIN], v_desc.layout)
        if HEAD_REST > 0:  # the rest chunk's buffers; each partition gets what it uses of them
            q_rest = gl.allocate_shared_memory(dtype, [2, BLOCK_Q, HEAD_REST], q_rest_desc.layout)
            k_rest = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_REST], k_rest_desc.layout)
            v_rest = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_REST], v_rest_desc.layout)
            use_rest = (o_rest_desc, q_rest, k_rest, v_rest)
            load_rest = (q_rest_desc, k_rest_desc, v_rest_desc, q_rest, k_rest, v_rest)
        else:  # empty: no extra arguments reach the partitions, so 64 and 128 compile as before
            use_rest = ()
            load_rest = ()
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        k_ready, k_empty, v_ready, v_empty = ring_barriers(NUM_STAGES)
        mbarrier.init(q_bar, count=1)

        gl.warp_specialize([
            (_consumer, (0, o_desc, out_ptr, lse_ptr, q_smem, k_smem, v_smem, use_rest, q_bar, k_ready,
                         k_empty, v_ready, v_empty, row_q, start_m, seq, n_tiles, n_full, qk_scale, HEAD_MAIN,
                         HEAD_REST, BLOCK_Q, BLOCK_N, NUM_STAGES, IS_CAUSAL)),
            (_consumer, (1, o_desc, out_ptr, lse_ptr, q_smem, k_smem, v_smem, use_rest, q_bar, k_ready,
                         k_empty, v_ready, v_empty, row_q, start_m, seq, n_tiles, n_full, qk_scale, HEAD_MAIN,
                         HEAD_REST, BLOCK_Q, BLOCK_N, NUM_STAGES, IS_CAUSAL)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, load_rest, q_bar, k_ready, k_empty,
                         v_ready, v_empty, row_q, row_kv, n_tiles, HEAD_MAIN, HEAD_REST, BLOCK_Q, BLOCK_N,
                         NUM_STAGES)),
        ], [4, 1], [240, 24])  # fmt: skip


_GL_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


def check_inputs(*tensors: torch.Tensor, head_dims: tuple[int, ...] = (64, 128)) -> None:
    """What a Gluon kernel takes: Gluon present, bf16 or fp16 tensors of one dtype and one (batch, heads,
    seq, head_dim) shape, head dim one of head_dims (the backward's 64 or 128 by default, the forward's
    FORWARD_HEAD_DIMS); a ValueError naming what is accepted otherwise."""
    if not HAVE_GLUON:
        raise RuntimeError("triton.experimental.gluon (Hopper) is not available")
    q = tensors[0]
    if q.dtype not in _GL_DTYPES or any(t.dtype != q.dtype for t in tensors):
        raise ValueError(f"bf16 or fp16 inputs of one dtype expected, got {[t.dtype for t in tensors]}")
    if q.dim() != 4 or any(t.shape != q.shape for t in tensors):
        raise ValueError(
            f"inputs of one (batch, heads, seq, head_dim) shape expected: {[t.shape for t in tensors]}"
        )
    if q.shape[-1] not in head_dims:
        accepted = ", ".join(map(str, head_dims[:-1])) + f" or {head_dims[-1]}"
        raise ValueError(f"head_dim {accepted} expected, got {q.shape[-1]}")


def shared_layout(block: list[int], dtype: torch.dtype | str):
    """The NVMMA shared-memory layout of a TMA block of a torch dtype (or a Gluon dtype's name)."""
    return gl.NVMMASharedLayout.get_default_for(block, getattr(gl, _GL_DTYPES.get(dtype, dtype)))


def row_descriptor(t: torch.Tensor, block: list[int], layout):
    """A TMA descriptor over a contiguous (batch, heads, seq, d) tensor as (batch*heads*seq, d) rows."""
    head_dim = t.shape[-1]
    rows = t.numel() // head_dim
    return TensorDescriptor(t.view(rows, head_dim), [rows, head_dim], [head_dim, 1], block, layout)


def _descriptors(q, k, v, out, width: int) -> tuple:
    """TMA descriptors of q, k, v and out in blocks `width` columns wide (the kernel places them at
    column 0 or HEAD_MAIN), each block with its own shared layout."""
    q_layout = shared_layout([BLOCK_Q, width], q.dtype)
    kv_layout = shared_layout([BLOCK_N, width], q.dtype)
    return (
        row_descriptor(q, [BLOCK_Q, width], q_layout),
        row_descriptor(k, [BLOCK_N, width], kv_layout),
        row_descriptor(v, [BLOCK_N, width], kv_layout),
        row_descriptor(out, [BLOCK_Q, width], q_layout),
    )


def head_split(head_dim: int) -> tuple[int, int]:
    """(HEAD_MAIN, HEAD_REST): the head dim as a power-of-two main chunk and a power-of-two rest or 0,
    as Gluon's tensors need power-of-two shapes: 64 + 0, 64 + 16 (80), 64 + 32 (96), 128 + 0."""
    main = 1 << (head_dim.bit_length() - 1)
    return main, head_dim - main


def _stages(head_dim: int, is_causal: bool) -> int:
    """K/V ring depth: what fits in 227 KB of shared memory beside the two Q tiles (2 x 64 x d x 2 bytes),
    a stage being K and V (2 x 128 x d x 2 bytes): 2 at 128 (160 KB), 3 at 64 (112 KB); 4 at 96 (216 KB)
    and at 80 causal (180 KB), 3 at 80 full (140 KB), as measured fastest (NOTES.md: Gluon head dims)."""
    if head_dim == 128:
        return 2
    return 4 if head_dim == 96 or (head_dim == 80 and is_causal) else 3


# The kernel's arguments that each call hands over (direct.DirectLaunch), in this order: the tensors, and
# the descriptors rebuilt around them (q, k, v, out again for the rest chunk; None there where it has none).
PER_CALL = (
    "q_desc", "k_desc", "v_desc", "o_desc", "out_ptr", "lse_ptr",
    "q_rest_desc", "k_rest_desc", "v_rest_desc", "o_rest_desc",
)  # fmt: skip


def gluon_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    *,
    num_stages: int | None = None,
    keep: tuple[direct.Kept, tuple] | None = None,
    persistent: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """O (batch, heads, seq, d) in q's dtype and L = logsumexp (batch, heads, seq) in fp32.

    keep: (kept launches, the call's signature): the launch is kept there, for later calls of that
    signature to make through direct (launch.attention_forward). persistent: gluon_persistent's kernel,
    one program per multiprocessor. For experiments: num_stages, the depth of the K/V ring (default:
    _stages, gluon_persistent.stages)."""
    check_inputs(q, k, v, head_dims=FORWARD_HEAD_DIMS)
    batch, heads, seq, head_dim = q.shape
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, seq, device=q.device, dtype=torch.float32)
    main, rest = head_split(head_dim)
    q_desc, k_desc, v_desc, o_desc = _descriptors(q, k, v, out, main)
    # Without a rest chunk: None, which Triton specializes to constexprs, nothing encoded or passed.
    q_rest, k_rest, v_rest, o_rest = _descriptors(q, k, v, out, rest) if rest else (None,) * 4
    named = dict(
        q_desc=q_desc, k_desc=k_desc, v_desc=v_desc, o_desc=o_desc, out_ptr=out, lse_ptr=lse, seq=seq,
        qk_scale=LOG2E / math.sqrt(head_dim),
        q_rest_desc=q_rest, k_rest_desc=k_rest, v_rest_desc=v_rest, o_rest_desc=o_rest,
        HEAD_MAIN=main, HEAD_REST=rest, IS_CAUSAL=bool(is_causal), BLOCK_Q=BLOCK_Q, BLOCK_N=BLOCK_N,
        NUM_STAGES=num_stages or _stages(head_dim, is_causal), num_warps=4, maxnreg=MAXNREG,
    )  # fmt: skip
    kernel, grid = _attention_forward_kernel, (triton.cdiv(seq, BLOCK_M), batch * heads)
    if persistent:  # the same arguments, and the tiles' count per head and in all
        from kernels.flash_attention_triton import gluon_persistent

        num_m = triton.cdiv(seq, BLOCK_M)
        named |= dict(num_m=num_m, total=num_m * batch * heads)
        named["NUM_STAGES"] = num_stages or gluon_persistent.stages(head_dim)
        kernel = gluon_persistent._attention_forward_persistent_kernel
        grid = (gluon_persistent.programs(q.device, named["total"]),)
    with torch.cuda.device(q.device):
        direct.launch_keeping(kernel, grid, named, PER_CALL, q.device.index, keep)
    return out, lse
