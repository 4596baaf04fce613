"""Training precisions: names, autocast, loss scaling, the TF32 switch, how a sum rounds per format."""

import math
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch

PRECISIONS = ("fp32", "bf16", "fp16")

_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

_DTYPE_SPELLINGS = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp64": torch.float64,
    "float64": torch.float64,
    "double": torch.float64,
}


def check_precision(name: str) -> str:
    """Return name if it is one of PRECISIONS, else raise ValueError."""
    if name not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r}; accepted: {', '.join(PRECISIONS)}")
    return name


def parse_dtype(value: str | torch.dtype) -> torch.dtype:
    """A torch.dtype from a dtype or one of its spellings ('bf16', 'bfloat16', ...), case-insensitive."""
    if isinstance(value, torch.dtype):
        return value
    dtype = _DTYPE_SPELLINGS.get(value.lower()) if isinstance(value, str) else None
    if dtype is None:
        raise ValueError(f"unknown dtype {value!r}; accepted: {', '.join(_DTYPE_SPELLINGS)} or a torch.dtype")
    return dtype


def autocast(precision: str, device_type: str | torch.device) -> AbstractContextManager:
    """No-op for fp32, else torch.autocast to bf16 or fp16; device_type is 'cuda', 'cpu' or a torch.device."""
    check_precision(precision)
    device_type = torch.device(device_type).type
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device_type, dtype=_AUTOCAST_DTYPES[precision])


def grad_scaler(precision: str, device_type: str | torch.device) -> torch.amp.GradScaler:
    """A GradScaler that scales only for fp16; for fp32 and bf16 it is disabled and passes calls through.

    bf16 has fp32's exponent range, so its gradients do not underflow and need no scaling.
    """
    check_precision(precision)
    return torch.amp.GradScaler(torch.device(device_type).type, enabled=precision == "fp16")


# torch 2.9 documents per-backend fp32_precision ('ieee' | 'tf32') in place of the allow_tf32
# flags; 2.9 warned on the old flags, 2.11 and 2.13 warn on neither. cuBLAS and cuDNN read only
# the new setting. The old getters (torch.get_float32_matmul_precision(),
# torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) raise RuntimeError
# while old and new disagree, as they do inside tf32(True) from torch's defaults. Inductor's
# max-autotune calls the first one: torch.compile(mode="max-autotune") fails inside tf32(True)
# (NOTES.md: Measurements behind comments in the code); the default mode compiles.
_HAS_FP32_PRECISION = hasattr(torch.backends.cuda.matmul, "fp32_precision")


@contextmanager
def tf32(enabled: bool = True) -> Iterator[None]:
    """Allow (or forbid) TF32 in fp32 CUDA matmuls and cuDNN convolutions, until the block exits."""
    if _HAS_FP32_PRECISION:
        matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
        saved = matmul.fp32_precision, conv.fp32_precision
        mode = "tf32" if enabled else "ieee"
        try:
            matmul.fp32_precision = mode
            conv.fp32_precision = mode
            yield
        finally:
            matmul.fp32_precision, conv.fp32_precision = saved
    else:
        matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
        saved = matmul.allow_tf32, cudnn.allow_tf32
        try:
            matmul.allow_tf32 = enabled
            cudnn.allow_tf32 = enabled
            yield
        finally:
            matmul.allow_tf32, cudnn.allow_tf32 = saved


def tf32_enabled() -> bool:
    """Whether fp32 CUDA matmuls may use TF32.

    Convolutions are left out: a Transformer has none, and torch's defaults differ (cuDNN conv
    allows TF32, matmul does not), so one answer for both would mislead.
    """
    if _HAS_FP32_PRECISION:
        return torch.backends.cuda.matmul.fp32_precision == "tf32"
    return torch.backends.cuda.matmul.allow_tf32


def accumulate(
    value: float, count: int, value_dtype: str | torch.dtype, sum_dtype: str | torch.dtype
) -> torch.Tensor:
    """Add `value`, stored as value_dtype, `count` times into a running sum held in sum_dtype.

    The classic accumulation experiment, one addition at a time as written: each `+=` rounds the
    sum to sum_dtype, so the result shows what the sum's format loses (and what the value's format
    loses when it is stored). Runs on the CPU.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"value: expected a finite int or float, got {value!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count: expected an integer >= 0, got {count!r}")
    value_dtype = _floating_dtype("value_dtype", value_dtype)
    sum_dtype = _floating_dtype("sum_dtype", sum_dtype)
    s = torch.tensor(0, dtype=sum_dtype)
    for _ in range(count):
        s += torch.tensor(value, dtype=value_dtype)
    return s


def _floating_dtype(argument: str, value: str | torch.dtype) -> torch.dtype:
    try:
        dtype = parse_dtype(value)
    except ValueError as err:
        raise ValueError(f"{argument}: {err}") from None
    if not dtype.is_floating_point:
        raise ValueError(
            f"{argument}: {dtype} is not a floating-point dtype; accepted: {', '.join(_DTYPE_SPELLINGS)}"
        )
    return dtype
