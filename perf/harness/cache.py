"""Giving the CUDA caching allocator's memory back between measurements."""

from __future__ import annotations

import gc

import torch


def release_cached_memory() -> None:
    """Collect what only reference cycles keep alive (the data-parallel wrappers' gradient hooks hold
    their module in one), then return the caching allocator's free blocks to the GPU: the next
    measurement, or another process, starts with the GPU's memory."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
