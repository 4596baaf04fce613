"""A CUDA allocator snapshot of one call, for `--memory-snapshot DIR`."""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from perf.harness.ranges import nvtx_range

# Allocation events kept while one call is recorded; a 2.7b training step makes about 20,000.
SNAPSHOT_MAX_ENTRIES = 200_000


def write_memory_snapshot(fn: Callable[[], Any], folder: Path, name: str) -> Path:
    """Record the CUDA allocator's history over one call of `fn`; write `<name>.pickle` and `<name>.html`.

    The pickle opens in https://pytorch.org/memory_viz; the HTML is the same timeline from torch's
    own visualizer, readable offline. Tensors allocated before the call appear without stacks.
    Returns the path of the pickle.
    """
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "benchmark"
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=SNAPSHOT_MAX_ENTRIES)
    try:
        with nvtx_range("memory_snapshot"):
            fn()
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    pickle_path = folder / f"{stem}.pickle"
    pickle_path.write_bytes(pickle.dumps(snapshot))
    (folder / f"{stem}.html").write_text(torch.cuda._memory_viz.trace_plot(snapshot))
    return pickle_path
