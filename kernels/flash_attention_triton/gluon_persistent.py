"""The Gluon forward as a persistent kernel: one program per multiprocessor, each taking query tiles in turn,
so that a tile's first K and V load while the last tile's products finish and its O store runs beside the
next tile. gluon_forward's kernel launches one program per tile, which starts from empty buffers and ends
with its store: at 1k tokens a tile has few key tiles, and that start and end are a large share of it.

The partitions and the main loop are gluon_forward's (attend, store_tile); what differs:

  * the tiles: program p takes tiles p, p + P, p + 2P, ... of (batch*heads) x query tiles, one head's
    tiles together (they share its K and V in L2), under causal each head's last query tiles (most keys)
    first;
  * the K/V ring runs on across tiles: a tile's loads continue the count of the last one's;
  * Q has an empty barrier: each consumer warpgroup arrives once its last S of the tile has read Q, and
    the producer loads the next tile's Q only then, after that tile's first K and V;
  * O goes out through buffers of its own (not Q's), and a TMA store is waited for only before its buffer
    is written again.
"""

from __future__ import annotations

import torch

from kernels.flash_attention_triton.gluon_forward import HAVE_GLUON

if HAVE_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

    from kernels.flash_attention_triton.gluon_forward import (
        attend,
        key_tiles,
        load_into_ring,
        ring_barriers,
        store_tile,
        tma_load,
    )


