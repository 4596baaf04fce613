"""The attention benchmarks' parts on the CPU: shape registry, FLOP factors, providers, steps, the
end-of-run table, and the options and results of a child pytest run of perf/test_attention.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend

from kernels.attention_inputs import attention_flops
from perf import harness
from perf.cases.attention import (
    ATTENTION_MODES,
    FIXED_TOKENS,
    FIXED_WIDTH,
    HOST_BOUND,
    SWEEPS,
    AttentionShape,
    select_shapes,
)
from perf.tables.attention import attention_table, cudnn_table, dtype_cost_table, host_cost_table
from perf.tiers import TIERS
from perf.workloads.attention import (
    ProviderUnavailable,
    _sdpa,
    attention_workload,
    open_provider,
    relevant_reasons,
)
from tests.test_harness import SAMPLES, _child_pytest, _profiled_names

CPU = torch.device("cpu")
SMALL = AttentionShape(batch=2, heads=3, seq=32, head_dim=16, causal=True)


# --------------------------------------------------------------------------- shapes and FLOPs
def test_fixed_tokens_sweep():
    cells = SWEEPS["fixed_tokens"]
    assert len(cells) == len(set(cells)) == 24
    assert all(s.batch * s.seq == FIXED_TOKENS == 16384 for s in cells)
    # Heads x head dim is 2048 where the head dim divides it, else the nearest whole number of heads.
    assert FIXED_WIDTH == 2048
    assert {(s.head_dim, s.heads) for s in cells} == {(64, 32), (80, 26), (96, 21), (128, 16)}
    assert {(s.head_dim, s.causal, s.seq) for s in cells} == {
        (d, c, t) for d in (64, 80, 96, 128) for c in (True, False) for t in (1024, 4096, 16384)
    }


def test_tiers_choose_the_fixed_tokens_head_dims():
    def head_dims(tier: str, sweep: str = "fixed_tokens") -> list[int]:
        shapes = TIERS[tier].with_overrides(attention_sweeps=(sweep,)).attention_shapes
        return sorted({s.head_dim for s in shapes})

    assert head_dims("default") == [64, 80, 128]
    assert head_dims("full") == [64, 80, 96, 128]
    # The default tier's filter leaves the scaling sweep whole where --attention-sweeps chooses it.
    assert head_dims("default", "scaling") == [16, 32, 64, 128]
    # The cells at head dims 64 and 128 are the ones they were: 32 and 16 heads, stored baselines' names.
    names = {str(s) for s in TIERS["default"].attention_shapes}
    assert {"b16-h32-s1024-d64-causal", "b1-h16-s16384-d128-full", "b4-h26-s4096-d80-causal"} <= names
    # 18 fixed-tokens cells and the host-bound call.
    assert len(names) == 19 and "b1-h2-s128-d64-causal" in names


def test_scaling_sweep():
    cells = SWEEPS["scaling"]
    assert len(cells) == len(set(cells)) == 40
    assert all(s.batch == 1 and s.heads == 16 and s.causal for s in cells)
    assert sorted({s.seq for s in cells}) == [2**p for p in range(7, 17)]
    assert sorted({s.head_dim for s in cells}) == [16, 32, 64, 128]


def test_select_shapes_filters_in_order_and_once():
    both = select_shapes(["scaling", "scaling"], seqs=[256, 128], head_dims=[32])
    assert [str(s) for s in both] == ["b1-h16-s128-d32-causal", "b1-h16-s256-d32-causal"]
    assert select_shapes(["fixed_tokens"], seqs=[128]) == ()
    # b1-h16-s16384-d128-causal is in both sweeps: the full tier runs it once.
    assert len(select_shapes(["scaling", "fixed_tokens"])) == 40 + 24 - 1
    # The naive attention's sweep: batch 8 of one head, 4 head dims x 5 lengths.
    naive = SWEEPS["naive_scaling"]
    assert len(naive) == 20 and {(s.batch, s.heads, s.causal) for s in naive} == {(8, 1, True)}


@pytest.mark.parametrize(("mode", "factor"), [("forward", 1.0), ("backward", 2.5), ("forward_backward", 3.5)])
@pytest.mark.parametrize("causal", [True, False])
def test_flops_per_mode(mode, factor, causal):
    shape = AttentionShape(batch=4, heads=8, seq=1024, head_dim=64, causal=causal)
    forward = attention_flops(4, 8, 1024, 1024, 64, causal)
    assert forward == 4 * 4 * 8 * 1024 * 1024 * 64 / (2 if causal else 1)
    assert shape.flops(mode) == pytest.approx(factor * forward)
    assert shape.tokens == 4096


def test_score_bytes():
    assert AttentionShape(1, 16, 65536, 64, True).score_bytes(2) == 16 * 65536 * 65536 * 2  # 128 GiB in bf16


# --------------------------------------------------------------------------- providers and steps
@pytest.mark.parametrize(("name", "reason"), [("flash_triton", "needs a CUDA GPU"), ("sdpa_cudnn", "CUDA")])
def test_gpu_only_providers_say_why(name, reason):
    with (
        pytest.raises(ProviderUnavailable, match=reason),
        open_provider(name, SMALL, torch.float32, CPU, False),
    ):
        pass


def test_unsupported_sdpa_backend_is_unavailable_with_pytorchs_reason():
    # The CPU has no memory-efficient kernel: the probe call fails the way fp32 fails on the GPU's flash.
    with pytest.raises(ProviderUnavailable, match=r"torch\.float32 forward: No"):
        with _sdpa(SDPBackend.EFFICIENT_ATTENTION)(SMALL, torch.float32, CPU, False):
            pass


def test_skip_reasons_keep_what_concerns_the_chosen_backend():
    # The warnings torch 2.11 gave on an H100 for fp32 inputs with only the flash backend enabled.
    messages = [
        "Memory efficient kernel not used because: (Triggered internally at /pytorch/sdp_utils.cpp:900.)",
        "Memory Efficient attention has been runtime disabled. (Triggered internally at /pytorch/x.cpp:1.)",
        "Flash attention kernel not used because:",
        "Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: float, "
        "Key dtype: float, and Value dtype: float instead. (Triggered internally at /pytorch/y.cpp:2.)",
    ]
    assert relevant_reasons(messages) == [
        "Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: float, "
        "Key dtype: float, and Value dtype: float instead."
    ]


def test_unknown_provider():
    with pytest.raises(ValueError, match="accepted: naive, naive_compiled"):
        open_provider("fast", SMALL, torch.float32, CPU, False)


@pytest.mark.parametrize("name", ["naive", "naive_compiled", "sdpa_flash"])
def test_cpu_providers_agree_with_naive(name):
    q, k, v = (torch.randn(2, 3, 32, 16) for _ in range(3))
    with open_provider("naive", SMALL, torch.float32, CPU, False) as naive:
        expected = naive(q, k, v)
    with open_provider(name, SMALL, torch.float32, CPU, False) as attention:
        torch.testing.assert_close(attention(q, k, v), expected, rtol=1e-5, atol=1e-5)


def test_compiled_provider_raises_rather_than_running_eagerly():
    qkv = [torch.randn(1, 2, 16, 16) for _ in range(3)]
    longer = [torch.randn(1, 2, 32, 16) for _ in range(3)]
    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # torch 2.6
    # Limit 1: the second shape is past it, where dynamo would otherwise run the function eagerly.
    with config.patch(**{limit: 1}):
        with open_provider("naive_compiled", SMALL, torch.float32, CPU, False) as compiled:
            compiled(*qkv)
            with pytest.raises(Exception, match="_limit_hit"):  # FailOnRecompileLimitHit in torch 2.7+
                compiled(*longer)


@pytest.mark.parametrize(
    ("mode", "phases"),
    [("forward", ["forward"]), ("backward", ["backward"]), ("forward_backward", ["backward", "forward"])],
)
def test_step_phases_and_work(mode, phases):
    with open_provider("naive", SMALL, torch.float32, CPU, mode != "forward") as naive:
        workload = attention_workload(naive, mode, SMALL, "fp32", CPU)
        workload.setup()
        names = _profiled_names(workload.step)
        workload.step()
    assert sorted({n for n in names if n in ("forward", "backward")}) == phases
    assert workload.work.flops == SMALL.flops(mode) and workload.work.tokens == 64
    assert workload.work.precision == "fp32"


def test_backward_step_returns_gradients_instead_of_accumulating():
    inputs = []

    def recording(q, k, v):
        inputs.extend((q, k, v))
        return (q * k + v).sum(dim=-1, keepdim=True).expand_as(q)

    workload = attention_workload(recording, "backward", SMALL, "bf16", CPU)
    workload.setup()
    workload.step()
    workload.step()  # the retained graph replays
    assert all(t.requires_grad and t.grad is None and t.dtype == torch.bfloat16 for t in inputs)
    forward_only = attention_workload(recording, "forward", SMALL, "fp32", CPU)
    forward_only.step()
    assert not any(t.requires_grad for t in inputs[3:])


def test_unknown_mode():
    with pytest.raises(ValueError, match="accepted: forward, backward, forward_backward"):
        attention_workload(lambda q, k, v: q, "sideways", SMALL, "fp32", CPU)


# --------------------------------------------------------------------------- out of memory
def test_out_of_memory_found_through_wrapping_and_noted():
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 128.00 GiB")
    with pytest.raises(RuntimeError) as caught, harness.oom_note("the score matrix needs 128 GiB"):
        raise RuntimeError("backend compiler failed") from oom
    assert harness.out_of_memory_in(caught.value) is oom
    assert caught.value.__notes__ == ["the score matrix needs 128 GiB"]
    assert harness.out_of_memory_in(RuntimeError("shape mismatch")) is None
    cpu = RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory")
    assert harness.out_of_memory_in(cpu) is cpu
    with pytest.raises(ValueError) as other, harness.oom_note("not for this one"):
        raise ValueError("bad shape")
    assert not hasattr(other.value, "__notes__")


# --------------------------------------------------------------------------- the end-of-run table
GPU_BOUND = AttentionShape(16, 16, 1024, 128, True)


def _record(
    provider: str,
    median_ms: float,
    mode: str = "forward",
    shape: AttentionShape = GPU_BOUND,
) -> dict:
    seconds = median_ms / 1e3
    return {
        "provider": provider,
        "mode": mode,
        "batch": shape.batch,
        "heads": shape.heads,
        "seq": shape.seq,
        "head_dim": shape.head_dim,
        "causal": shape.causal,
        "dtype": "bfloat16",
        "median_ms": median_ms,
        "tflops": shape.flops(mode) / seconds / 1e12,
        "compile_s": 1.5,
    }


def test_ratio_table_sets_providers_against_sdpa_flash():
    records = [
        _record("naive", 8.0),
        _record("sdpa_flash", 2.0),
        _record("flash_triton", 1.6) | {"gpu_ms": 1.5, "gpu_busy_share": 1.5 / 1.6},
        _record("flash_triton", 4.0, mode="backward"),  # no sdpa_flash in its group: no ratio
        {"median_ms": 5.0, "tokens_per_s": 1.0},  # an end-to-end result: not in the table
    ]
    lines = attention_table(records)
    assert lines[1] == "forward b16-h16-s1024-d128-causal bfloat16"
    rows = {line.split()[0]: line.split() for line in lines[2:5]}
    assert list(rows) == ["naive", "flash_triton", "sdpa_flash"]  # the registry's order
    assert (
        rows["flash_triton"][5] == "1.25x"
        and rows["naive"][5] == "0.25x"
        and rows["sdpa_flash"][5] == "1.00x"
    )
    tflops = _record("sdpa_flash", 2.0)["tflops"]  # 34.4: printed to three significant digits
    assert float(rows["sdpa_flash"][4]) == pytest.approx(tflops, rel=2e-3)
    assert rows["flash_triton"][2:4] == ["1.500", "94%"]  # GPU ms and busy share beside the median
    assert rows["naive"][2:4] == ["-", "-"]  # none recorded
    assert lines[5] == "backward b16-h16-s1024-d128-causal bfloat16"
    assert lines[6].split()[5] == "-"
    assert len(lines) == 7


def test_dtype_cost_table_divides_fp32_by_bf16_per_provider_and_shape():
    records = [
        _record("flash_triton", 2.0),
        _record("flash_triton", 5.0) | {"dtype": "float32"},
        _record("sdpa_flash", 1.0),  # no fp32 run: no row
        _record("flash_triton", 3.0, mode="backward") | {"dtype": "float32"},  # no bf16 run: no row
    ]
    lines = dtype_cost_table(records)
    assert len(lines) == 2
    assert lines[1].split() == [
        "forward", "b16-h16-s1024-d128-causal", "flash_triton", "2.000", "5.000", "2.50x"
    ]  # fmt: skip
    assert dtype_cost_table(records[2:]) == []


def test_host_cost_table_sets_microseconds_per_call_against_cudnn_at_host_bound_shapes():
    tiny = HOST_BOUND[0]
    records = [
        _record("sdpa_cudnn", 0.040, shape=tiny) | {"gpu_ms": 0.008, "gpu_busy_share": 0.2},
        _record("flash_triton", 0.100, shape=tiny),
        _record("flash_triton", 0.500, mode="forward_backward", shape=tiny),  # no cuDNN beside it
        _record("sdpa_cudnn", 2.0),  # a shape the GPU is busy with: not in this table
    ]
    lines = host_cost_table(records)
    assert len(lines) == 4
    rows = [row.split() for row in lines[1:]]
    assert rows[0] == ["forward", str(tiny), "bfloat16", "flash_triton", "100.0", "-", "-", "2.50x"]
    assert rows[1] == ["forward", str(tiny), "bfloat16", "sdpa_cudnn", "40.0", "8.0", "20%", "1.00x"]
    assert rows[2][3:] == ["flash_triton", "500.0", "-", "-", "-"]
    assert host_cost_table(records[3:]) == []


def test_cudnn_table_sets_the_kernel_against_cudnn_per_length_at_the_fixed_tokens_shapes():
    short, long = (AttentionShape(16384 // s, 21, s, 96, False) for s in (1024, 4096))
    records = [
        _record("flash_triton", 1.0, shape=short) | {"gpu_ms": 0.8},
        _record("sdpa_cudnn", 1.1, shape=short) | {"gpu_ms": 0.72},
        _record("sdpa_flash", 0.5, shape=short) | {"gpu_ms": 0.1},  # not cuDNN: not in this table
        _record("flash_triton", 2.0, shape=long) | {"gpu_ms": 2.0},
        _record("sdpa_cudnn", 2.5, shape=long) | {"gpu_ms": 2.2},
        _record("flash_triton", 4.0, shape=long, mode="backward"),  # a CPU-like run: wall time only
        _record("sdpa_cudnn", 3.0, shape=long, mode="backward"),
        _record("flash_triton", 1.0, shape=HOST_BOUND[0]) | {"gpu_ms": 0.05},  # not a fixed_tokens shape
        _record("sdpa_cudnn", 0.5, shape=HOST_BOUND[0]) | {"gpu_ms": 0.01},
    ]
    lines = cudnn_table(records)
    assert lines[0].split() == ["mode", "dtype", "d", "mask", "1024", "4096"]
    assert lines[1].split() == ["forward", "bfloat16", "96", "full", "0.90", "/", "1.10", "1.10", "/", "1.25"]
    assert lines[2].split() == ["backward", "bfloat16", "96", "full", "-", "-", "/", "0.75"]
    assert lines[3] == f"lowest by GPU time: 0.90 at forward {short} bfloat16"
    assert len(lines) == 4
    assert cudnn_table(records[2:3] + records[7:]) == []


def test_ratio_table_empty_without_attention_results():
    disabled = _record("naive", 1.0) | {"median_ms": None}  # --benchmark-disable: nothing timed
    assert attention_table([{"median_ms": 1.0}, disabled]) == []


# --------------------------------------------------------------------------- a child pytest run
@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--seqs=128,abc", "--seqs: 'abc' is not an integer >= 1"),
        (
            "--attention-providers=naive,flash_cuda",
            "--attention-providers: unknown value 'flash_cuda'; accepted: naive, naive_compiled, "
            "flash_pytorch_compiled, flash_triton, sdpa_flash, sdpa_cudnn",
        ),
        (
            "--attention-sweeps=huge",
            "--attention-sweeps: unknown value 'huge'; accepted: scaling, fixed_tokens, naive_scaling",
        ),
        (
            "--seqs=100",
            "--seqs/--head-dims: sweeps scaling, naive_scaling have no shape with seq in 100 (--seqs) and "
            "head dim in 32 (tier 'cpu'); their seqs: 128, 256,",
        ),
        (
            "--head-dims=48",
            "--seqs/--head-dims: sweeps scaling, naive_scaling have no shape with seq in 128 (tier 'cpu') "
            "and head dim in 48 (--head-dims); their seqs: 128, 256,",
        ),
    ],
)
def test_bad_attention_options_fail_before_anything_runs(tmp_path, option, message):
    proc = _child_pytest(tmp_path, SAMPLES, "--tier=cpu", option)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage-error exit code
    assert message in proc.stderr


def test_options_choose_the_benchmarks(tmp_path):
    proc = _child_pytest(
        tmp_path,
        "perf/test_attention.py",
        "--collect-only",
        "--tier=default",
        "--device=cpu",
        "--attention-providers=sdpa_flash,naive",
        "--attention-modes=backward",
        "--seqs=4096",
        "--head-dims=128",
        "--precisions=bf16",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [line.split("::")[1] for line in proc.stdout.splitlines() if "::" in line]
    assert ids == [
        f"test_attention[bf16-backward-b4-h16-s4096-d128-{masking}-{provider}]"
        for masking in ("causal", "full")
        for provider in ("sdpa_flash", "naive")
    ]


@pytest.fixture(scope="module")
def attention_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("attention")
    out = tmp / "result.json"
    proc = _child_pytest(
        tmp,
        "perf/test_attention.py",
        "--tier=cpu",
        "--attention-providers=naive,sdpa_flash,flash_triton,sdpa_cudnn",
        "--seqs=128",
        "--attention-modes=forward,backward",
        "--benchmark-max-time=0.02",
        f"--benchmark-json={out}",
        f"--benchmark-storage=file://{tmp}/store",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, {b["name"]: b for b in json.loads(Path(out).read_text())["benchmarks"]}


def test_results_carry_the_configuration_and_figures(attention_run):
    _, results = attention_run
    assert sorted(results) == [
        f"test_attention[fp32-{mode}-b1-h16-s128-d32-causal-{p}]"
        for mode in ("backward", "forward")
        for p in ("naive", "sdpa_flash")
    ]
    shape = AttentionShape(1, 16, 128, 32, True)
    for bench in results.values():
        info = bench["extra_info"]
        assert bench["group"] == f"attention {info['mode']} {shape} fp32"
        assert {k: info[k] for k in ("batch", "heads", "seq", "head_dim", "causal", "dtype")} == {
            "batch": 1,
            "heads": 16,
            "seq": 128,
            "head_dim": 32,
            "causal": True,
            "dtype": "float32",
        }
        assert info["flops_per_call"] == shape.flops(info["mode"]) and info["tokens_per_call"] == 128
        assert info["precision"] == "fp32" and info["compile_s"] > 0 and info["tflops"] > 0


def test_gpu_providers_skip_with_reasons_and_the_table_is_printed(attention_run):
    proc, _ = attention_run
    assert "flash_triton: the Triton kernel needs a CUDA GPU; this run is on cpu" in proc.stdout
    assert "sdpa_cudnn: cuDNN attention needs a CUDA GPU; this run is on cpu" in proc.stdout
    assert "attention: median, GPU busy time and share, TFLOP/s, speed relative to sdpa_flash" in proc.stdout
    assert "forward b1-h16-s128-d32-causal float32" in proc.stdout
    assert ATTENTION_MODES[1] + " b1-h16-s128-d32-causal float32" in proc.stdout
