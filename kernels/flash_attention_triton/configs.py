"""The kernels' configurations: the autotuner's candidates, their pruning to a launch's row width, and
the configurations FLASH_TRITON_CONFIG forces.

A configuration names tile sizes (forward: BLOCK_M query rows, BLOCK_N key rows; backward: BLOCK_M1,
BLOCK_N1 of the dK/dV pass and BLOCK_M2, BLOCK_N2 of the dQ pass), warps, pipeline stages and the
backward's form (ATOMIC_DQ, see backward_kernels). Which tiles fit shared memory and registers depends
on the bytes a row of the head dim takes, so the candidates come per class of row width (row_width)
and _prune keeps a launch's own.

FLASH_TRITON_CONFIG holds one entry per kernel, separated by ';' (examples in the package docstring):
a kernel named takes exactly the values given (unnamed values default to num_warps=4, num_stages=2),
a kernel not named keeps autotuning. It is read at every launch; forced_configs() says what is in force.
An entry the GPU cannot run for the inputs (more shared memory than a block may have, say) fails its
launch with a ValueError that names the entry, the dtype and head dim, and what it needs against the
GPU's limit (does_not_fit).
"""

from __future__ import annotations

import functools
import os

import triton
from triton.runtime.errors import OutOfResources

from kernels.flash_attention_triton.tiles import head_dim_parts

CONFIG_ENV = "FLASH_TRITON_CONFIG"
BLOCK_NAMES = {
    "forward": ("BLOCK_M", "BLOCK_N"),
    "backward": ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2"),
}
_LAUNCH_NAMES = ("num_warps", "num_stages")
# Switches of a configuration besides its tiles, 0 or 1, with their defaults: ATOMIC_DQ picks the
# backward's one-pass form (see backward_kernels).
SWITCHES = {"forward": {}, "backward": {"ATOMIC_DQ": 0}}

_ONE_PASS = {"ATOMIC_DQ": 1}
# Candidates as block sizes, then (num_warps, num_stages) and any switches. Chosen from a sweep of
# configurations per kernel (bf16 and fp32, head dims 64 and 128, lengths 1024 to 16384): these came
# close to the best there (NOTES.md: Measurements behind comments in the code). "wide" rows (head dim x
# element size >= 256 bytes) need smaller tiles to fit in shared memory. The one-pass backward is a
# candidate for "narrow" and "mid" rows only: at head dim 128 it was slower than the two passes
# (backward_kernels).
_CANDIDATES = {
    ("forward", "narrow"): [((64, 64), 4, 3), ((64, 64), 4, 2), ((128, 64), 8, 3), ((128, 64), 8, 4),
                            ((128, 64), 4, 3), ((128, 128), 8, 3), ((64, 128), 4, 3), ((64, 128), 4, 2)],
    ("forward", "wide"): [((128, 64), 8, 3), ((128, 64), 4, 2), ((128, 32), 8, 3), ((128, 32), 8, 4),
                          ((64, 64), 4, 3), ((64, 32), 4, 3)],
    ("backward", "narrow"): [((32, 128, 128, 64), 4, 2), ((32, 128, 128, 64), 8, 3),
                             ((32, 128, 128, 64), 4, 4), ((32, 64, 64, 32), 4, 2), ((16, 64, 64, 16), 4, 3),
                             ((64, 64, 64, 64), 4, 3, _ONE_PASS), ((64, 64, 64, 64), 4, 4, _ONE_PASS)],
    ("backward", "wide"): [((64, 128, 128, 64), 8, 2), ((64, 128, 128, 32), 8, 2), ((32, 128, 128, 32), 8, 2),
                           ((32, 128, 128, 64), 8, 3), ((32, 64, 64, 32), 4, 2), ((64, 128, 128, 64), 8, 3),
                           ((64, 128, 128, 128), 8, 2)],
    # fp32 at head dim 128, with the column-major operand copies: in a sweep of backward configurations,
    # single-stage wide tiles beat the "wide" rows' best (NOTES.md). The single-stage forward tiles of
    # 4 warps were the fastest with TMA loads.
    ("forward", "widest"): [((128, 64), 8, 2), ((128, 32), 8, 3), ((128, 32), 8, 4), ((64, 32), 4, 2),
                            ((128, 64), 4, 1), ((128, 32), 4, 1)],
    ("backward", "widest"): [((32, 128, 128, 64), 8, 1), ((32, 128, 128, 32), 8, 1),
                             ((16, 128, 128, 32), 8, 2), ((32, 64, 64, 32), 4, 2)],
    # 16-bit rows of 80 or 96 columns (head dims 80 and 96, 2.7b's 80): narrow by bytes, but up to 1.5
    # times the columns the narrow rows were chosen at. The narrow and wide tiles that Triton 3.6
    # compiles for sm_90 without register spills at head dims 80 and 96 (two 4-warp narrow backward
    # tiles spilled there: NOTES.md), one one-pass form among them.
    ("forward", "mid"): [((64, 64), 4, 3), ((64, 64), 4, 2), ((128, 64), 8, 3), ((128, 64), 8, 4),
                         ((128, 128), 8, 3), ((64, 128), 4, 3), ((64, 128), 4, 2), ((128, 32), 8, 3)],
    ("backward", "mid"): [((32, 128, 128, 64), 8, 3), ((32, 64, 64, 32), 4, 2), ((16, 64, 64, 16), 4, 3),
                          ((64, 128, 128, 64), 8, 2), ((32, 128, 128, 32), 8, 2), ((64, 128, 128, 32), 8, 2),
                          ((64, 64, 64, 64), 4, 3, _ONE_PASS)],
    # More than 128 columns (head dims 136 to 256): not swept on a GPU. The tiles that Triton 3.6 compiles
    # for sm_90 within the shared memory of an H100 (227 KiB) and without register spills at head dims
    # 160, 192 and 256; in the backward 4 warps spilled, 8 warps did not (NOTES.md).
    ("forward", "deep"): [((128, 64), 8, 2), ((128, 32), 8, 2), ((64, 64), 4, 2), ((64, 32), 4, 2),
                          ((128, 64), 8, 3), ((64, 64), 8, 2)],
    ("backward", "deep"): [((32, 64, 64, 32), 8, 2), ((16, 64, 64, 16), 8, 2), ((32, 32, 32, 32), 8, 2),
                           ((16, 32, 32, 16), 8, 2), ((32, 32, 32, 32), 8, 3)],
    ("forward", "deepest"): [((64, 32), 8, 2), ((32, 32), 8, 2), ((64, 16), 8, 2), ((128, 16), 8, 2),
                             ((64, 16), 4, 2), ((32, 16), 4, 2)],
    ("backward", "deepest"): [((16, 32, 32, 16), 8, 2), ((16, 16, 16, 16), 8, 2), ((16, 16, 16, 16), 4, 2),
                              ((16, 32, 16, 16), 8, 2)],
}  # fmt: skip
# The CPU interpreter gets one small configuration: it is for correctness, and small tiles make
# short test sequences span several tiles, diagonal and ragged ones included.
_INTERPRETER = {"forward": ((32, 16), 4, 1), "backward": ((16, 32, 32, 16), 4, 1)}


