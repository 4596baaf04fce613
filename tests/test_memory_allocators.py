"""The memory suite's allocator axis: each case's environment, the allocator's figures and what is
recorded of them, the measuring process's plumbing, and --allocators. The measuring itself needs the
CUDA caching allocator; on the CPU the benchmark skips before any process starts."""

from __future__ import annotations

import os
import pickle
import time

import pytest
import torch

from parallel.launch import RankFailed, run_ranks
from perf import harness
from perf.harness import TimingPolicy, Work
from perf.harness.gpu_time import GpuTime
from perf.workloads import memory
from perf.workloads.memory import (
    ALLOC_CONF,
    ALLOCATORS,
    GENERIC_ALLOC_CONF,
    AllocatorFigures,
    MemoryCase,
    MemoryRun,
    OutOfMemory,
    allocator_env,
    allocator_figures,
    measure_in_fresh_process,
    measure_peak_memory,
    memory_figures,
    setting_problem,
    timed_rounds,
    warm_up,
)
from tests.test_harness import _child_pytest

GIB = 2**30


def test_every_case_gets_exactly_its_setting():
    assert ALLOCATORS == ("default", "expandable_segments")
    assert allocator_env("default") == {ALLOC_CONF: None, GENERIC_ALLOC_CONF: None}
    assert allocator_env("expandable_segments") == {
        ALLOC_CONF: "expandable_segments:True",
        GENERIC_ALLOC_CONF: None,
    }
    with pytest.raises(ValueError, match="unknown value 'async'; accepted: default, expandable_segments"):
        allocator_env("async")


def test_allocator_figures_from_the_statistics():
    stats = {"num_alloc_retries": 3, "num_ooms": 0, "allocated_bytes.all.peak": 5 * GIB}
    figures = allocator_figures(2 * GIB, 5 * GIB, 6 * GIB, stats)
    assert figures == AllocatorFigures(2 * GIB, 5 * GIB, 6 * GIB, alloc_retries=3, ooms=0)
    assert figures.fragmentation_bytes == GIB
    # A torch whose statistics lack a count: None, not a zero that was never measured.
    assert allocator_figures(0, 1, 1, {}).alloc_retries is None
    with pytest.raises(ValueError, match="peak allocated 2 must lie within"):
        allocator_figures(0, 2, 1, stats)


def _run(**changes) -> MemoryRun:
    fields = {
        "durations_s": (0.2, 0.22, 0.21),
        "iterations": 2,
        "work": Work(flops=1e12, tokens=4096, precision="bf16"),
        "figures": AllocatorFigures(4 * GIB, 6 * GIB, 6.5 * GIB, alloc_retries=0, ooms=0),
        "gpu": GpuTime((90.0, 91.0, 92.0), 1400.0, 0.4),
        "host_s": 0.03,
        "parameters": 2**26,
        "batch_size": 8,
        "allocator_conf": "expandable_segments:True",
        "expandable_segments": True,
    }
    return MemoryRun(**{**fields, **changes})


def test_recorded_figures_of_a_run():
    info = memory_figures(_run())
    assert info == {
        "allocator_conf": "expandable_segments:True",
        "expandable_segments": True,
        "warmup_steps": memory.WARMUP_STEPS,
        "resident_bytes": 4 * GIB,
        "peak_memory_bytes": 6 * GIB,
        "peak_reserved_bytes": 6.5 * GIB,
        "fragmentation_bytes": 0.5 * GIB,
        "activation_peak_bytes": 2 * GIB,
        "alloc_retries": 0,
        "ooms": 0,
        "host_ms": pytest.approx(30.0),
    }
    untimed = memory_figures(_run(host_s=None, memory_snapshot="/tmp/snapshots/case.pickle"))
    assert "host_ms" not in untimed and untimed["memory_snapshot"] == "/tmp/snapshots/case.pickle"


