"""Test-wide setup.

Triton reads TRITON_INTERPRET when @triton.jit decorates a kernel, i.e. when a kernels module is first
imported. Without a GPU the kernels can only run in Triton's interpreter, so it is switched on here,
before any test module imports them, unless the caller set it (as `make test` does).
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
