"""weighted_sum(x, w) = x @ w: the dot product of every row of x (..., D) with w (D,), giving (...).

The smallest example of this package's layout: Triton kernels, then launchers that check every input
and own the grid, then the autograd.Function, the public function, and the plain PyTorch reference.

Triton compiles for CUDA GPUs; on a CPU the kernels run under its interpreter, which
`TRITON_INTERPRET=1` turns on. Triton reads the variable when `@triton.jit` runs, i.e. when this
module is imported, so it must be set before the import (`make test` sets it without a GPU).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# A 16 x 128 tile is 2048 values: 16 per thread with Triton's default 4 warps, held in registers.
# Rows are few per program so that short inputs still spread over many programs.
BLOCK_ROWS = 16
MAX_BLOCK_D = 128


@triton.jit
def _weighted_sum_fwd_kernel(
    x_ptr,
    w_ptr,
    out_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # int64: row * x_row_stride reaches 2^31 for inputs of 2 G elements and more.
    rows = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)  # (BLOCK_ROWS,)
    row_mask = rows < n_rows
    acc = tl.zeros((BLOCK_ROWS,), dtype=tl.float32)
    for col_start in range(0, n_cols, BLOCK_D):
        cols = col_start + tl.arange(0, BLOCK_D)  # (BLOCK_D,)
        col_mask = cols < n_cols
        x = tl.load(
            x_ptr + rows[:, None] * x_row_stride + cols[None, :],
            mask=row_mask[:, None] & col_mask[None, :],
            other=0.0,
        )  # (BLOCK_ROWS, BLOCK_D)
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0)  # (BLOCK_D,)
        acc += tl.sum(x.to(tl.float32) * w.to(tl.float32)[None, :], axis=1)
    tl.store(out_ptr + rows, acc.to(out_ptr.dtype.element_ty), mask=row_mask)


@triton.jit
def _weighted_sum_bwd_kernel(
    x_ptr,
    w_ptr,
    grad_out_ptr,
    grad_x_ptr,
    partial_grad_w_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # grad_x = grad_out[:, None] * w, tile by tile. grad_w = sum over rows of grad_out[:, None] * x:
    # each program writes the sum over its own rows to its row of partial_grad_w, and the launcher
    # adds those rows, so no two programs write the same address (no atomics, a fixed summation order).
    pid = tl.program_id(0).to(tl.int64)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)  # (BLOCK_ROWS,)
    row_mask = rows < n_rows
    grad_out = tl.load(grad_out_ptr + rows, mask=row_mask, other=0.0).to(tl.float32)  # (BLOCK_ROWS,)
    for col_start in range(0, n_cols, BLOCK_D):
        cols = col_start + tl.arange(0, BLOCK_D)  # (BLOCK_D,)
        col_mask = cols < n_cols
        tile_mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=tile_mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)  # (BLOCK_D,)
        grad_x = grad_out[:, None] * w[None, :]  # (BLOCK_ROWS, BLOCK_D)
        tl.store(
            grad_x_ptr + rows[:, None] * n_cols + cols[None, :],
            grad_x.to(grad_x_ptr.dtype.element_ty),
            mask=tile_mask,
        )
        partial = tl.sum(grad_out[:, None] * x.to(tl.float32), axis=0)  # (BLOCK_D,)
        tl.store(partial_grad_w_ptr + pid * n_cols + cols, partial, mask=col_mask)


# Whatever TRITON_INTERPRET says now, the kernel objects tell how they were built at import.
INTERPRETED = not isinstance(_weighted_sum_fwd_kernel, triton.runtime.JITFunction)


def _check_inputs(x: torch.Tensor, w: torch.Tensor) -> None:
    for name, t in (("x", x), ("w", w)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
        if t.dtype not in DTYPES:
            accepted = ", ".join(str(d).removeprefix("torch.") for d in DTYPES)
            raise ValueError(f"{name} has dtype {t.dtype}; accepted: {accepted}")
    if w.dtype != x.dtype:
        raise ValueError(f"w has dtype {w.dtype} but x has {x.dtype}; both must share a dtype")
    if w.device != x.device:
        raise ValueError(f"w is on {w.device} but x is on {x.device}; both must share a device")
    if x.ndim < 1:
        raise ValueError("x must have at least 1 dimension (..., D); got a 0-d tensor")
    if w.ndim != 1 or w.shape[0] != x.shape[-1]:
        raise ValueError(
            f"w must be 1-d with x.shape[-1] = {x.shape[-1]} entries; got shape {tuple(w.shape)}"
        )
    if x.device.type != "cuda" and not INTERPRETED:
        raise ValueError(
            f"x is on {x.device}: Triton needs a CUDA GPU, or TRITON_INTERPRET=1 set before "
            "kernels.weighted_sum is imported to run the kernels on the CPU"
        )


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    """(..., D) -> (N, D) with unit column stride, the layout the kernels address.

    The kernels take one row stride, so the leading dimensions are flattened: reshape gives a view
    when they allow it (a slice of rows, or of the first D columns of a wider tensor) and copies only
    otherwise; a column stride other than 1 is copied too, so that each row tile loads contiguously.
    """
    rows = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])  # (N, D); N written out, as -1 fails for D = 0
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def _block_d(n_cols: int) -> int:
    return min(triton.next_power_of_2(max(n_cols, 1)), MAX_BLOCK_D)


def weighted_sum_forward(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w for x (..., D) and w (D,); returns (...) in x's dtype, accumulated in fp32."""
    _check_inputs(x, w)
    rows = _as_rows(x)  # (N, D)
    w = w.contiguous()
    out = torch.empty(rows.shape[0], dtype=x.dtype, device=x.device)  # (N,)
    grid = (triton.cdiv(rows.shape[0], BLOCK_ROWS),)
    _weighted_sum_fwd_kernel[grid](
        rows,
        w,
        out,
        rows.shape[0],
        rows.shape[1],
        rows.stride(0),
        BLOCK_ROWS=BLOCK_ROWS,
        BLOCK_D=_block_d(rows.shape[1]),
    )
    return out.view(x.shape[:-1])


