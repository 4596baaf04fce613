"""The memory suite's allocator settings by name: PYTORCH_CUDA_ALLOC_CONF for each, None where the variable
is removed (perf/workloads/memory.py runs every case in a process with exactly that setting)."""

from __future__ import annotations

ALLOCATOR_CONF: dict[str, str | None] = {
    "default": None,
    "expandable_segments": "expandable_segments:True",
}
ALLOCATORS = tuple(ALLOCATOR_CONF)  # in the tables' order
