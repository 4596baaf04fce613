"""torch.compile for benchmarks: compiled afresh for each one, and never silently run eagerly."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch


@contextlib.contextmanager
def compiled(
    fn_or_module: Callable[..., Any], *, fullgraph: bool = True, **compile_kwargs: Any
) -> Iterator[Callable[..., Any]]:
    """`with compiled(fn) as fast:` yields torch.compile(fn, fullgraph=..., **compile_kwargs).

    Dynamo keeps compiled code per function for the whole process and, after recompile_limit (8)
    recompiles of one function, runs it eagerly without an error; a sweep of shapes reaches that
    limit. A reset on entry and on exit gives each benchmark its own compile, and
    fail_on_recompile_limit_hit turns the silent fallback into an error while the block is open.
    fullgraph=True makes a graph break an error rather than a function that is half eager; the
    model (model/transformer.py) compiles as one graph. The compile itself happens on the first
    call, which is where a benchmark should time it. The blocks do not nest: entering one drops
    the code compiled in any other.
    """
    if not callable(fn_or_module):
        raise ValueError(
            f"fn_or_module must be a function or an nn.Module; got {type(fn_or_module).__name__}"
        )
    config = torch._dynamo.config
    # torch 2.7 renamed the switch and kept the old name; 2.6 has only the old one.
    fail = (
        "fail_on_recompile_limit_hit"
        if hasattr(config, "fail_on_recompile_limit_hit")
        else "fail_on_cache_limit_hit"
    )
    torch._dynamo.reset()
    try:
        with config.patch(**{fail: True}):
            yield torch.compile(fn_or_module, fullgraph=fullgraph, **compile_kwargs)
    finally:
        torch._dynamo.reset()  # the compiled code goes with the block


@contextlib.contextmanager
def graph_cache_lookups() -> Iterator[dict[str, int]]:
    """Counts Inductor's on-disk FX graph cache lookups inside the block: {'hits': h, 'misses': m}.

    The dict is filled when the block exits. A hit loads a compiled graph instead of compiling it:
    the tiny preset's forward compiled in 21 s with a cold cache and in 4.5 to 6.6 s from the cache (CPU),
    so a compile time says little without them. torch._dynamo.reset() leaves the disk cache alone.
    """

    def totals() -> tuple[int, int]:
        # Imported here, not at the top: importing torch._dynamo sets up Triton's runtime, which
        # then ignores a TRITON_INTERPRET set later (tests/conftest.py sets it for CPU-only runs).
        from torch._dynamo.utils import counters

        inductor = counters["inductor"]  # looked up each time: counters.clear() drops the entry
        return inductor["fxgraph_cache_hit"], inductor["fxgraph_cache_miss"]

    hits, misses = totals()
    lookups = {"hits": 0, "misses": 0}
    try:
        yield lookups
    finally:
        hits_after, misses_after = totals()
        lookups.update(hits=hits_after - hits, misses=misses_after - misses)
