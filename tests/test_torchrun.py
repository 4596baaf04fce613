"""The distributed benchmarks under torchrun: two "nodes" on this machine, four ranks with gloo, and
where two GPUs are visible a killed rank among two with NCCL.

Each test starts two torchrun agents with one c10d rendezvous, as two nodes of a cluster would, and
runs pytest in every rank. They check what a cluster run needs: the benchmarks measure across all
ranks, rank 0 alone stores results, and a rank that dies or raises ends the job with rank 0 naming it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from parallel.launch import free_port
from perf.storage import read_result

# Each test starts two agents and four ranks whose heartbeats have deadlines: alone under pytest-xdist
# where they would take every core (a CI machine's 2); beside the other tests on a larger machine.
SMALL_MACHINE_CORES = 8
pytestmark = [pytest.mark.alone] if (os.cpu_count() or 1) < SMALL_MACHINE_CORES else []

ROOT = Path(__file__).resolve().parent.parent
# Seconds a job of 4 ranks on 2 cores may take: importing torch and the suite in each rank is ~10 s.
JOB_TIMEOUT_S = 240
# A killed rank ends the job within this (after the ranks have started).
KILLED_RANK_S = 60
AGENT_HEAD_START_S = 2.0
DISTRIBUTED_FILES = ["perf/test_allreduce.py", "perf/test_collectives.py", "perf/test_data_parallel.py"]


def _torchrun(nodes: int, per_node: int, pytest_args: list[str], env: dict[str, str], timeout_s: float):
    """Start `nodes` torchrun agents that join one rendezvous; (exit codes, outputs, seconds). Once they
    end, no process of the job may be left."""
    port = free_port()
    # Every process of this job carries its id on its command line, so that the check for processes left
    # over sees this job's alone, whatever else runs beside it.
    job = f"perf-test-{uuid.uuid4().hex[:12]}"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc-per-node",
        str(per_node), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id",
        job, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.launch_faults", f"--junit-prefix={job}",
        *pytest_args,
    ]  # fmt: skip
    start = time.monotonic()
    agents = []
    for node in range(nodes):
        if node:
            # The first agent hosts the rendezvous store and takes node rank 0 (ranks 0 to per_node - 1),
            # as node0 does in a cluster: a rank killed on a later node leaves the store in place.
            time.sleep(AGENT_HEAD_START_S)
        agents.append(
            subprocess.Popen(
                command,
                cwd=ROOT,
                # Ranks on the CPU with gloo, as the tests expect, also on a machine with GPUs.
                env={**os.environ, "CUDA_VISIBLE_DEVICES": "", **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    outputs = []
    try:
        for agent in agents:
            outputs.append(agent.communicate(timeout=max(1.0, timeout_s - (time.monotonic() - start)))[0])
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
    seconds = time.monotonic() - start
    left = subprocess.run(["pgrep", "-f", job], capture_output=True, text=True).stdout.split()
    assert not left, f"processes of the job left running: {left}"
    return [a.returncode for a in agents], outputs, seconds


def _rank0(outputs: list[str]) -> str:
    (output,) = [o for o in outputs if "perf: launched by torchrun: rank 0 of" in o]
    return output


@pytest.mark.slow
def test_two_nodes_measure_across_all_ranks_and_only_rank_0_stores(tmp_path):
    storage = tmp_path / "results"
    codes, outputs, _ = _torchrun(
        2,
        2,
        [
            *DISTRIBUTED_FILES,
            # One size and one case of each collective; data parallel without the bucket sizes: what
            # shows that each runs across the nodes, at the least that takes on 2 cores.
            "--allreduce-sizes",
            "64K",
            "--collective-dtypes",
            "fp32",
            "-k",
            "not bucketed and not fsdp2",
            "--benchmark-max-time",
            "0.01",
            "--benchmark-min-rounds",
            "2",
            "--benchmark-storage",
            f"file://{storage}",
            "--benchmark-autosave",
        ],
        {},
        JOB_TIMEOUT_S,
    )
    assert codes == [0, 0], "\n".join(outputs)
    stored = list(storage.rglob("*.json"))
    assert len(stored) == 1, stored  # rank 0's, and no rank's but rank 0's
    result = read_result(stored[0])  # stored compact (perf/storage.py): as written
    launch = result["machine_info"]["perf"]["launch"]
    assert launch == {
        "launcher": "torchrun",
        "world_size": 4,
        "nodes": 2,
        "ranks_per_node": [2],
        "gpus_per_node": [0],
    }
    infos = {b["name"]: b["extra_info"] for b in result["benchmarks"]}
    assert "test_allreduce[gloo-world4-64KiB]" in infos
    assert "test_data_parallel_step[tiny-world4-torch_ddp]" in infos  # the launcher's world in its id
    collectives = {x["collective"] for x in infos.values() if "collective" in x}
    assert collectives == {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"}
    assert all(x["wrong_elements"] == 0 for x in infos.values() if "collective" in x)
    assert {x["variant"] for x in infos.values() if x.get("suite") == "data_parallel"} == {
        "single", "naive", "flat", "individual", "torch_ddp"
    }  # fmt: skip
    assert all(x["world_size"] == 4 for x in infos.values())


@pytest.mark.slow
def test_a_killed_rank_ends_the_job_and_rank_0_names_it():
    codes, outputs, seconds = _torchrun(
        2,
        2,
        ["perf/test_allreduce.py", "--allreduce-sizes", "64K", "--benchmark-max-time", "0.5"],
        {"PERF_TEST_FAULT": "kill:3:8"},
        JOB_TIMEOUT_S,
    )
    assert all(code != 0 for code in codes)
    assert seconds < KILLED_RANK_S + 20  # the agents' start and the ranks' imports come before it
    rank0 = _rank0(outputs)
    assert "rank 3 ended" in rank0 and "its heartbeat stopped" in rank0, rank0


@pytest.mark.slow
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs for NCCL"
)
def test_a_killed_rank_under_nccl_ends_the_job_and_rank_0_names_it(capsys):
    """The same on GPUs with NCCL, whose collectives wait on a dead peer rather than fail: rank 0's
    watchdog sees the heartbeat stop and aborts the group."""
    codes, outputs, seconds = _torchrun(
        1,
        2,
        ["perf/test_allreduce.py", "--allreduce-sizes", "64K", "--collective-backends", "nccl",
         "--benchmark-max-time", "0.5"],
        # Two GPUs; NVLink multicast off, as on the machines these run on (NCCL_NVLS_ENABLE).
        {"PERF_TEST_FAULT": "kill:1:8", "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_NVLS_ENABLE": "0"},
        JOB_TIMEOUT_S,
    )  # fmt: skip
    assert codes != [0]
    assert seconds < KILLED_RANK_S + 20
    rank0 = _rank0(outputs)
    assert "rank 1 ended" in rank0 and "its heartbeat stopped" in rank0, rank0
    with capsys.disabled():  # what the job took, for reports of this path on GPUs
        print(f"\nkilled rank under NCCL: the job ended after {seconds:.1f} s, rank 0 printed:")
        print("\n".join(line for line in rank0.splitlines() if "rank 1" in line or "heartbeat" in line))


@pytest.mark.slow
def test_a_rank_that_raises_ends_the_job_and_rank_0_shows_its_error():
    codes, outputs, _ = _torchrun(
        1,
        2,
        ["perf/test_allreduce.py", "--allreduce-sizes", "64K"],
        {"PERF_TEST_FAULT": "raise:1:5"},
        JOB_TIMEOUT_S,
    )
    assert codes == [1]
    rank0 = _rank0(outputs)
    assert (
        "rank 1 raised" in rank0
        and "ArithmeticError: deliberate fault in rank 1 at its all-reduce 5" in rank0
    )


def test_the_launcher_commands_in_the_docs_name_every_distributed_benchmark_file():
    text = (ROOT / "docs" / "distributed.md").read_text()
    commands = [line for line in text.splitlines() if "-m pytest" in line]
    assert len(commands) == 3  # torchrun on one node, on two, srun
    for command in commands:
        assert all(name in command for name in DISTRIBUTED_FILES), command
