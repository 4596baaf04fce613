"""FlashAttention-2 forward and backward as Triton kernels (and a Gluon forward on Hopper), callable eagerly
and under torch.compile:

    from kernels.flash_attention_triton import FlashAttentionTriton
    out = FlashAttentionTriton.apply(q, k, v, is_causal=True)

The modules, how they tune and store their configurations, and FLASH_TRITON_CONFIG:
docs/attention-kernel.md. Importing the package loads none of its modules, nor Triton: the public names
below load them on first use, after the tests have chosen Triton's interpreter setting.
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
