"""The compile suite's parts on the CPU: the compiled() context (fresh, whole-graph, never silently
eager), the FX graph cache counts, and the end-of-run table."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter

from model.loss import cross_entropy
from model.transformer import TransformerLM
from perf.tables.compiled import ATTENTION_TITLE, SUITE, TITLE, attention_table, table
from perf.workloads.compiling import compiled, graph_cache_lookups
from perf.workloads.lm import lm_config, random_batch
from tests.test_harness import _child_pytest

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


# --------------------------------------------------------------------------- the suite's axes
def _ids(proc) -> list[str]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line.split("::")[1] for line in proc.stdout.splitlines() if "::" in line]


def test_sdpa_cases_keep_their_names_and_flash_triton_adds_its_own(tmp_path):
    collect = ("perf/test_compile.py", "--collect-only", "--device=cpu")
    ids = _ids(_child_pytest(tmp_path, *collect, "--tier=default", "--presets=small"))
    # sdpa's ids are those of the stored baselines (the suite compiled sdpa alone).
    assert ids == [
        f"test_compile_gain[ctx512-small-bf16{attention}-{mode}-{variant}]"
        for attention in ("", "-flash_triton")
        for mode in ("forward", "train_step")
        for variant in ("eager", "compiled")
    ]
    # The full tier adds context 2048; --contexts replaces the suite's contexts as the others'.
    full = _ids(_child_pytest(tmp_path, *collect, "--tier=full"))
    assert {i.split("-")[0] for i in full} == {"test_compile_gain[ctx512", "test_compile_gain[ctx2048"}
    chosen = _ids(_child_pytest(tmp_path, *collect, "--tier=full", "--contexts=1024"))
    assert {i.split("-")[0] for i in chosen} == {"test_compile_gain[ctx1024"}


def test_flash_triton_skips_without_a_gpu(tmp_path):
    proc = _child_pytest(
        tmp_path,
        "perf/test_compile.py",
        "--tier=default",
        "--device=cpu",
        "--presets=tiny",
        "--precisions=fp32",
        "--contexts=32",
        "-k",
        "flash_triton",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (reason,) = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert reason.startswith("SKIPPED [4] perf/test_compile.py")  # every case, one reason
    assert reason.endswith("flash_triton: the Triton kernel needs a CUDA GPU; this run is on cpu")


# --------------------------------------------------------------------------- tables
def _result(
    variant: str,
    median_ms: float | None,
    mode: str = "forward",
    preset: str = "tiny",
    impl: str = "sdpa",
    **extra,
):
    info = dict(
        suite=SUITE,
        variant=variant,
        mode=mode,
        preset=preset,
        precision="fp32",
        context=128,
        batch=4,
        impl=impl,
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
    columns = "mode preset prec ctx attention eager ms compiled ms speedup compile s cached"
    assert header.split() == columns.split()
    case = ["forward", "tiny", "fp32", "128", "sdpa"]
    assert forward.split() == [*case, "10.000", "4.000", "2.50x", "30.0", "1/2"]
    # Only eager was timed: no speedup and no compile figures.
    assert train_step.split() == ["train_step", *case[1:], "30.000", "-", "-", "-", "-"]
    assert len({len(line) for line in lines}) == 1  # fixed width
    assert TITLE.count("\n") == 0


def test_table_has_a_row_per_attention_implementation():
    no_impl = _result("eager", 7.0, preset="mini")
    del no_impl["impl"]  # a result that does not say its attention: still a row
    lines = table(
        [
            _result("eager", 10.0),
            _result("compiled", 4.0),
            _result("eager", 8.0, impl="flash_triton"),
            _result("compiled", 2.0, impl="flash_triton"),
            no_impl,
        ]
    )
    assert [line.split()[4] for line in lines[1:]] == ["sdpa", "flash_triton", "-"]
    assert lines[2].split()[5:8] == ["8.000", "2.000", "4.00x"]
    assert len({len(line) for line in lines}) == 1


def test_table_is_empty_without_compile_results():
    assert table([]) == []
    assert table([{"provider": "naive", "median_ms": 1.0}, _result("eager", None)]) == []


def test_attention_table_sets_the_implementations_side_by_side():
    gpu = dict(gpu_ms=9.0, mfu=0.25)
    lines = attention_table(
        [
            _result("eager", 10.0, **gpu),
            _result("compiled", 4.0, gpu_ms=3.5, mfu=0.5),
            _result("eager", 8.0, impl="flash_triton", gpu_ms=6.0, mfu=0.3),
            _result("compiled", 5.0, impl="flash_triton"),  # no GPU time or MFU recorded
            _result("eager", 1.0, impl="naive"),  # neither of the two: left out
            _result("eager", 20.0, mode="train_step"),  # flash_triton did not run here (out of memory)
            _result("compiled", 12.0, mode="train_step", impl="flash_triton"),  # sdpa did not run here
            _result("compiled", None, mode="train_step"),  # untimed: not a result
        ]
    )
    header, *rows = lines
    assert header.split() == (
        "mode preset prec ctx variant sdpa ms GPU ms MFU flash_triton ms GPU ms MFU ratio GPU ratio".split()
    )
    case = ["tiny", "fp32", "128"]
    # sdpa's ms, GPU ms and MFU; flash_triton's; the ratios of the medians and of the GPU times.
    assert [row.split() for row in rows] == [
        ["forward", *case, "eager", "10.000", "9.000", "25.0%", "8.000", "6.000", "30.0%", "0.80", "0.67"],
        ["forward", *case, "compiled", "4.000", "3.500", "50.0%", "5.000", "-", "-", "1.25", "-"],
        ["train_step", *case, "eager", "20.000", "-", "-", "-", "-", "-", "-", "-"],
        ["train_step", *case, "compiled", "-", "-", "-", "12.000", "-", "-", "-", "-"],
    ]
    assert len({len(line) for line in lines}) == 1  # fixed width, missing figures included
    assert ATTENTION_TITLE.count("\n") == 0
    assert "flash_triton against sdpa" in ATTENTION_TITLE
    assert "below 1: flash_triton faster" in ATTENTION_TITLE


def test_attention_table_is_empty_without_the_triton_kernel():
    # The CPU tier compiles with sdpa alone: nothing to set beside it.
    assert attention_table([_result("eager", 10.0), _result("compiled", 4.0)]) == []
    assert attention_table([]) == []
    assert attention_table([_result("eager", None, impl="flash_triton")]) == []  # untimed
