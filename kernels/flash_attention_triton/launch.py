"""The launchers: attention_forward and attention_backward take (batch, heads, seq, d) tensors, own
every check that a launch needs, make the outputs, grids and TMA descriptors, and launch the kernels
through tuning's AUTOTUNED. A launch made with a known configuration is kept under the call's signature
(_signature); a later call with the same signature skips all of that and hands its tensors to the kept
launches (direct), which also rebuild the TMA descriptors around them.

The forward runs a Gluon kernel (gluon_forward, gluon_persistent) where _gluon_forward_route names one
(Hopper, 16-bit, head dims 64, 80, 96 and 128, equal lengths, contiguous inputs, by head dim, masking and
length), else the Triton kernel of forward_kernels. The
backward likewise runs the one-pass Gluon kernel of gluon_backward where _gluon_backward_applies (also
not under deterministic algorithms), else backward_kernels' Triton forms.

Loads: on Hopper and later, 16-bit q, k, v and O move through the tensor memory accelerator (TMA): a
descriptor per tensor, one asynchronous copy per tile into shared memory, and reads past the end of a
sequence (or of the head dim, for a padded part) returned as zeros; so do fp32 ones in the forward from
128 columns on (_loads_through_tma). A rest part moves through pointers. Other inputs (fp32 elsewhere,
older GPUs, bases or strides not a multiple of 16 bytes) and calls too small to hide the descriptors'
host cost (TMA_MIN_WORK, TMA_MIN_WORK_FP32) load through pointers.

Precision: accumulators, the softmax and L are fp32. fp16 and bf16 inputs use the tensor cores in
their own type. fp32 inputs use TF32 tensor-core dots (inputs rounded to a 10-bit mantissa, fp32
accumulation): about eight times the throughput of full-fp32 dots, with errors comparable to fp16.
TF32 dots read their second operand from column-major copies where it is reduced over its rows
(COLUMN_MAJOR_TF32_OPERANDS).

The backward's one-pass form (backward_kernels) reads an fp32 dQ buffer, the size of q, and TMA
descriptors; attention_backward makes them only for a launch that may run that form: forced, tuned to
it, or not tuned yet with it among the candidates.

TMA_MIN_WORK, TMA_MIN_WORK_FP32 and COLUMN_MAJOR_TF32_OPERANDS are read from this module at every
launch: set them here.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os

import torch
import triton

from kernels.flash_attention_triton import direct, gluon_backward, gluon_forward, tuning
from kernels.flash_attention_triton.backward_kernels import row_dot_kernel
from kernels.flash_attention_triton.configs import CONFIG_ENV, forced_configs, interpreting, row_width
from kernels.flash_attention_triton.tiles import column_major_copy_kernel, head_dim_parts

try:  # host-side TMA descriptors: Triton 3.3 and later
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton loads through pointers only
    TensorDescriptor = None


def check_runnable(q: torch.Tensor) -> None:
    if q.device.type != "cuda" and not interpreting():
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
# (one extra pass over each tensor). Switched off, fp32 ran several times the bf16 time (NOTES.md:
# Measurements behind comments in the code).
COLUMN_MAJOR_TF32_OPERANDS = True


def _column_major_copies(dtype: torch.dtype) -> bool:
    return dtype == torch.float32 and COLUMN_MAJOR_TF32_OPERANDS


def _column_major(t: torch.Tensor) -> torch.Tensor:
    """(B, H, T, d) with the rows contiguous: the transpose of a contiguous (B, H, d, T), copied by
    column_major_copy_kernel, whose reads and writes are both coalesced (torch's own transposing
    copy is slower: NOTES.md, Forms measured and dropped)."""
    batch, heads, seq, head_dim = t.shape
    t = _unit_stride_head_dim(t)
    copy = torch.empty(batch, heads, head_dim, seq, device=t.device, dtype=t.dtype)
    if copy.numel():
        block = 16 if interpreting() else 64
        column_major_copy_kernel[(triton.cdiv(seq, block), batch * heads)](
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
    if interpreting():
        return True
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


@functools.cache
def _is_hopper(device: torch.device) -> bool:
    """Compute capability 9: the wgmma and TMA the Gluon forward is written for (Blackwell has no wgmma)."""
    return torch.cuda.get_device_capability(device)[0] == 9


# Descriptors cost host time at every launch. Below this much work (batch x heads x seq_q x seq_k x d)
# the calls are bound by the host and that cost shows (bf16 (16, 32, 1024, 64) causal fwd+bwd was
# slower with them); from it on the GPU hides it and TMA pays ((4, 32, 4096, 64) causal was faster).
# The timings: NOTES.md, Measurements behind comments in the code.
TMA_MIN_WORK = 2**36
# fp32 calls keep the GPU busy longer than 16-bit ones of the same size, so the host cost hides from
# less work on: at (16, 16, 1024, 128), work 2^35, the fp32 forward+backward was already faster with
# them (NOTES.md).
TMA_MIN_WORK_FP32 = 2**35


def _loads_through_tma(kernel: str, dtype: torch.dtype, head_dim: int) -> bool:
    """Whether a launch takes descriptors: 16-bit inputs do, and fp32 ones in the forward from 128
    columns on (head dims 72, 88 and 104 to 256), where its pointer loads run at one pipeline stage and
    stage each K and V tile through registers. There the forward with TMA beat pointer loads at head
    dim 128, causal or not; fp32 at head dim 64 and fp32's backward passes at 64 and 128 were slower
    with it (NOTES.md: Measurements behind comments in the code)."""
    wide_fp32 = row_width(head_dim, 4) in ("widest", "deepest")
    return dtype != torch.float32 or (kernel == "forward" and wide_fp32)


def _tma_can_load(work: int, *tensors: torch.Tensor) -> bool:
    """Whether TMA loads these 4-d tensors (batch, heads, then two dims, the last contiguous): not before
    Hopper, below TMA_MIN_WORK (TMA_MIN_WORK_FP32 for fp32), or where a base or a stride is not a
    multiple of 16 bytes."""
    first = tensors[0]
    if TensorDescriptor is None or not _has_tma(first.device):
        return False
    min_work = TMA_MIN_WORK_FP32 if first.dtype == torch.float32 else TMA_MIN_WORK
    if work < min_work and not interpreting():  # the interpreter tests both paths at small sizes
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


# The Gluon forwards (gluon_forward: a TMA producer warp, two consumer warpgroups whose softmax overlaps the
# tensor cores; gluon_persistent: the same, a program per multiprocessor) where they fit: Hopper, 16-bit,
# equal lengths, contiguous, these head dims, enough work to hide a launch. Read at every launch.
GLUON_FORWARD = True
GLUON_MIN_WORK = 2**33
GLUON_FORWARD_HEAD_DIMS = gluon_forward.FORWARD_HEAD_DIMS
# Which forward runs there, per (head dim, causal): (from this many keys on, kernel), the kernel "triton",
# "gluon" (a program per query tile) or "persistent" (balances no load, which causal tiles need). Chosen on
# one H200 at 1k, 4k and 16k tokens, bf16 (NOTES.md: The Gluon kernels in every head dim, measured).
GLUON_FORWARD_ROUTES = {
    (64, True): ((0, "triton"), (8192, "gluon")),
    (64, False): ((0, "persistent"), (8192, "gluon")),
    (80, True): ((0, "triton"), (2048, "gluon")),
    (80, False): ((0, "persistent"),),
    (96, True): ((0, "triton"), (2048, "gluon")),
    (96, False): ((0, "persistent"),),
    (128, True): ((0, "gluon"),),
    (128, False): ((0, "persistent"), (8192, "gluon")),
}
# One kernel wherever a Gluon forward fits, instead of GLUON_FORWARD_ROUTES (tests, experiments).
GLUON_FORWARD_ROUTE: str | None = None
FORWARD_KERNELS = ("triton", "gluon", "persistent")
# Whether the Gluon kernels' launches are kept per call signature and made through direct from the second
# call on, as the Triton kernels' are (host time halved: NOTES.md, The Gluon kernels in every head dim).
GLUON_KEPT = True
_gluon_forwards = direct.Kept()  # (call signature, persistent) -> the Gluon forward's launch
_gluon_backwards = direct.Kept()  # call signature -> the Gluon backward's launch


def _gluon_forward_route(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> str | None:
    """The Gluon forward attention_forward runs for these (batch, heads, seq, d) inputs, "gluon" or
    "persistent", or None for the Triton kernel."""
    if GLUON_FORWARD_ROUTE is not None and GLUON_FORWARD_ROUTE not in FORWARD_KERNELS:
        raise ValueError(f"launch.GLUON_FORWARD_ROUTE is {GLUON_FORWARD_ROUTE!r}; accepted: None, "
                         f"{', '.join(map(repr, FORWARD_KERNELS))}")  # fmt: skip
    if not (GLUON_FORWARD and _gluon_fits("forward", GLUON_MIN_WORK, 0, GLUON_FORWARD_HEAD_DIMS, q, k, v)):
        return None
    route = GLUON_FORWARD_ROUTE
    if route is None:
        seq = q.shape[2]
        route = [kernel for from_seq, kernel in GLUON_FORWARD_ROUTES[(q.shape[3], bool(is_causal))]
                 if seq >= from_seq][-1]  # fmt: skip
    return None if route == "triton" else route


def _gluon_fits(
    kernel: str, min_work: int, head_dim_64_min_seq: int, head_dims: tuple[int, ...], q, k, v, *others
) -> bool:
    """Whether a Gluon kernel was written for these inputs and GPU: not forced to a Triton configuration,
    Hopper, 16-bit tensors of one dtype and shape (q, k, v contiguous; `others` may be copied), a head dim
    of `head_dims` (64 only from `head_dim_64_min_seq` keys), and at least `min_work` of batch x heads x
    seq² x d."""
    if interpreting() or kernel in forced_configs() or q.device.type != "cuda":
        return False
    batch, heads, seq, head_dim = q.shape
    tensors = (q, k, v, *others)
    if q.dtype not in (torch.bfloat16, torch.float16) or any(t.dtype != q.dtype for t in tensors):
        return False
    if any(t.shape != q.shape for t in tensors) or not all(t.is_contiguous() for t in (q, k, v)):
        return False
    if head_dim not in head_dims or (head_dim == 64 and seq < head_dim_64_min_seq):
        return False
    if batch * heads * seq * seq * head_dim < min_work:
        return False
    return _is_hopper(q.device) and gluon_forward.HAVE_GLUON


# The Gluon one-pass backward (gluon_backward: five products per tile pair, dQ added by TMA bulk
# reductions) where it beat this package's Triton backward on an H100 (bf16, batch x seq = 16384, 16
# heads at head dim 128, 32 at 64): Hopper, 16-bit, equal lengths, contiguous q, k, v; head dim 128 from
# work 2^34 on (2^35 on an H100, where (16, 16, 1024, 128) tied; on an H200 (16, 21, 1024, 96), under 2^35,
# won by 9%), head dim 64 from 8192 keys on (shorter ones lost: zeroing and converting the fp32 dQ, ~0.17
# ms at 16384 x 32 heads, outweigh the kernel's lead). Not under torch.use_deterministic_algorithms: its dQ
# adds land in any order. Measurements: NOTES.md, A Gluon one-pass backward, The Gluon kernels in every
# head dim, measured. Read at every launch.
GLUON_BACKWARD = True
GLUON_BACKWARD_MIN_WORK = 2**34
GLUON_BACKWARD_HEAD_DIM_64_MIN_SEQ = 8192
GLUON_BACKWARD_HEAD_DIMS = gluon_backward.BACKWARD_HEAD_DIMS


def _gluon_backward_applies(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor
) -> bool:
    """Whether attention_backward runs the Gluon kernel: as the forward, and not deterministic."""
    if not GLUON_BACKWARD or torch.are_deterministic_algorithms_enabled():
        return False
    return _gluon_fits(
        "backward", GLUON_BACKWARD_MIN_WORK, GLUON_BACKWARD_HEAD_DIM_64_MIN_SEQ, GLUON_BACKWARD_HEAD_DIMS,
        q, k, v, grad_out,
    )  # fmt: skip


def _settings() -> tuple:
    """What a launch follows from besides its tensors: forced configurations, this module's switches and
    whether torch asks for deterministic algorithms (the backward's form)."""
    return (
        os.environ.get(CONFIG_ENV), TMA_MIN_WORK, TMA_MIN_WORK_FP32, COLUMN_MAJOR_TF32_OPERANDS,
        torch.are_deterministic_algorithms_enabled(),
    )  # fmt: skip


def _signature(is_causal: bool, *tensors: torch.Tensor) -> tuple:
    """Everything a launch's arguments, configuration and compiled kernel follow from, besides the
    tensors themselves: their shapes, strides, dtypes, devices, where each starts within 16 bytes
    (Triton specializes on it), causal and the settings. Calls with the same signature launch the same
    way."""
    parts = [bool(is_causal), _settings()]
    for t in tensors:
        parts += (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() & 15)
    return tuple(parts)


# The tensors each kernel takes anew at every call, in its argument order (see direct).
_FORWARD_TENSORS = ("Q", "K", "V", "Out", "L", "desc_q", "desc_k", "desc_v", "desc_o")
_BACKWARD_TENSORS = (
    "Q", "K", "V", "DO", "QC", "KC", "DOC", "L", "Delta", "DQ", "DK", "DV", "DQ_ACC",
    "desc_q", "desc_do", "desc_dq",
)  # fmt: skip
_ROW_DOT_TENSORS = ("Out", "DO", "Delta", "DQ_ACC")
_row_dots = direct.Kept()  # (call signature, zeroing dQ) -> the row-dot kernel's launch


def attention_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """O (batch, heads, seq_q, d) in q's dtype and L (batch, heads, seq_q) in fp32, from 4-d inputs."""
    route = _gluon_forward_route(q, k, v, is_causal)
    if route is not None:
        return _gluon_forward(q, k, v, is_causal, persistent=route == "persistent")
    batch, heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    q, k = _unit_stride_head_dim(q), _unit_stride_head_dim(k)
    out = torch.empty(batch, heads, seq_q, head_dim, device=q.device, dtype=q.dtype)
    lse = torch.empty(batch, heads, seq_q, device=q.device, dtype=torch.float32)
    copies = _column_major_copies(q.dtype)
    with _on_device(q.device):
        v = _column_major(v) if copies else _unit_stride_head_dim(v)
        # A column-major copy is read as the contiguous (batch, heads, d, seq) tensor it is.
        v_loaded = v.transpose(-1, -2) if copies else v
        signature = _signature(is_causal, q, k, v)
        kept = tuning.AUTOTUNED["forward"].kept(signature)
        if kept is not None:
            kept(q, k, v, out, lse, q, k, v_loaded, out)
            return out, lse
        work = batch * heads * seq_q * seq_k * head_dim
        d_main, d_rest = head_dim_parts(head_dim)
        descriptors = _launch_descriptors("forward", work, q, k, v_loaded, out)
        tuning.AUTOTUNED["forward"].launch(
            lambda meta: (triton.cdiv(seq_q, meta["BLOCK_M"]), batch * heads),
            q, k, v, out, lse, *descriptors, *q.stride()[:3], *k.stride()[:3], *v.stride(),
            heads, seq_q, seq_k, 1.0 / math.sqrt(head_dim),
            tuning.length_bucket(seq_q), tuning.length_bucket(seq_k),
            descriptors[0] is not None,
            HEAD_DIM=head_dim, D_MAIN=d_main, D_REST=d_rest, IS_CAUSAL=bool(is_causal),
            DOT_PRECISION=_dot_precision(q.dtype), V_COLUMN_MAJOR=copies,
            signature=signature, per_call=_FORWARD_TENSORS,
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

    `out` and `lse` are the contiguous tensors attention_forward returned. Under
    torch.use_deterministic_algorithms(True) only the two-pass form runs: the same inputs give the same
    bits (tuning.backward_kernel).
    """
    _batch, heads, seq_q, head_dim = q.shape
    if _gluon_backward_applies(q, k, v, grad_out):
        return _gluon_backward(q, k, v, out, lse, grad_out.contiguous(), is_causal)
    q, k, v = _unit_stride_head_dim(q), _unit_stride_head_dim(k), _unit_stride_head_dim(v)
    grad_out = _unit_stride_head_dim(grad_out)
    delta = torch.empty_like(lse)
    dq, dk, dv = (torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))
    copies = _column_major_copies(q.dtype)
    sm_scale = 1.0 / math.sqrt(head_dim)
    signature = _signature(is_causal, q, k, v, out, lse, grad_out)
    backward = tuning.backward_kernel()
    with _on_device(q.device):
        # Column-major copies for TF32, or the same tensors again (not read then).
        qc, kc, doc = (_column_major(t) for t in (q, k, grad_out)) if copies else (q, k, grad_out)
        kept = backward.kept(signature)
        if kept is not None:
            one_pass = kept.value("ATOMIC_DQ")
            # The one-pass form adds into an fp32 dQ that the row-dot kernel zeroes (_launch_backward too).
            dq_acc = torch.empty(q.shape, device=q.device, dtype=torch.float32) if one_pass else _no_dq_acc(q)
            _row_dot(signature, out, grad_out, delta, heads, seq_q, head_dim, dq_acc if one_pass else None)
            kept(q, k, v, grad_out, qc, kc, doc, lse, delta, dq, dk, dv, dq_acc, q, grad_out, dq_acc)
            if one_pass:
                tuning.convert_dq(dq_acc, sm_scale, dq)
            return dq, dk, dv
        ran = _launch_backward(
            backward, signature, q, k, v, out, lse, grad_out, qc, kc, doc, delta, dq, dk, dv,
            sm_scale, is_causal, copies,
        )  # fmt: skip
        if ran.get("ATOMIC_DQ"):
            tuning.convert_dq(ran["DQ_ACC"], sm_scale, dq)
    return dq, dk, dv


def _gluon_forward(q, k, v, is_causal, persistent: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The Gluon forward, gluon_persistent's kernel if `persistent`; under GLUON_KEPT through its kept
    launch from a signature's second call on."""
    if not GLUON_KEPT:
        return gluon_forward.gluon_attention_forward(q, k, v, is_causal, persistent=persistent)
    signature = (_signature(is_causal, q, k, v), persistent)
    kept = _gluon_forwards.get(signature)
    if kept is None:
        keep = (_gluon_forwards, signature)
        return gluon_forward.gluon_attention_forward(q, k, v, is_causal, keep=keep, persistent=persistent)
    batch, heads, seq, _head_dim = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, seq, device=q.device, dtype=torch.float32)
    with _on_device(q.device):
        kept(q, k, v, out, out, lse, q, k, v, out)  # gluon_forward.PER_CALL
    return out, lse


def _gluon_backward(
    q, k, v, out, lse, grad_out, is_causal
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Gluon one-pass backward: D by the row-dot kernel, which also zeroes the fp32 buffer dQ is
    summed in, then dQ scaled and cast (tuning.convert_dq); under GLUON_KEPT the kernel through its kept
    launch."""
    _batch, heads, seq_q, head_dim = q.shape
    delta = torch.empty_like(lse)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dq_acc = torch.empty(q.shape, device=q.device, dtype=torch.float32)
    with _on_device(q.device):
        signature = _signature(is_causal, q, k, v, out, lse, grad_out)
        _row_dot(signature, out, grad_out, delta, heads, seq_q, head_dim, dq_acc)
        kept = _gluon_backwards.get(signature) if GLUON_KEPT else None
        if kept is not None:  # gluon_backward.PER_CALL
            kept(q, grad_out, k, v, dq_acc, dk, dv, lse, delta, q, grad_out, k, v, dq_acc)
        else:
            keep = (_gluon_backwards, signature) if GLUON_KEPT else None
            gluon_backward.gluon_attention_backward_into(
                q, k, v, grad_out, lse, delta, dq_acc, dk, dv, is_causal, keep=keep
            )
        tuning.convert_dq(dq_acc, 1.0 / math.sqrt(head_dim), dq)
    return dq, dk, dv


_empty: dict[torch.device, torch.Tensor] = {}


def _no_dq_acc(q: torch.Tensor) -> torch.Tensor:
    """The DQ_ACC of the two-pass form, which does not read it: one empty tensor per device."""
    empty = _empty.get(q.device)
    if empty is None:
        empty = _empty[q.device] = torch.empty(0, device=q.device, dtype=torch.float32)
    return empty


def _row_dot(
    signature: tuple, out, grad_out, delta, heads: int, seq_q: int, head_dim: int, dq_acc=None
) -> None:
    """Delta = rowsum(dO * O), which both backward forms read, and zeros into dq_acc (contiguous fp32) if
    given; launched directly from the second call of a signature on."""
    zero_dq_acc = dq_acc is not None
    dq_acc = _no_dq_acc(out) if dq_acc is None else dq_acc
    kept = _row_dots.get((signature, zero_dq_acc))
    if kept is not None:
        kept(out, grad_out, delta, dq_acc)
        return
    batch = out.shape[0]
    rows = 64
    named = dict(
        Out=out, DO=grad_out, Delta=delta, DQ_ACC=dq_acc, stride_dob=grad_out.stride(0),
        stride_doh=grad_out.stride(1), stride_dom=grad_out.stride(2), heads=heads, seq_q=seq_q,
        HEAD_DIM=head_dim, BLOCK_D=triton.next_power_of_2(head_dim), BLOCK_M=rows, ZERO_DQ_ACC=zero_dq_acc,
    )  # fmt: skip
    grid = (triton.cdiv(seq_q, rows), batch * heads)
    made = direct.launch_jit(row_dot_kernel, grid, named, _ROW_DOT_TENSORS, out.device.index)
    if made is not None:
        _row_dots[signature, zero_dq_acc] = made


def _launch_backward(
    backward, signature, q, k, v, out, lse, grad_out, qc, kc, doc, delta, dq, dk, dv, sm_scale, is_causal,
    copies,
) -> dict:  # fmt: skip
    """The backward kernel through tuning (a first call, a new tuning key, a changed configuration):
    the kwargs it ran with, and DQ_ACC."""
    batch, heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    work = batch * heads * seq_q * seq_k * head_dim
    d_main, d_rest = head_dim_parts(head_dim)
    # Whether the launch qualifies for TMA is part of the tuning key, whichever form then runs.
    with_descriptors = _loads_through_tma("backward", q.dtype, head_dim) and _tma_can_load(work, q, grad_out)
    key = {
        "Q": q, "SEQ_Q_BUCKET": tuning.length_bucket(seq_q), "SEQ_K_BUCKET": tuning.length_bucket(seq_k),
        "WITH_DESCRIPTORS": with_descriptors, "HEAD_DIM": head_dim, "IS_CAUSAL": bool(is_causal),
    }  # fmt: skip
    if backward.may_run("ATOMIC_DQ", key):
        # dQ in fp32 for the one-pass form, which adds into it, zeroed by the row-dot launch that its kept
        # launch will make (and again by DQ_ACC_ZEROED); only that form reads the descriptors.
        dq_acc = torch.empty(q.shape, device=q.device, dtype=torch.float32)
        descriptors = _launch_descriptors("backward", work, q, grad_out, dq_acc)
        _row_dot(signature, out, grad_out, delta, heads, seq_q, head_dim, dq_acc)
    else:
        # The two-pass form runs (forced, tuned, or the only candidate): no fp32 copy of q's shape to
        # hold (twice q's bytes in 16-bit), and no descriptors to make.
        dq_acc = _no_dq_acc(q)
        descriptors = [None] * 3
        _row_dot(signature, out, grad_out, delta, heads, seq_q, head_dim)
    ran = backward.launch(
        lambda meta: (max(triton.cdiv(seq_k, meta["BLOCK_N1"]),
                          0 if meta["ATOMIC_DQ"] else triton.cdiv(seq_q, meta["BLOCK_M2"])),
                      batch * heads),
        q, k, v, grad_out, qc, kc, doc, lse, delta, dq, dk, dv, dq_acc, *descriptors,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *grad_out.stride()[:3],
        heads, seq_q, seq_k, sm_scale, key["SEQ_Q_BUCKET"], key["SEQ_K_BUCKET"], with_descriptors,
        HEAD_DIM=head_dim, D_MAIN=d_main, D_REST=d_rest, IS_CAUSAL=bool(is_causal),
        DOT_PRECISION=_dot_precision(q.dtype), COLUMN_MAJOR_COPIES=copies,
        signature=signature, per_call=_BACKWARD_TENSORS,
    )  # fmt: skip
    return {**ran, "DQ_ACC": dq_acc}
