"""Named phases of a benchmark: NVTX ranges for nsys, and profiler ranges of the same names."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

NVTX_DOMAIN = "perf"
TIMED_RANGE = "timed"  # wraps every timed region: `nsys profile -c nvtx -p timed@perf` skips warm-up

try:
    import nvtx as _nvtx
except ImportError:  # the package has no wheel for some platforms; ranges then reach only torch's profiler
    _nvtx = None
NVTX_AVAILABLE = _nvtx is not None


@contextlib.contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """One named phase: an NVTX range in the suite's domain and a profiler range of the same name.

    The NVTX range is what nsys shows; the `record_function` range lets CPU tests check the
    names through `torch.profiler` without a GPU or nsys.
    """
    with torch.profiler.record_function(name):
        if _nvtx is None:
            yield
            return
        _nvtx.push_range(message=name, domain=NVTX_DOMAIN)
        try:
            yield
        finally:
            _nvtx.pop_range(domain=NVTX_DOMAIN)
