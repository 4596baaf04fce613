"""The suite under a launcher: what the launcher's variables say, and bad launches stopping early."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from parallel.launched import Launch, LaunchError, _topology, gpu_shortage, launch_from_environment

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = {
    "RANK": "3",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "node0",
    "MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "bench",
}


def test_no_launcher_variables_means_no_launch():
    assert launch_from_environment({"PATH": "/bin", "SLURM_PROCID": "0"}) is None


def test_torchrun_variables():
    assert launch_from_environment(TORCHRUN) == Launch("torchrun", 3, 4, 1, "1", "node0", 29500)


def test_srun_with_exported_rank_takes_slurms_local_id_and_node():
    env = {
        "RANK": "5",
        "WORLD_SIZE": "16",
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "5",
        "SLURM_NODEID": "0",
        "MASTER_ADDR": "gpu-a01",
        "MASTER_PORT": "29500",
    }
    assert launch_from_environment(env) == Launch("srun", 5, 16, 5, "0", "gpu-a01", 29500)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"MASTER_ADDR": None}, "MASTER_ADDR is not set: the address of rank 0's node"),
        ({"MASTER_ADDR": ""}, "MASTER_ADDR is not set"),
        ({"MASTER_PORT": None}, r"MASTER_PORT \(a free TCP port on MASTER_ADDR"),
        ({"LOCAL_RANK": None}, r"LOCAL_RANK \(srun: \$SLURM_LOCALID\) is not set"),
        ({"RANK": None}, "RANK is not set"),
        ({"RANK": "4"}, "RANK=4 is not below WORLD_SIZE=4"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0': an integer >= 1 is accepted"),
        ({"LOCAL_RANK": "one"}, "LOCAL_RANK='one': an integer >= 0 is accepted"),
    ],
)
def test_bad_launch_variables_name_what_is_wrong(change, message):
    env = {k: v for k, v in {**TORCHRUN, **change}.items() if v is not None}
    with pytest.raises(LaunchError, match=message):
        launch_from_environment(env)


def test_topology_counts_nodes_ranks_and_gpus_per_node():
    members = [{"node": n, "local_rank": r, "gpus": 8} for n in ("0", "1") for r in range(4)]
    assert _topology(members) == {"world_size": 8, "nodes": 2, "ranks_per_node": [4], "gpus_per_node": [8]}


def test_more_local_ranks_than_gpus_is_refused_naming_the_node():
    members = [{"node": "gpu-b", "local_rank": r, "gpus": 2} for r in range(4)]
    members += [{"node": "gpu-a", "local_rank": r, "gpus": 8} for r in range(4)]
    assert gpu_shortage(members) == (
        "node(s) gpu-b: 4 local ranks but 2 GPU(s) visible; NCCL needs a GPU per local rank (start at "
        "most that many ranks per node, e.g. torchrun --nproc-per-node)"
    )
    assert gpu_shortage(members[4:]) is None
    assert gpu_shortage([{"node": "cpu-a", "local_rank": r, "gpus": 0} for r in range(4)]) is None  # gloo


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"MASTER_ADDR": None}, "launcher: MASTER_ADDR is not set"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "launcher: RANK=2 is not below WORLD_SIZE=2"),
    ],
)
def test_a_bad_launch_stops_the_suite_before_anything_runs(change, message):
    env = {k: v for k, v in {**os.environ, **TORCHRUN, **change}.items() if v is not None}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "perf/test_allreduce.py",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert message in done.stderr
