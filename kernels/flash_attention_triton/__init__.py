"""FlashAttention-2 forward and backward as Triton kernels, callable eagerly and under torch.compile.

    from kernels.flash_attention_triton import FlashAttentionTriton, flash_attention_triton
    out = FlashAttentionTriton.apply(q, k, v, is_causal=True)

The forward walks over key tiles with an online softmax in fp32 and saves the output and the
logsumexp; the backward recomputes the probabilities from it, in one launch of two passes or (chosen
by the autotuner where it is faster) one pass that adds dQ into an fp32 buffer. Causal attention skips
the tiles wholly in the future and masks only those crossing the diagonal. A head dim runs as a
power-of-two main part and, where what is left is one too, a rest part beside it. fp32 inputs use TF32
dots; 16-bit ones (and fp32's forward from 128 columns on) load through TMA descriptors on Hopper.

Modules, each importing only those listed after it:

    operators         FlashAttentionTriton, flash_attention_triton: an autograd.Function for eager
                      calls, torch.library operators for torch.compile
    launch            attention_forward, attention_backward: checks, outputs, grids, TMA descriptors,
                      column-major copies for TF32
    tuning            tuning keys, the autotuner and its timing, heuristics, the direct launch of a
                      tuned, stored or forced configuration; chosen_configs
    direct            a launch resolved once per call signature, then made straight through Triton's
                      compiled launcher
    configs           candidate configurations, their pruning by row width, FLASH_TRITON_CONFIG
    stored            the stored tuning tables of each GPU model (kernels/tuned/)
    gluon_forward     the forward in Gluon for Hopper (a TMA producer warp, two consumer warpgroups)
    forward_kernels   the forward kernel
    backward_kernels  the backward kernels
    tiles             tile addressing, loads and stores both use; head_dim_parts, padded_share

Tile sizes, warps and pipeline stages are autotuned per (length bucket, head dim, causal, dtype), once
per machine, or taken from the GPU model's stored table. To force one configuration, for example to
compare with the autotuned one, set FLASH_TRITON_CONFIG, one entry per kernel separated by ';':

    FLASH_TRITON_CONFIG="forward:BLOCK_M=64,BLOCK_N=32,num_warps=4,num_stages=2"
    FLASH_TRITON_CONFIG="forward:BLOCK_M=64,BLOCK_N=32;backward:BLOCK_M1=32,BLOCK_N1=64,BLOCK_M2=64,BLOCK_N2=32"

The backward entry names the dK/dV pass's query and key tiles (BLOCK_M1, BLOCK_N1) and the dQ
pass's (BLOCK_M2, BLOCK_N2), and takes ATOMIC_DQ=1 for the one-pass form.

Kernels not named keep autotuning; a kernel named takes exactly the values given (unnamed values
default to num_warps=4, num_stages=2). `forced_configs()` says what is in force, `chosen_configs()`
what each kernel last ran with.

Importing this package loads none of its modules, nor triton: the names below load them all on first
use, which also registers the operators. Triton reads TRITON_INTERPRET when @triton.jit decorates a
function (its own ones when triton is imported), so no import that comes before tests/conftest.py
switches the interpreter on (CPU-only runs) decides it. `kernels.flash_attention_triton.stored` imports
triton but none of the kernels.
"""

import importlib
import sys

# The public names, by the module that holds them.
_EXPORTS = {
    "FlashAttentionTriton": "operators",
    "flash_attention_triton": "operators",
    "attention_forward": "launch",
    "attention_backward": "launch",
    "chosen_configs": "tuning",
    "forced_configs": "configs",
    "CONFIG_ENV": "configs",
    "BLOCK_NAMES": "configs",
    "SWITCHES": "configs",
    "head_dim_parts": "tiles",
    "padded_share": "tiles",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    """A public name, loading the modules on first use (operators imports all the others)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    importlib.import_module(f"{__name__}.operators")
    for export, module in _EXPORTS.items():
        globals()[export] = getattr(sys.modules[f"{__name__}.{module}"], export)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
