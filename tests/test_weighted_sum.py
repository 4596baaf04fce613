import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# tests/conftest.py switches TRITON_INTERPRET on without a GPU, before this import.
from kernels import weighted_sum as ws
from kernels.weighted_sum import weighted_sum, weighted_sum_backward, weighted_sum_reference

if not torch.cuda.is_available() and not ws.INTERPRETED:
    pytest.skip(
        "no CUDA GPU, and the Triton kernels were built for one (TRITON_INTERPRET is "
        f"{os.environ.get('TRITON_INTERPRET', 'unset')!r}; Triton reads it when kernels.weighted_sum is "
        "first imported). Set TRITON_INTERPRET=1 before pytest starts, or use `make test`",
        allow_module_level=True,
    )

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
compiled_cuda_only = pytest.mark.skipif(
    not torch.cuda.is_available() or ws.INTERPRETED,
    reason="bf16 needs the compiled kernels on a CUDA GPU: Triton's interpreter (3.9) casts fp32 to bf16 "
    "by truncation, an ulp off the GPU's round-to-nearest",
)
DTYPES = [F32, F16, pytest.param(BF16, marks=[pytest.mark.gpu, compiled_cuda_only])]


def assert_within_rounding(got, exact, magnitude, terms):
    """The tolerance rule, elementwise: |got - exact| <= terms * eps32 * magnitude + eps * |exact|.

    The kernels add `terms` products in fp32, which errs by at most terms * eps32 / 2 times the sum of
    the products' magnitudes (`magnitude`), then round once to got's dtype, eps / 2 relative; each
    bound is doubled. The last term, one subnormal step, covers results that round below fp16's normals.
    """
    finfo = torch.finfo(got.dtype)
    bound = terms * torch.finfo(F32).eps * magnitude + finfo.eps * exact.abs() + finfo.tiny * finfo.eps
    error = (got.double() - exact).abs()
    assert got.shape == exact.shape
    assert (error <= bound).all(), f"worst error {error.max():.3g}, bound there {bound[error.argmax()]:.3g}"


def check_against_reference(x, w, grad_out=None):
    """Output and both gradients of the kernels against the fp64 reference and its autograd."""
    grad_out = torch.randn(x.shape[:-1], device=DEVICE).to(x.dtype) if grad_out is None else grad_out
    x_leaf, w_leaf = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    out = weighted_sum(x_leaf, w_leaf)
    assert out.dtype == x.dtype and out.shape == x.shape[:-1]
    grad_x, grad_w = torch.autograd.grad(out, (x_leaf, w_leaf), grad_out)
    assert grad_x.dtype == x.dtype and grad_w.dtype == w.dtype

    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    exact = weighted_sum_reference(x64, w64)
    exact_grad_x, exact_grad_w = torch.autograd.grad(exact, (x64, w64), grad_out.double())
    x_abs, w_abs, g_abs = x.double().abs(), w.double().abs(), grad_out.double().abs()
    n_rows = math.prod(x.shape[:-1])
    assert_within_rounding(out, exact.detach(), x_abs @ w_abs, terms=x.shape[-1])
    assert_within_rounding(grad_x, exact_grad_x, g_abs[..., None] * w_abs, terms=1)
    magnitude_w = g_abs.reshape(n_rows) @ x_abs.reshape(n_rows, x.shape[-1])  # (D,)
    assert_within_rounding(grad_w, exact_grad_w, magnitude_w, terms=n_rows)


def random_xw(x_shape, dtype):
    x = torch.randn(x_shape, device=DEVICE).to(dtype)
    return x, torch.randn(x_shape[-1], device=DEVICE).to(dtype)


