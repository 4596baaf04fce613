"""The compile suite's parts on the CPU: the compiled() context (fresh, whole-graph, never silently
eager), the FX graph cache counts, and the end-of-run table."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter

from model.loss import cross_entropy
from model.transformer import TransformerLM
from perf.compile_report import SUITE, TITLE, table
from perf.compiling import compiled, graph_cache_lookups
from perf.workloads import lm_config, random_batch

_CONFIG = torch._dynamo.config
# torch 2.7 renamed these and kept the old names; 2.6 has only the old ones.
FAIL_SWITCH = (
    "fail_on_recompile_limit_hit"
    if hasattr(_CONFIG, "fail_on_recompile_limit_hit")
    else "fail_on_cache_limit_hit"
)
LIMIT = "recompile_limit" if hasattr(_CONFIG, "recompile_limit") else "cache_size_limit"


def _mix(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * y.cumsum(0) + x.softmax(-1)  # (N, M)


# --------------------------------------------------------------------------- compiled()
def test_compiled_agrees_with_eager():
    x, y = torch.randn(7, 5), torch.randn(7, 5)
    with compiled(_mix) as fast:
        torch.testing.assert_close(fast(x, y), _mix(x, y), rtol=1e-5, atol=1e-6)


def test_compiled_starts_and_ends_with_a_reset():
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    counter = CompileCounter()
    torch.compile(_mix, backend=counter)(x, y)
    assert counter.frame_count == 1
    with compiled(_mix, backend=counter) as fast:
        assert getattr(_CONFIG, FAIL_SWITCH) is True
        fast(x, y)  # without the reset on entry, the code compiled above would be reused
        assert counter.frame_count == 2
        fast(x, y)
        assert counter.frame_count == 2
    assert getattr(_CONFIG, FAIL_SWITCH) is False
    fast(x, y)  # the compiled code went with the block: called again, it compiles again
    assert counter.frame_count == 3
    torch._dynamo.reset()


def test_compiled_raises_rather_than_running_eagerly():
    # Limit 1: the second shape is past it, where dynamo would otherwise run the function eagerly.
    with _CONFIG.patch(**{LIMIT: 1}), compiled(_mix) as fast:
        fast(torch.randn(4, 3), torch.randn(4, 3))
        with pytest.raises(Exception, match="_limit_hit"):  # FailOnRecompileLimitHit in torch 2.7+
            fast(torch.randn(6, 3), torch.randn(6, 3))


def test_compiled_makes_a_graph_break_an_error():
    def printing(x: torch.Tensor) -> torch.Tensor:
        print("a graph break")
        return x + 1

    with compiled(printing) as fast, pytest.raises(torch._dynamo.exc.Unsupported):
        fast(torch.randn(3))
    with compiled(printing, fullgraph=False) as split:
        torch.testing.assert_close(split(torch.zeros(3)), torch.ones(3))


def test_compiled_rejects_what_is_not_callable():
    with pytest.raises(ValueError, match=r"fn_or_module must be a function or an nn\.Module; got Tensor"):
        with compiled(torch.randn(3)):
            pass


@pytest.mark.slow
def test_model_compiles_as_one_graph():
    """The tiny preset with SDPA, forward and backward, compiled with fullgraph=True as the benchmark
    compiles it: same loss and gradients as eager."""
    config = lm_config("tiny", 32)
    torch.manual_seed(0)
    model = TransformerLM(config, attention="sdpa")
    inputs, targets = random_batch(config, torch.device("cpu"))  # (B, T) each

    def loss_and_grads(lm: torch.nn.Module) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        loss = cross_entropy(lm(inputs), targets)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    eager_loss, eager_grads = loss_and_grads(model)
    counter = CompileCounter()
    with compiled(model, backend=counter) as fast:
        loss, grads = loss_and_grads(fast)
    assert counter.frame_count == 1  # one graph: a break would have raised under fullgraph=True
    with compiled(model) as fast:  # Inductor, as the benchmark compiles it
        inductor_loss, inductor_grads = loss_and_grads(fast)
    for got_loss, got_grads in ((loss, grads), (inductor_loss, inductor_grads)):
        torch.testing.assert_close(got_loss, eager_loss, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got_grads, eager_grads, rtol=1e-4, atol=1e-5)


def test_graph_cache_lookups_count_inside_the_block_only():
    inductor = torch._dynamo.utils.counters["inductor"]
    inductor["fxgraph_cache_hit"] += 5  # before the block: not counted
    with graph_cache_lookups() as lookups:
        inductor["fxgraph_cache_hit"] += 2
        inductor["fxgraph_cache_miss"] += 1
    inductor["fxgraph_cache_miss"] += 4  # after the block: not counted
    assert lookups == {"hits": 2, "misses": 1}


# --------------------------------------------------------------------------- table
def _result(variant: str, median_ms: float | None, mode: str = "forward", preset: str = "tiny", **extra):
    info = dict(
        suite=SUITE,
        variant=variant,
        mode=mode,
        preset=preset,
        precision="fp32",
        context=128,
        batch=4,
        compile_s=30.0 if variant == "compiled" else 0.5,
        graph_cache_hits=1 if variant == "compiled" else 0,
        graph_cache_misses=1 if variant == "compiled" else 0,
        median_ms=median_ms,
    )
    return {**info, **extra}


def test_table_sets_eager_beside_compiled():
    attention = {"provider": "naive", "mode": "forward", "median_ms": 1.0, "compile_s": 2.0}
    lines = table(
        [
            attention,
            _result("eager", 10.0),
            _result("compiled", 4.0),
            _result("eager", 30.0, mode="train_step"),
            _result("compiled", None, mode="train_step"),  # untimed (--benchmark-disable): not a result
            _result("compiled", 1.0, suite="attention"),  # another suite's: left out
        ]
    )
    assert len(lines) == 3
    header, forward, train_step = lines
    assert header.split() == "mode preset prec ctx eager ms compiled ms speedup compile s cached".split()
    assert forward.split() == ["forward", "tiny", "fp32", "128", "10.000", "4.000", "2.50x", "30.0", "1/2"]
    # Only eager was timed: no speedup and no compile figures.
    assert train_step.split() == ["train_step", "tiny", "fp32", "128", "30.000", "-", "-", "-", "-"]
    assert len({len(line) for line in lines}) == 1  # fixed width
    assert TITLE.count("\n") == 0


def test_table_is_empty_without_compile_results():
    assert table([]) == []
    assert table([{"provider": "naive", "median_ms": 1.0}, _result("eager", None)]) == []