def weighted_sum_backward(
    x: torch.Tensor, w: torch.Tensor, grad_out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of x (..., D) and w (D,) given grad_out (...), in their dtypes."""
    _check_inputs(x, w)
    if grad_out.shape != x.shape[:-1] or grad_out.dtype != x.dtype or grad_out.device != x.device:
        raise ValueError(
            f"grad_out has shape {tuple(grad_out.shape)}, dtype {grad_out.dtype} on {grad_out.device}; "
            f"expected x.shape[:-1] = {tuple(x.shape[:-1])}, {x.dtype} on {x.device}"
        )
    rows = _as_rows(x)  # (N, D)
    n_rows, n_cols = rows.shape
    # autograd may hand over an expanded grad_out (stride 0, from a sum); the kernel reads stride 1.
    grad_out = grad_out.reshape(-1).contiguous()  # (N,)
    grad_x = torch.empty(n_rows, n_cols, dtype=x.dtype, device=x.device)  # (N, D)
    n_programs = triton.cdiv(n_rows, BLOCK_ROWS)
    partial_grad_w = torch.empty(n_programs, n_cols, dtype=torch.float32, device=x.device)  # (programs, D)
    _weighted_sum_bwd_kernel[(n_programs,)](
        rows,
        w.contiguous(),
        grad_out,
        grad_x,
        partial_grad_w,
        n_rows,
        n_cols,
        rows.stride(0),
        BLOCK_ROWS=BLOCK_ROWS,
        BLOCK_D=_block_d(n_cols),
    )
    return grad_x.view(x.shape), partial_grad_w.sum(dim=0).to(w.dtype)


class WeightedSum(torch.autograd.Function):
    """apply(x, w) = x @ w through the Triton kernels; x is saved as given, re-flattened in backward."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        return weighted_sum_forward(x, w)

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        x, w = ctx.saved_tensors
        grad_x, grad_w = weighted_sum_backward(x, w, grad_out)
        return (grad_x if ctx.needs_input_grad[0] else None), (grad_w if ctx.needs_input_grad[1] else None)


def weighted_sum(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Row-wise dot product of x (..., D) with w (D,), giving (...); differentiable in x and w."""
    return WeightedSum.apply(x, w)


def weighted_sum_reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The same in plain PyTorch, accumulated in fp32 (fp64 inputs stay fp64), returned in x's dtype."""
    acc = torch.promote_types(x.dtype, torch.float32)
    return (x.to(acc) @ w.to(acc)).to(x.dtype)  # (...)
