"""The attention workloads: implementations by provider name, and the step functions benchmarks time.

A provider is a context manager that yields `attention(q, k, v) -> out` for one shape and dtype,
or raises ProviderUnavailable saying why it cannot run here. Whatever state a provider needs
(SDPA's backend choice, a fresh torch.compile cache) holds for as long as its context is open.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from model.attention import naive_attention
from model.precision import parse_dtype
from perf.cases.attention import ATTENTION_MODES, AttentionShape
from perf.harness import Work, nvtx_range
from perf.workloads.compiling import compiled

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ProviderContext = Callable[
    [AttentionShape, torch.dtype, torch.device, bool], contextlib.AbstractContextManager
]


class ProviderUnavailable(Exception):
    """The provider cannot run on this device, dtype or torch build; the message says why."""


# --------------------------------------------------------------------------- providers
@contextlib.contextmanager
def _naive(shape: AttentionShape, dtype: torch.dtype, device: torch.device, needs_grad: bool):
    def naive(q, k, v):
        return naive_attention(q, k, v, is_causal=shape.causal)

    yield naive


@contextlib.contextmanager
def _naive_compiled(shape: AttentionShape, dtype: torch.dtype, device: torch.device, needs_grad: bool):
    with _naive(shape, dtype, device, needs_grad) as naive, compiled(naive) as fast:
        yield fast


def _import_kernel(module: str, name: str):
    """The kernel class, or ProviderUnavailable if its module is absent; a module that fails to import
    for any other reason is a bug and raises."""
    try:
        return getattr(__import__(module, fromlist=[name]), name)
    except ModuleNotFoundError as err:
        if err.name != module:
            raise
        raise ProviderUnavailable(f"{module} is not present in this checkout") from None


@contextlib.contextmanager
def _flash_pytorch_compiled(
    shape: AttentionShape, dtype: torch.dtype, device: torch.device, needs_grad: bool
):
    flash = _import_kernel("kernels.flash_attention_pytorch", "FlashAttentionPyTorch")

    def flash_pytorch(q, k, v):
        return flash.apply(q, k, v, shape.causal)

    with compiled(flash_pytorch) as fast:
        yield fast


@contextlib.contextmanager
def _flash_triton(shape: AttentionShape, dtype: torch.dtype, device: torch.device, needs_grad: bool):
    if device.type != "cuda":
        raise ProviderUnavailable(f"the Triton kernel needs a CUDA GPU; this run is on {device}")
    flash = _import_kernel("kernels.flash_attention_triton", "FlashAttentionTriton")

    def flash_triton(q, k, v):
        return flash.apply(q, k, v, shape.causal)

    yield flash_triton


def _sdpa(backend: SDPBackend) -> ProviderContext:
    @contextlib.contextmanager
    def provider(shape: AttentionShape, dtype: torch.dtype, device: torch.device, needs_grad: bool):
        def sdpa(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal)

        # The backend choice is process state, set once around the whole measurement: entering
        # sdpa_kernel costs ~30 us per call (CPU here), as much as a small GPU attention call.
        with sdpa_kernel(backend):
            _probe(sdpa, shape, dtype, device, needs_grad)
            yield sdpa

    return provider


@contextlib.contextmanager
def _sdpa_cudnn(shape: AttentionShape, dtype: torch.dtype, device: torch.device, needs_grad: bool):
    backend = getattr(SDPBackend, "CUDNN_ATTENTION", None)
    if backend is None:
        raise ProviderUnavailable(f"torch {torch.__version__} has no cuDNN attention backend")
    if device.type != "cuda":
        raise ProviderUnavailable(f"cuDNN attention needs a CUDA GPU; this run is on {device}")
    if not torch.backends.cudnn.is_available():
        raise ProviderUnavailable(f"cuDNN is not available to torch {torch.__version__}")
    with _sdpa(backend)(shape, dtype, device, needs_grad) as sdpa:
        yield sdpa


_TRIGGERED_AT = re.compile(r"\s*\(Triggered internally at [^)]*\)\.?")


def relevant_reasons(messages: Iterable[str]) -> list[str]:
    """PyTorch's warnings on why no SDPA kernel ran, less the ones about the backends that sdpa_kernel
    turned off on purpose ("... has been runtime disabled") and the headings before each reason."""
    reasons = (_TRIGGERED_AT.sub("", message).strip() for message in messages)
    return [
        reason
        for reason in reasons
        if reason and not reason.endswith("not used because:") and "runtime disabled" not in reason
    ]


def _probe(attention: Attention, shape: AttentionShape, dtype: torch.dtype, device, needs_grad: bool) -> None:
    """One call on a single head of the shape: a backend that cannot take these inputs raises
    ProviderUnavailable with PyTorch's reasons (it gives them as warnings before its error)."""
    q, k, v = (
        torch.randn(1, 1, shape.seq, shape.head_dim, device=device, dtype=dtype, requires_grad=needs_grad)
        for _ in range(3)
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = attention(q, k, v)
            if needs_grad:
                torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        except torch.OutOfMemoryError:
            raise
        except RuntimeError as err:
            reasons = relevant_reasons(str(w.message) for w in caught)
            detail = "; ".join(dict.fromkeys([str(err).strip().splitlines()[0], *reasons]))
            passes = "forward+backward" if needs_grad else "forward"
            raise ProviderUnavailable(f"{dtype} {passes}: {detail}") from None


PROVIDERS: dict[str, ProviderContext] = {
    "naive": _naive,
    "naive_compiled": _naive_compiled,
    "flash_pytorch_compiled": _flash_pytorch_compiled,
    "flash_triton": _flash_triton,
    "sdpa_flash": _sdpa(SDPBackend.FLASH_ATTENTION),
    "sdpa_cudnn": _sdpa_cudnn,
}

# Providers that materialize the (batch, heads, seq, seq) score matrix.
MATERIALIZING_PROVIDERS = ("naive", "naive_compiled")
# Untimed calls after the first one (which compiles, JIT-compiles or autotunes where a provider does).
WARMUP_STEPS = 2


def open_provider(
    name: str, shape: AttentionShape, dtype: torch.dtype, device: torch.device, needs_grad: bool
) -> contextlib.AbstractContextManager:
    """`with open_provider(...) as attention:`; entering raises ProviderUnavailable when it cannot run."""
    try:
        provider = PROVIDERS[name]
    except KeyError:
        raise ValueError(f"unknown attention provider {name!r}; accepted: {', '.join(PROVIDERS)}") from None
    return provider(shape, dtype, device, needs_grad)


def score_matrix_note(provider: str, shape: AttentionShape, dtype: torch.dtype) -> str:
    """What one score matrix of the shape takes: the out-of-memory reason of materializing providers."""
    size = dtype.itemsize
    return (
        f"{provider} materializes the (batch, heads, seq, seq) score matrix: "
        f"{shape.batch}*{shape.heads}*{shape.seq}*{shape.seq}*{size} = {shape.score_bytes(size)} bytes "
        f"({shape.score_bytes(size) / 2**30:.2f} GiB) per copy"
    )


# --------------------------------------------------------------------------- steps
@dataclass
class AttentionWorkload:
    """The inputs' step: `setup` once, untimed, then `step` as often as the benchmark likes.

    `forward() -> out` and `backward(out)` are the step's two phases, for timing them apart.
    """

    setup: Callable[[], None]
    step: Callable[[], None]
    work: Work
    forward: Callable[[], torch.Tensor]
    backward: Callable[[torch.Tensor], None]


def attention_workload(
    attention: Attention,
    mode: str,
    shape: AttentionShape,
    precision: str,
    device: torch.device,
    seed: int = 0,
) -> AttentionWorkload:
    """q, k, v of the shape in the precision's dtype (no autocast) and the step of the mode.

    backward: setup runs the forward once; each step replays its graph with autograd.grad, which
    returns the gradients instead of accumulating them into .grad.
    """
    if mode not in ATTENTION_MODES:
        raise ValueError(f"unknown mode {mode!r}; accepted: {', '.join(ATTENTION_MODES)}")
    dtype = parse_dtype(precision)
    needs_grad = mode != "forward"
    generator = torch.Generator(device=device).manual_seed(seed)
    size = (shape.batch, shape.heads, shape.seq, shape.head_dim)
    q, k, v = (
        torch.randn(size, generator=generator, device=device, dtype=dtype).requires_grad_(needs_grad)
        for _ in range(3)
    )  # (B, H, T, Dh) each
    grad_out = torch.randn(size, generator=generator, device=device, dtype=dtype) if needs_grad else None
    held: list[torch.Tensor] = []  # backward mode: the forward's output, whose graph each step replays

    def forward() -> torch.Tensor:
        with nvtx_range("forward"):
            return attention(q, k, v)  # (B, H, T, Dh)

    def backward(out: torch.Tensor, retain_graph: bool) -> None:
        with nvtx_range("backward"):
            torch.autograd.grad(out, (q, k, v), grad_out, retain_graph=retain_graph)

    def setup() -> None:
        if mode == "backward":
            held[:] = [forward()]

    if mode == "forward":

        def step() -> None:
            forward()

    elif mode == "backward":

        def step() -> None:
            backward(held[0], retain_graph=True)

    else:

        def step() -> None:
            backward(forward(), retain_graph=False)

    work = Work(flops=shape.flops(mode), tokens=shape.tokens, precision=precision)
    return AttentionWorkload(
        setup, step, work, forward=forward, backward=lambda out: backward(out, retain_graph=False)
    )
