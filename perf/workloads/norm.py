"""The norm suite's step: x (rows, width) on the device and one call of a norm, forward or forward and
backward, with the bytes it must move (norms are memory-bound)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from model.layers import RMSNorm
from model.precision import parse_dtype
from perf.cases.norm import PROVIDERS
from perf.harness import Work


def norm_function(provider: str, width: int, device: torch.device, dtype: torch.dtype) -> Callable:
    """x -> its normalized rows by `provider`, with a weight (and for layer_norm a bias) of ones."""
    if provider == "model_rms":
        return RMSNorm(width, device=device, dtype=dtype)
    weight = torch.ones(width, device=device, dtype=dtype, requires_grad=True)
    if provider == "torch_rms":
        return lambda x: F.rms_norm(x, (width,), weight, 1e-5)
    if provider == "layer_norm":
        bias = torch.zeros(width, device=device, dtype=dtype, requires_grad=True)
        return lambda x: F.layer_norm(x, (width,), weight, bias, 1e-5)
    raise ValueError(f"provider: unknown value {provider!r}; accepted: {', '.join(PROVIDERS)}")


def norm_workload(
    provider: str, mode: str, rows: int, width: int, precision: str, device: torch.device
) -> tuple[Callable[[], object], Work, Callable, torch.Tensor]:
    """The step, what it does, the norm and its input x (rows, width)."""
    dtype = parse_dtype(precision)
    generator = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(rows, width, device=device, dtype=dtype, generator=generator)
    norm = norm_function(provider, width, device, dtype)
    size = x.element_size()
    if mode == "forward":
        moved = 2 * size * rows * width  # reads x, writes the output

        def step() -> object:
            with torch.no_grad():
                return norm(x)

    elif mode == "forward_backward":
        x.requires_grad_(True)
        grad_out = torch.randn_like(x)
        moved = 5 * size * rows * width  # the forward's, then reads x, grad_out and writes grad_x

        def step() -> object:
            return torch.autograd.grad(norm(x), x, grad_out)

    else:
        raise ValueError(f"mode: unknown value {mode!r}; accepted: forward, forward_backward")
    flops = 4 * rows * width * (1 if mode == "forward" else 3)  # square, sum, scale, weight per element
    return step, Work(flops=flops, bytes_moved=moved, precision=precision), norm, x