def test_expandable_segments_asked_for_and_not_used_is_named():
    assert setting_problem("expandable_segments", _run()) is None
    # Where torch does not say, nothing is assumed.
    assert setting_problem("expandable_segments", _run(expandable_segments=None)) is None
    assert "did not use expandable segments" in setting_problem(
        "expandable_segments", _run(expandable_segments=False)
    )
    # torch's own default may use them one day: the default case records what it used.
    assert setting_problem("default", _run(allocator_conf=None, expandable_segments=True)) is None


def test_rounds_and_warm_up_are_timed_between_synchronizations():
    calls = []

    def step():
        calls.append(None)
        time.sleep(0.002)

    durations = timed_rounds(step, rounds=3, iterations=2)
    assert len(durations) == 3 and len(calls) == 6 and min(durations) >= 0.004
    assert warm_up(step, 2) >= 0.002 and len(calls) == 8
    assert warm_up(step, 0) is None
    with pytest.raises(ValueError, match="rounds and iterations must be >= 1"):
        timed_rounds(step, rounds=0, iterations=1)


def test_the_measuring_process_needs_the_cuda_allocator():
    with pytest.raises(ValueError, match="peak memory comes from the CUDA caching allocator; got device cpu"):
        measure_peak_memory(0, 1, "cpu", MemoryCase("forward", "tiny", "fp32", 32, "own"), None, None)


def test_a_run_crosses_processes_by_pickling():
    assert pickle.loads(pickle.dumps(_run())) == _run()
    assert pickle.loads(pickle.dumps(OutOfMemory("CUDA out of memory"))) == OutOfMemory("CUDA out of memory")


def test_the_spawned_process_gets_the_case_and_its_errors_come_back(tmp_path):
    # The whole path through a real spawned process, stopped by the check that needs a GPU.
    with pytest.raises(RankFailed, match="peak memory comes from the CUDA caching allocator; got device cpu"):
        measure_in_fresh_process(
            "expandable_segments",
            MemoryCase("forward", "tiny", "fp32", 32, "own"),
            device=torch.device("cpu"),
            policy=TimingPolicy(min_round_s=0.005, budget_s=0.1, min_rounds=3),
            snapshot=(tmp_path, "test_peak_memory[case]"),
        )


def test_one_fresh_process_per_case_with_its_setting_and_its_out_of_memory_raised_here(monkeypatch):
    spawned = []

    def fake_run_ranks(fn, world_size, **kwargs):
        spawned.append((fn, world_size, kwargs))
        return [OutOfMemory("CUDA out of memory. Tried to allocate 20.00 GiB; note")]

    monkeypatch.setattr(memory, "run_ranks", fake_run_ranks)
    policy = TimingPolicy(min_round_s=0.02, budget_s=1.0, min_rounds=5)
    with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 20\.00 GiB") as err:
        measure_in_fresh_process(
            "default",
            MemoryCase("train_step", "2.7b", "bf16", 512, "torch_fused"),
            device=torch.device("cuda", 1),
            policy=policy,
        )
    # The suite's out-of-memory skip recognizes it, and says in which process it happened.
    assert harness.out_of_memory_in(err.value) is err.value
    assert err.value.__notes__ == [f"measured in a fresh process with {ALLOC_CONF} unset"]
    ((fn, world_size, kwargs),) = spawned
    assert fn is measure_peak_memory and world_size == 1 and kwargs["backend"] == "gloo"
    assert kwargs["env"] == allocator_env("default")
    case = MemoryCase("train_step", "2.7b", "bf16", 512, "torch_fused")
    assert kwargs["args"] == ("cuda:1", case, policy, None)
    assert kwargs["timeout_s"] == memory.MEASURE_TIMEOUT_S + 3.0


def test_an_out_of_memory_keeps_its_first_line_and_notes():
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB.\nmore")
    oom.add_note("one score matrix is 8.00 GiB")
    wrapped = RuntimeError("backend='inductor' raised: OutOfMemoryError")
    wrapped.add_note("while autotuning")
    assert memory._oom_message(oom, wrapped) == (
        "CUDA out of memory. Tried to allocate 8.00 GiB.; one score matrix is 8.00 GiB; while autotuning"
    )