if HAVE_GLUON:

    @gluon.jit
    def _tile_of(tile, num_m, seq, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, IS_CAUSAL: gl.constexpr):
        """Tile number -> (its first query row, its head's first row in the 2-d views, its key tiles,
        its key tiles that need no mask)."""
        bh = tile // num_m
        pid_m = tile % num_m
        if IS_CAUSAL:  # the last query tiles (most keys) first
            pid_m = num_m - 1 - pid_m
        start_m = pid_m * BLOCK_M
        n_tiles, n_full = key_tiles(start_m, seq, BLOCK_M, BLOCK_N, IS_CAUSAL)
        return start_m, bh * seq, n_tiles, n_full

    @gluon.jit
    def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, rest, q_bar, q_empty, k_ready, k_empty,
                  v_ready, v_empty, seq, num_m, total, HEAD_MAIN: gl.constexpr, HEAD_REST: gl.constexpr,
                  BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
                  IS_CAUSAL: gl.constexpr):  # fmt: skip
        """TMA loads of each of the program's tiles: K_0 and V_0, then (once both consumers have done with
        the last tile's Q) both Q tiles, then the other K_j and V_j, the ring's count running on."""
        if HEAD_REST > 0:
            q_rest_desc, k_rest_desc, v_rest_desc, q_rest, k_rest, v_rest = rest
            q_bytes: gl.constexpr = 2 * (q_desc.block_type.nbytes + q_rest_desc.block_type.nbytes)
        else:
            k_rest_desc, v_rest_desc, k_rest, v_rest = None, None, None, None
            q_bytes: gl.constexpr = 2 * q_desc.block_type.nbytes
        g0 = 0
        it = 0
        for tile in range(gl.program_id(0), total, gl.num_programs(0)):
            start_m, row_kv, n_tiles, _n_full = _tile_of(tile, num_m, seq, 2 * BLOCK_Q, BLOCK_N, IS_CAUSAL)
            load_into_ring(k_desc, k_smem, k_ready, k_empty, row_kv, g0, NUM_STAGES, k_rest_desc, k_rest,
                           HEAD_MAIN)  # fmt: skip
            load_into_ring(v_desc, v_smem, v_ready, v_empty, row_kv, g0, NUM_STAGES, v_rest_desc, v_rest,
                           HEAD_MAIN)  # fmt: skip
            # A fresh barrier counts as having completed phase 1: the first tile passes at once.
            mbarrier.wait(q_empty, (it & 1) ^ 1)
            mbarrier.expect(q_bar, q_bytes)
            row_q = row_kv + start_m
            for i in gl.static_range(2):
                tma_load(q_desc, [row_q + i * BLOCK_Q, 0], q_bar, q_smem.index(i))
                if HEAD_REST > 0:
                    tma_load(q_rest_desc, [row_q + i * BLOCK_Q, HEAD_MAIN], q_bar, q_rest.index(i))
            for j in range(1, n_tiles):
                row = row_kv + j * BLOCK_N
                load_into_ring(k_desc, k_smem, k_ready, k_empty, row, g0 + j, NUM_STAGES, k_rest_desc, k_rest,
                               HEAD_MAIN)  # fmt: skip
                load_into_ring(v_desc, v_smem, v_ready, v_empty, row, g0 + j, NUM_STAGES, v_rest_desc, v_rest,
                               HEAD_MAIN)  # fmt: skip
            g0 += n_tiles
            it += 1

    @gluon.jit
    def _consumer(c: gl.constexpr, o_desc, out_ptr, lse_ptr, q_smem, o_smem, k_smem, v_smem, rest, q_bar,
                  q_empty, k_ready, k_empty, v_ready, v_empty, seq, num_m, total, qk_scale,
                  HEAD_MAIN: gl.constexpr, HEAD_REST: gl.constexpr, BLOCK_Q: gl.constexpr,
                  BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr):  # fmt: skip
        """One warpgroup: rows c*BLOCK_Q .. + BLOCK_Q of each of the program's query tiles. `rest`: O's rest
        descriptor, the Q, K, V and O rest buffers."""
        if HEAD_REST > 0:
            o_rest_desc, q_rest_smem, k_rest, v_rest, o_rest_smem = rest
            q_rest = q_rest_smem.index(c)
            o_rest = o_rest_smem.index(c)
        else:
            o_rest_desc, q_rest, k_rest, v_rest, o_rest = None, None, None, None, None
        q = q_smem.index(c)
        o_buf = o_smem.index(c)
        g0 = 0
        it = 0
        for tile in range(gl.program_id(0), total, gl.num_programs(0)):
            start_m, row_kv, n_tiles, n_full = _tile_of(tile, num_m, seq, 2 * BLOCK_Q, BLOCK_N, IS_CAUSAL)
            mbarrier.wait(q_bar, it & 1)
            acc, acc_rest, m_i, l_i = attend(
                c, q, q_rest, k_smem, v_smem, k_rest, v_rest, k_ready, k_empty, v_ready, v_empty, q_empty, g0,
                start_m, seq, n_tiles, n_full, qk_scale, HEAD_MAIN, HEAD_REST, BLOCK_Q, BLOCK_N, NUM_STAGES,
                IS_CAUSAL,
            )  # fmt: skip
            store_tile(c, acc, acc_rest, m_i, l_i, o_buf, o_rest, o_desc, o_rest_desc, out_ptr, lse_ptr,
                       row_kv + start_m, start_m, seq, HEAD_MAIN, HEAD_REST, BLOCK_Q, True)  # fmt: skip
            g0 += n_tiles
            it += 1
        tma.store_wait(0)

    @gluon.jit
    def _attention_forward_persistent_kernel(q_desc, k_desc, v_desc, o_desc, out_ptr, lse_ptr, seq, qk_scale,
                                             q_rest_desc, k_rest_desc, v_rest_desc, o_rest_desc, num_m, total,
                                             HEAD_MAIN: gl.constexpr, HEAD_REST: gl.constexpr,
                                             IS_CAUSAL: gl.constexpr, BLOCK_Q: gl.constexpr,
                                             BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr):  # fmt: skip
        # The arguments of gluon_forward's kernel, and num_m (query tiles per head) and total (tiles).
        dtype: gl.constexpr = q_desc.dtype
        q_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_Q, HEAD_MAIN], q_desc.layout)
        o_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_Q, HEAD_MAIN], o_desc.layout)
        k_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_MAIN], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_MAIN], v_desc.layout)
        if HEAD_REST > 0:  # the rest chunk's buffers; each partition gets what it uses of them
            q_rest = gl.allocate_shared_memory(dtype, [2, BLOCK_Q, HEAD_REST], q_rest_desc.layout)
            o_rest = gl.allocate_shared_memory(dtype, [2, BLOCK_Q, HEAD_REST], o_rest_desc.layout)
            k_rest = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_REST], k_rest_desc.layout)
            v_rest = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_REST], v_rest_desc.layout)
            use_rest = (o_rest_desc, q_rest, k_rest, v_rest, o_rest)
            load_rest = (q_rest_desc, k_rest_desc, v_rest_desc, q_rest, k_rest, v_rest)
        else:
            use_rest = ()
            load_rest = ()
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        k_ready, k_empty, v_ready, v_empty = ring_barriers(NUM_STAGES)
        mbarrier.init(q_bar, count=1)
        mbarrier.init(q_empty, count=2)  # one arrive per consumer warpgroup

        gl.warp_specialize([
            (_consumer, (0, o_desc, out_ptr, lse_ptr, q_smem, o_smem, k_smem, v_smem, use_rest, q_bar,
                         q_empty, k_ready, k_empty, v_ready, v_empty, seq, num_m, total, qk_scale, HEAD_MAIN,
                         HEAD_REST, BLOCK_Q, BLOCK_N, NUM_STAGES, IS_CAUSAL)),
            (_consumer, (1, o_desc, out_ptr, lse_ptr, q_smem, o_smem, k_smem, v_smem, use_rest, q_bar,
                         q_empty, k_ready, k_empty, v_ready, v_empty, seq, num_m, total, qk_scale, HEAD_MAIN,
                         HEAD_REST, BLOCK_Q, BLOCK_N, NUM_STAGES, IS_CAUSAL)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, load_rest, q_bar, q_empty, k_ready,
                         k_empty, v_ready, v_empty, seq, num_m, total, HEAD_MAIN, HEAD_REST, BLOCK_Q, BLOCK_N,
                         NUM_STAGES, IS_CAUSAL)),
        ], [4, 1], [240, 24])  # fmt: skip


def stages(head_dim: int) -> int:
    """K/V ring depth beside Q's and O's buffers (2 x 64 x d x 2 bytes each) in 227 KB, a stage being K and V
    (2 x 128 x d x 2 bytes): 2 at 128 (192 KB), 3 at 96 (192 KB), 4 at 80 (200 KB) and at 64 (160 KB)."""
    return {128: 2, 96: 3}.get(head_dim, 4)


_SM_COUNTS: dict[int, int] = {}


def programs(device: torch.device, total: int) -> int:
    """One program per multiprocessor, or per tile where there are fewer tiles; 1 off the GPU (a launch
    that is compiled, not run)."""
    if device.type != "cuda":
        return 1
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNTS:
        _SM_COUNTS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return min(total, _SM_COUNTS[index])
