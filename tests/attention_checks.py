"""Checks shared by the tests of every FlashAttention implementation: the fp64 comparison with its
tolerance rule, the logsumexp check, input makers and the table of bad inputs."""

import math

import torch

from model.attention import naive_attention, reference_attention

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
FP32_EPS = torch.finfo(F32).eps
TF32_UNIT = 2**-10  # TF32 tensor cores keep 10 mantissa bits of fp32 operands and drop the rest


def out_and_grads(fn, q, k, v, grad_out, is_causal):
    """[out, dq, dk, dv] of fn, by autograd from leaf copies of q, k, v."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves, is_causal=is_causal)
    return [out, *torch.autograd.grad(out, leaves, grad_out)]


def assert_within_naive_error(name, got, exact, naive, dtype, head_dim, work_eps=FP32_EPS, terms=1):
    """The tolerance rule: max |got - exact| <= 2 * max |naive - exact| + floor.

    `exact` is the fp64 result, `naive` the materialized einsum-softmax attention (its output or an
    autograd gradient) run in the same dtype: the implementation may be at most twice as far off as
    the plain method. The floor covers what naive can get exactly right by luck:
    - eps(dtype) * max |exact|, one ulp of the largest value, for the final rounding to the dtype;
    - 8 * sqrt(d) * eps32, for the fp32 work inside (every dtype computes in fp32) where naive's
      result is exact by cancellation. A query that sees a single key has dq = 0: naive's softmax
      backward gives g - g = 0 exactly, while dP - D subtracts two different fp32 dot products of
      length d (D = rowsum(dO * O)). With the unit-normal inputs used here that leaves about
      sqrt(d) * eps32 (measured worst: 1.15e-6 at d = 32, 1.7 sqrt(d) eps32). With TF32 dots the
      same holds with TF32's unit 2^-10 in place of eps32 (`work_eps`). dK and dV sum such
      differences over the queries (`terms`), so theirs grow as a random walk, by sqrt(terms): a key
      seen by 61 queries alone measured 4.4e-6 at d = 16 (1.2 sqrt(d * 61) eps32).
    """
    error = (got.double() - exact).abs().max().item()
    naive_error = (naive.double() - exact).abs().max().item()
    work = 8 * math.sqrt(head_dim * terms) * work_eps
    floor = torch.finfo(dtype).eps * exact.abs().max().item() + work
    bound = 2 * naive_error + floor
    assert error <= bound, f"{name}: error {error:.3g} > {bound:.3g} (naive's error {naive_error:.3g})"


def assert_logsumexp_exact(lse, q, k, is_causal, tf32=False):
    """L against torch.logsumexp of the fp64 scores. L is computed in fp32 whatever the input dtype
    (fp16 and bf16 inputs are exact in fp32), so fp32's tolerance applies: 16 ulps. Measured worst
    case over the PyTorch implementation's tests: 6e-7 absolute for |L| < 6, about 5 ulps.

    With TF32 dot products (fp32 inputs on a GPU) each score q.k / sqrt(d) is off by at most
    2^-10 * sum_i |q_i k_i| / sqrt(d): both operands are rounded to 10 mantissa bits, 2^-11 relative
    each. L moves by at most the largest score error, which bounds it.
    """
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q.double() @ k.double().transpose(-2, -1) * scale  # (..., Tq, Tk)
    if is_causal:
        future = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
    assert lse.dtype == F32 and lse.shape == q.shape[:-1]
    atol = 16 * FP32_EPS
    if tf32:
        atol += 2**-10 * (q.double().abs() @ k.double().abs().transpose(-2, -1)).max().item() * scale
    torch.testing.assert_close(lse.double(), scores.logsumexp(dim=-1), rtol=16 * FP32_EPS, atol=atol)


def check_against_fp64(attention, q, k, v, is_causal, grad_out=None, naive_dtype=None, tf32=False):
    """Output, L and the three gradients of `attention` (an autograd.Function saving q, k, v, O, L)
    against fp64, by the rule above. `naive_dtype` runs the naive attention in another dtype than the
    inputs', for an implementation whose fp32 dots lose precision. `tf32` says the implementation's
    dots are TF32: the floor and the L check then use TF32's unit (see assert_logsumexp_exact)."""
    grad_out = torch.randn(q.shape).to(q) if grad_out is None else grad_out
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = attention.apply(*leaves, is_causal)
    assert out.shape == q.shape and out.dtype == q.dtype
    saved = out.grad_fn.saved_tensors  # q, k, v, O, L
    assert len(saved) == 5
    assert all(torch.equal(a, b) for a, b in zip(saved[:4], (*leaves, out), strict=True))
    assert_logsumexp_exact(saved[4], q, k, is_causal, tf32=tf32)
    got = [out, *torch.autograd.grad(out, leaves, grad_out)]
    exact = out_and_grads(
        reference_attention, q.double(), k.double(), v.double(), grad_out.double(), is_causal
    )
    if naive_dtype is None:
        naive = out_and_grads(naive_attention, q, k, v, grad_out, is_causal)
    else:
        lowered = (t.to(naive_dtype) for t in (q, k, v, grad_out))
        naive = out_and_grads(naive_attention, *lowered, is_causal)
    work_eps = TF32_UNIT if tf32 else FP32_EPS
    for name, g, e, n, like in zip(("out", "dq", "dk", "dv"), got, exact, naive, (q, q, k, v), strict=True):
        assert g.shape == like.shape and g.dtype == like.dtype, name
        terms = q.shape[-2] if name in ("dk", "dv") else 1  # dK, dV: a sum over the queries
        assert_within_naive_error(name, g, e, n, q.dtype, q.shape[-1], work_eps, terms)