def _settings_in_rank(rank: int, world_size: int) -> tuple[str | None, str]:
    conf = os.environ.get(ALLOC_CONF)
    memory._check_settings_parsed(conf)  # raises where the settings were read before `env` was set
    return conf, torch._C._accelerator_getAllocatorSettings()


@pytest.mark.skipif(
    not hasattr(torch._C, "_accelerator_getAllocatorSettings"), reason="this torch does not report them"
)
@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_the_spawned_process_reads_exactly_its_setting(monkeypatch, allocator):
    # Whatever this process has set is replaced there: both names torch reads.
    monkeypatch.setenv(ALLOC_CONF, "max_split_size_mb:512")
    monkeypatch.setenv(GENERIC_ALLOC_CONF, "max_split_size_mb:256")
    ((conf, parsed),) = run_ranks(_settings_in_rank, 1, env=allocator_env(allocator), timeout_s=120)
    assert conf == memory.ALLOCATOR_CONF[allocator]
    assert parsed == (conf or "")


@pytest.mark.skipif(
    not hasattr(torch._C, "_accelerator_getAllocatorSettings"), reason="this torch does not report them"
)
def test_settings_read_before_the_environment_was_set_fail_the_case():
    parsed = torch._C._accelerator_getAllocatorSettings()  # read once in this process, now at the latest
    memory._check_settings_parsed(parsed or None)
    other = "max_split_size_mb:512" if parsed != "max_split_size_mb:512" else "max_split_size_mb:1024"
    with pytest.raises(RuntimeError, match="they were read before it was set"):
        memory._check_settings_parsed(other)


# --------------------------------------------------------------------------- the benchmark's cases
def _ids(proc) -> list[str]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line.split("::")[1] for line in proc.stdout.splitlines() if "::" in line]


def test_the_allocator_is_the_last_part_of_the_ids_and_both_run_by_default(tmp_path):
    ids = _ids(_child_pytest(tmp_path, "perf/test_memory.py", "--collect-only", "--contexts=128"))
    assert ids == [
        "test_peak_memory[fp32-tiny-ctx128-forward-default]",
        "test_peak_memory[fp32-tiny-ctx128-forward-expandable_segments]",
        "test_peak_memory[fp32-tiny-ctx128-train_step-default]",
        "test_peak_memory[fp32-tiny-ctx128-train_step-expandable_segments]",
    ]


def test_allocators_option_selects(tmp_path):
    only = "--allocators=expandable_segments"
    proc = _child_pytest(tmp_path, "perf/test_memory.py", "--collect-only", "--contexts=128", only)
    assert _ids(proc) == [
        "test_peak_memory[fp32-tiny-ctx128-forward-expandable_segments]",
        "test_peak_memory[fp32-tiny-ctx128-train_step-expandable_segments]",
    ]
    assert "2 deselected" in proc.stdout


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "--allocators=default,cudaMallocAsync",
            "--allocators: unknown value 'cudaMallocAsync'; accepted: default, expandable_segments",
        ),
        ("--allocators=,", "--allocators: empty; accepted: default, expandable_segments"),
    ],
)
def test_an_unknown_allocator_stops_the_run_before_anything_runs(tmp_path, option, message):
    proc = _child_pytest(tmp_path, "perf/test_memory.py", option)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage-error exit code
    assert message in proc.stderr
    assert "passed" not in proc.stdout and "skipped" not in proc.stdout


def test_on_the_cpu_every_case_skips_with_the_reason(tmp_path):
    proc = _child_pytest(tmp_path, "perf/test_memory.py", "--benchmark-disable")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 skipped" in proc.stdout  # the cpu tier's one context, two modes, two allocators
    reason = "needs a CUDA device: peak memory comes from the CUDA caching allocator's statistics"
    assert reason in proc.stdout
