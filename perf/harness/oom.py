"""Out-of-memory errors as the suite treats them: found inside the errors that wrap them, and annotated
with what the benchmark was allocating, so that the skip they become names it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def out_of_memory_in(err: BaseException) -> BaseException | None:
    """The out-of-memory error that `err` is, or was raised from, or None.

    torch.compile reports errors of its compilation (autotuning allocates) as its own exceptions
    with the original as their cause. The CPU allocator's failure is a plain RuntimeError.
    """
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, torch.OutOfMemoryError) or (
            isinstance(current, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(current)
        ):
            return current
        current = current.__cause__ or current.__context__
    return None


@contextlib.contextmanager
def oom_note(note: str) -> Iterator[None]:
    """Attach `note` to an out-of-memory error raised inside; the skip it becomes says it."""
    try:
        yield
    except Exception as err:
        if out_of_memory_in(err) is not None:
            err.add_note(note)
        raise