def random_qkv(batch_heads, seq_q, seq_k, head_dim, dtype, device="cpu"):
    q = torch.randn(*batch_heads, seq_q, head_dim).to(device=device, dtype=dtype)
    k = torch.randn(*batch_heads, seq_k, head_dim).to(device=device, dtype=dtype)
    v = torch.randn(*batch_heads, seq_k, head_dim).to(device=device, dtype=dtype)
    return q, k, v


def bad(q=(2, 3, 8, 16), k=(2, 3, 8, 16), v=(2, 3, 8, 16), dtype=F32, device="cpu", **dtypes_or_devices):
    """q, k, v of the given shapes; `k_dtype=...` or `v_device=...` changes one of them."""
    tensors = []
    for name, shape in (("q", q), ("k", k), ("v", v)):
        dtype_of = dtypes_or_devices.get(f"{name}_dtype", dtype)
        device_of = dtypes_or_devices.get(f"{name}_device", device)
        tensors.append(torch.zeros(shape, device=device_of).to(dtype_of))
    return tensors


def bad_inputs(device="cpu"):
    """Name -> ((q, k, v), message the ValueError must match), for any FlashAttention implementation."""
    return {
        "q 2-d": (
            bad(device=device, q=(8, 16)),
            r"q must have 3 dimensions \(batch, seq, d\) or 4 .*got shape \(8, 16\)",
        ),
        "k 5-d": (
            bad(device=device, k=(1, 2, 3, 8, 16)),
            r"k must have 3 dimensions .*got shape \(1, 2, 3, 8, 16\)",
        ),
        "ranks differ": (bad(device=device, k=(2, 8, 16), v=(2, 8, 16)), r"k has 3 dimensions but q has 4"),
        "float64": (
            bad(device=device, dtype=torch.float64),
            r"q has dtype torch.float64; accepted: float32, float16, bfloat16",
        ),
        "int": (
            bad(device=device, v_dtype=torch.int64),
            r"v has dtype torch.int64; accepted: float32, float16, bfloat16",
        ),
        "dtypes differ": (
            bad(device=device, k_dtype=F16),
            r"k has dtype torch.float16 but q has torch.float32",
        ),
        "devices differ": (
            bad(device=device, v_device="meta"),
            rf"v is on meta but q is on {device}\S*; all three must share a device",
        ),
        "head dim 8": (
            bad(device=device, q=(2, 3, 8, 8), k=(2, 3, 8, 8), v=(2, 3, 8, 8)),
            r"q has head dim 8; accepted: multiples of 8 from 16 to 256 \(16, 24, \.\.\., 256\)",
        ),
        "head dim 20": (
            bad(device=device, q=(1, 4, 20), k=(1, 4, 20), v=(1, 4, 20)),
            r"q has head dim 20; accepted: multiples of 8 from 16 to 256",
        ),
        "head dim 264": (
            bad(device=device, q=(1, 4, 264), k=(1, 4, 264), v=(1, 4, 264)),
            r"q has head dim 264; accepted: multiples of 8 from 16 to 256",
        ),
        "k head dim": (
            bad(device=device, k=(2, 3, 8, 32)),
            r"k has head dim 32 but q has 16; they must match",
        ),
        "heads differ": (
            bad(device=device, k=(2, 4, 8, 16), v=(2, 4, 8, 16)),
            r"k has leading \(batch, heads\) .*\(2, 4\)",
        ),
        "batch differs": (
            bad(device=device, v=(1, 3, 8, 16)),
            r"v has leading \(batch, heads\) dimensions \(1, 3\)",
        ),
        "k, v rows differ": (
            bad(device=device, v=(2, 3, 9, 16)),
            r"k has 8 rows but v has 9; keys and values must pair up",
        ),
        "no rows": (bad(device=device, q=(2, 3, 0, 16)), r"q has no rows"),
        "not a tensor": ([[[1.0]], *bad(device=device)[1:]], r"q must be a torch.Tensor; got list"),
    }