def interpreting() -> bool:
    """Whether Triton runs the kernels in its CPU interpreter (TRITON_INTERPRET, read at each call)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


# Row width class of each candidate, by id: _prune reads it. Not an attribute of the Config, which
# must stay rebuildable as Config(**config.__dict__) for the autotuner's on-disk cache.
_WIDTH_OF: dict[int, str] = {}


def _config(
    kernel: str, blocks: tuple[int, ...], warps: int, stages: int, switches: dict[str, int] | None = None,
    *, width: str = "",
) -> triton.Config:  # fmt: skip
    kwargs = dict(zip(BLOCK_NAMES[kernel], blocks, strict=True)) | SWITCHES[kernel] | (switches or {})
    config = triton.Config(kwargs, num_warps=warps, num_stages=stages)
    if width:
        _WIDTH_OF[id(config)] = width
    return config


def _candidates(kernel: str) -> list[triton.Config]:
    if interpreting():
        return [_config(kernel, *_INTERPRETER[kernel])]
    return [_config(kernel, *row, width=width) for width in _WIDTHS for row in _CANDIDATES[kernel, width]]


_WIDTHS = ("narrow", "mid", "wide", "widest", "deep", "deepest")


def row_width(head_dim: int, element_size: int) -> str:
    """The candidates' class of a tile's rows, by the columns its parts hold (head_dim_parts): up to 128
    columns by bytes per row ('narrow' below 256, 'wide' below 512, 'widest' fp32 at 128 columns),
    16-bit rows of 80 or 96 columns 'mid'; more than 128 columns 'deep' (16-bit) or 'deepest' (fp32),
    where the fp32 accumulators of dK and dV alone take BLOCK_N1 x 2 x columns x 4 bytes of registers."""
    columns = sum(head_dim_parts(head_dim))
    if columns > 128:
        return "deepest" if element_size >= 4 else "deep"
    row_bytes = columns * element_size
    if row_bytes >= 256:
        return "widest" if row_bytes >= 512 else "wide"
    return "mid" if columns > 64 else "narrow"


def _prune(configs, named_args, **kwargs):
    """The candidates of the inputs' row width; fp32 keeps the two-pass backward, whose TF32 operands
    come from column-major copies (the one pass would read K along the reduced dim)."""
    element_size = named_args["Q"].element_size()
    width = row_width(kwargs.get("HEAD_DIM", named_args.get("HEAD_DIM")), element_size)
    return [
        c
        for c in configs
        if _WIDTH_OF.get(id(c), width) == width and not (element_size == 4 and c.kwargs.get("ATOMIC_DQ"))
    ]


def _check_blocks(kernel: str, blocks: dict[str, int]) -> None:
    """In the backward's dQ pass the diagonal must start on a key tile boundary (see backward_kernels);
    the forward and the dK/dV pass take any two tile sizes."""
    if kernel == "backward" and blocks["BLOCK_M2"] % blocks["BLOCK_N2"]:
        raise ValueError(f"{CONFIG_ENV}: the {kernel} entry needs BLOCK_M2 a multiple of BLOCK_N2")


@functools.lru_cache(maxsize=16)
def _parse_forced(raw: str) -> dict[str, dict[str, int]]:
    forced: dict[str, dict[str, int]] = {}
    for entry in filter(None, (e.strip() for e in raw.split(";"))):
        kernel, sep, values = entry.partition(":")
        kernel = kernel.strip()
        if not sep or kernel not in BLOCK_NAMES:
            raise ValueError(
                f"{CONFIG_ENV}: entry {entry!r} must start with one of {', '.join(BLOCK_NAMES)} and a colon, "
                f"e.g. forward:BLOCK_M=64,BLOCK_N=32,num_warps=4,num_stages=2"
            )
        switches = SWITCHES[kernel]
        accepted = (*BLOCK_NAMES[kernel], *_LAUNCH_NAMES)
        params = {"num_warps": 4, "num_stages": 2, **switches}
        for item in filter(None, (i.strip() for i in values.split(","))):
            key, eq, value = (part.strip() for part in item.partition("="))
            if eq and key in switches and value in ("0", "1"):
                params[key] = int(value)
                continue
            if not eq or key not in accepted or not value.isdigit() or int(value) == 0:
                raise ValueError(
                    f"{CONFIG_ENV}: {item!r} in the {kernel} entry must be NAME=positive integer "
                    f"with NAME one of {', '.join(accepted)}"
                    + "".join(f", or {name}=0 or 1" for name in switches)
                )
            params[key] = int(value)
        for block in BLOCK_NAMES[kernel]:
            size = params.get(block)
            if size is None or size < 16 or size & (size - 1):
                raise ValueError(f"{CONFIG_ENV}: the {kernel} entry needs {block}, a power of two >= 16")
        _check_blocks(kernel, params)
        forced[kernel] = params
    return forced


def forced_configs() -> dict[str, dict[str, int]]:
    """The configurations FLASH_TRITON_CONFIG forces, per kernel (read at every launch)."""
    return _parse_forced(os.environ.get(CONFIG_ENV, ""))


def forced_entry(kernel: str, params: dict[str, int]) -> str:
    """A forced configuration as a FLASH_TRITON_CONFIG entry, with every value in force (the defaults
    of those the variable did not name included), tiles first."""
    names = (*BLOCK_NAMES[kernel], *_LAUNCH_NAMES, *SWITCHES[kernel])
    return f"{kernel}:" + ",".join(f"{name}={params[name]}" for name in names)


# What Triton's OutOfResources counts (its `name`), in its units, and what in an entry lowers it.
_RESOURCES = {
    "shared memory": ("bytes of shared memory", "smaller BLOCK_* tiles or fewer num_stages"),
    "threads": ("threads per block", "fewer num_warps"),
    "tensor memory": ("columns of tensor memory", "smaller BLOCK_* tiles"),
}


def does_not_fit(
    kernel: str, params: dict[str, int], dtype, head_dim: int, gpu: str | None, error: OutOfResources
) -> ValueError:
    """The error for a forced configuration whose launch Triton refused (triton.runtime.errors.
    OutOfResources, raised when the compiled kernel is loaded: its `required` against the GPU's
    `limit`, for shared memory the driver's max_shared_mem): which entry, for which inputs, and what
    to change. The launcher raises it from Triton's error."""
    what, change = _RESOURCES.get(error.name, (error.name, "smaller BLOCK_* tiles, num_warps or num_stages"))
    return ValueError(
        f"{CONFIG_ENV}: the {kernel} entry {forced_entry(kernel, params)!r} does not fit {dtype} inputs at "
        f"head dim {head_dim} on {gpu or 'this GPU'}: it needs {error.required} {what}, over the GPU's "
        f"limit of {error.limit}. Force {change} in the {kernel} entry, or leave the {kernel} kernel out "
        f"of {CONFIG_ENV} to autotune it."
    )
