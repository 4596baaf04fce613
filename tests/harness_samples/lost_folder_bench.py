"""A benchmark run in a child pytest by tests/test_save_collisions.py: it measures, then makes each folder
named in LOSE a link loop, as a storage that went away leaves it: the results cannot be stored where asked."""

import os
import shutil
from pathlib import Path

import torch

from perf.harness import Work


def test_measured_then_folders_lost(bench):
    a = torch.randn(32, 32)
    bench.run(lambda: a @ a, work=Work(flops=2 * 32**3), warmup_steps=1)
    for folder in os.environ["LOSE"].split(os.pathsep):
        shutil.rmtree(folder, ignore_errors=True)
        Path(folder).symlink_to(folder)
