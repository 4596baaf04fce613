"""The memory suite's allocator settings by name: PYTORCH_CUDA_ALLOC_CONF for each, None where the variable
is removed (perf/workloads/memory.py runs every case in a process with exactly that setting)."""

from __future__ import annotations

from perf.cases.declare import Axis, Suite

ALLOCATOR_CONF: dict[str, str | None] = {
    "default": None,
    "expandable_segments": "expandable_segments:True",
}
ALLOCATORS = tuple(ALLOCATOR_CONF)  # in the tables' order

SUITES = (
    # Peak memory (perf/test_memory.py): presets (None: the largest one whose training state fits the
    # device) and context lengths; its precision is the model's axis, its allocators --allocators'.
    Suite(
        "memory",
        axes=(
            Axis(
                "memory_presets",
                param="memory_preset",
                values={"cpu": ("tiny",)},
                default=None,
                set_by="presets",
            ),
            Axis(
                "memory_contexts",
                param="memory_context",
                id_prefix="ctx",
                values={
                    "cpu": (64,),
                    "pr": (512,),
                    "default": (128, 256, 512),
                    "full": (128, 256, 512, 1024),
                },
                set_by="contexts",
            ),
        ),
        cells={"pr": ("test_memory.py::test_peak_memory[bf16-*-ctx512-train_step-default]",)},
    ),
)
