"""What the FlashAttentionTriton test modules share: the device, inputs, the check against fp64, the
configuration each pins on a GPU, and launches refused as out of resources."""

import pytest
import torch
from triton.runtime.errors import OutOfResources

from kernels import flash_attention_triton as fat
from kernels.flash_attention_triton import (
    FlashAttentionTriton,
    tuning,
)
from tests.attention_checks import (
    BF16,
    F32,
    check_against_fp64,
    random_qkv,
)

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
needs_gpu = [
    pytest.mark.gpu,
    pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU: bf16 dots are wrong in Triton's interpreter"),
]
BF16_ON_GPU = pytest.param(BF16, marks=needs_gpu)


# On a GPU every new (length bucket, head dim, dtype, causal) would autotune, compiling a dozen
# configurations: minutes over these files. Tests pin one configuration by the documented override,
# except the ones marked autotuned, which check the autotuned choices.
PINNED = "forward:BLOCK_M=64,BLOCK_N=32,num_warps=4; backward:BLOCK_M1=32,BLOCK_N1=64,BLOCK_M2=64,BLOCK_N2=32"


# Tiles that fit every head dim's shared memory and registers, fp32 at 256 included.
SMALL_TILES = (
    "forward:BLOCK_M=32,BLOCK_N=16,num_warps=4; backward:BLOCK_M1=16,BLOCK_N1=16,BLOCK_M2=16,BLOCK_N2=16"
)


def pin_configuration(request, monkeypatch) -> None:
    """Each module's autouse fixture: PINNED on a GPU, unless the test is marked autotuned."""
    if CUDA and "autotuned" not in request.keywords:
        monkeypatch.setenv(fat.CONFIG_ENV, PINNED)


def check(q, k, v, is_causal, grad_out=None):
    uses_tf32 = CUDA and q.dtype == F32
    kwargs = {"naive_dtype": BF16, "tf32": True} if uses_tf32 else {}
    check_against_fp64(FlashAttentionTriton, q, k, v, is_causal, grad_out=grad_out, **kwargs)


def qkv(batch_heads, seq_q, seq_k, head_dim, dtype):
    return random_qkv(batch_heads, seq_q, seq_k, head_dim, dtype, device=DEVICE)


def launches_run_out_of(monkeypatch, kernel: str, resource="shared memory", required=262144, limit=232448,
                        when=lambda kwargs: True) -> None:  # fmt: skip
    """Make the kernel's jit function refuse launches (those `when` picks by their kwargs) as Triton
    does when a compiled kernel needs more than the GPU has: the interpreter never does. Under the
    heuristics, so forced, autotuned and directly launched configurations all reach it."""
    jit_fn = tuning.AUTOTUNED[kernel].fixed.fn
    run = jit_fn.run

    def refused(*args, **kwargs):
        if when(kwargs):
            raise OutOfResources(required, limit, resource)
        return run(*args, **kwargs)

    monkeypatch.setattr(jit_fn, "run", refused)
