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


def freeze_long_lived() -> None:
    """Put what is alive now (the imported torch, triton and suite: about 300,000 objects) out of the
    collector's reach, so that each release_cached_memory scans only what was made since: a full scan
    costs 0.15-0.2 s, at every benchmark's teardown. What is frozen is never scanned until thaw() (its
    reference counts still free it)."""
    gc.collect()
    gc.freeze()


def thaw() -> None:
    """Give the frozen objects back to the collector (before the interpreter's own last collection)."""
    gc.unfreeze()