# Ragged on both axes: 17 and 33 rows leave a partial last row tile (16 rows each), 1, 100 and 130
# columns a partial column tile, and 130 > 128 takes two trips through the column loop.
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", [1, 16, 100, 130])
@pytest.mark.parametrize("n_rows", [1, 17, 33])
def test_matches_reference(n_rows, n_cols, dtype):
    torch.manual_seed(0)
    check_against_reference(*random_xw((n_rows, n_cols), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_three_dim_and_one_dim_x(dtype):
    torch.manual_seed(0)
    check_against_reference(*random_xw((2, 5, 40), dtype))  # (B, T, D) -> (B, T)
    check_against_reference(*random_xw((40,), dtype))  # (D,) -> ()


@pytest.mark.parametrize("dtype", DTYPES)
def test_non_contiguous_x_and_grad_out(dtype):
    torch.manual_seed(0)
    w = torch.randn(24, device=DEVICE).to(dtype)
    columns_of_wider = torch.randn(3, 7, 64, device=DEVICE).to(dtype)[..., 8:32]  # rows 64 apart: a view
    transposed = torch.randn(24, 18, device=DEVICE).to(dtype).T  # columns 18 apart: copied
    strided_grad_out = torch.randn(7, 3, device=DEVICE).to(dtype).T  # (3, 7)
    check_against_reference(columns_of_wider, w, grad_out=strided_grad_out)
    check_against_reference(transposed, w)


@pytest.mark.parametrize("x_shape", [(0, 8), (3, 0), (2, 0, 5)])
def test_empty_inputs(x_shape):
    # No rows launches no program; no columns sums nothing, so every output is 0.
    check_against_reference(*random_xw(x_shape, F32))


def test_expanded_grad_out():
    torch.manual_seed(0)
    x, w = (t.requires_grad_() for t in random_xw((20, 30), F32))
    weighted_sum(x, w).sum().backward()  # grad_out: ones with stride 0
    torch.testing.assert_close(x.grad, w.detach().expand(20, 30))
    torch.testing.assert_close(w.grad, x.detach().sum(dim=0))


def test_strided_w():
    torch.manual_seed(0)
    x, w_wide = random_xw((9, 20), F32)[0], torch.randn(40, device=DEVICE)
    check_against_reference(x, w_wide[::2])


BAD_INPUTS = {
    "x float64": ((torch.float64, (4, 8)), (F32, (8,)), r"x has dtype torch.float64; accepted: float32"),
    "w int": ((F32, (4, 8)), (torch.int32, (8,)), r"w has dtype torch.int32; accepted: float32, float16"),
    "dtypes differ": ((F32, (4, 8)), (F16, (8,)), r"w has dtype torch.float16 but x has torch.float32"),
    "w 2-d": (
        (F32, (4, 8)),
        (F32, (8, 1)),
        r"w must be 1-d with x.shape\[-1\] = 8 entries; got shape \(8, 1\)",
    ),
    "w too short": (
        (F32, (4, 8)),
        (F32, (7,)),
        r"w must be 1-d with x.shape\[-1\] = 8 entries; got shape \(7,\)",
    ),
    "x 0-d": ((F32, ()), (F32, (1,)), r"x must have at least 1 dimension"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_rejects_bad_inputs(name):
    (x_dtype, x_shape), (w_dtype, w_shape), message = BAD_INPUTS[name]
    x, w = torch.ones(x_shape, device=DEVICE).to(x_dtype), torch.ones(w_shape, device=DEVICE).to(w_dtype)
    with pytest.raises(ValueError, match=message):
        weighted_sum(x, w)


def test_rejects_mismatched_devices():
    with pytest.raises(ValueError, match=r"w is on meta but x is on .*; both must share a device"):
        weighted_sum(torch.ones(4, 8, device=DEVICE), torch.ones(8, device="meta"))


def test_rejects_non_tensor():
    with pytest.raises(ValueError, match=r"w must be a torch.Tensor; got list"):
        weighted_sum(torch.ones(4, 8, device=DEVICE), [1.0] * 8)


def test_rejects_mismatched_grad_out():
    x, w = random_xw((4, 8), F32)
    with pytest.raises(ValueError, match=r"grad_out has shape \(3,\), .*expected x.shape\[:-1\] = \(4,\)"):
        weighted_sum_backward(x, w, torch.ones(3, device=DEVICE))
    with pytest.raises(ValueError, match=r"grad_out has shape \(4,\), dtype torch.float16 .*torch.float32"):
        weighted_sum_backward(x, w, torch.ones(4, device=DEVICE, dtype=F16))


def test_cpu_tensors_without_the_interpreter_say_what_is_needed(monkeypatch):
    monkeypatch.setattr(ws, "INTERPRETED", False)
    with pytest.raises(ValueError, match=r"x is on cpu: Triton needs a CUDA GPU, or TRITON_INTERPRET=1 set"):
        weighted_sum(torch.ones(4, 8), torch.ones(8))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only set-up of Triton's interpreter")
def test_interpreter_is_set_up_before_anything_imports_triton_runtime(tmp_path):
    """tests/conftest.py turns the interpreter on; the root conftest, loaded first, must not have set up
    Triton's runtime by then (importing torch._dynamo does), or kernels fail in the interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-x",
            __file__,
            "-k",
            "matches_reference",
        ],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
