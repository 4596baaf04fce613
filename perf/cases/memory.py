"""The memory suite's allocator settings by name: PYTORCH_CUDA_ALLOC_CONF for each, None where the variable
is removed (perf/workloads/memory.py runs every case in a process with exactly that setting)."""

from __future__ import annotations

from model.config import PRESETS
from perf.cases.declare import Axis, Suite, cell

ALLOCATOR_CONF: dict[str, str | None] = {
    "default": None,
    "expandable_segments": "expandable_segments:True",
}
ALLOCATORS = tuple(ALLOCATOR_CONF)  # in the tables' order

# fp32 weights, gradients and two AdamW states: bytes per parameter a training step keeps.
TRAINING_BYTES_PER_PARAMETER = 16
# Share of device memory the training state may take, leaving the rest to activations at context 512.
TRAINING_STATE_SHARE = 0.7


def largest_fitting_preset(device_bytes: int) -> str:
    """The largest preset whose training state (weights, gradients, AdamW) fits the device."""
    fitting = [
        name
        for name, config in PRESETS.items()
        if TRAINING_BYTES_PER_PARAMETER * config.num_parameters() <= TRAINING_STATE_SHARE * device_bytes
    ]
    if not fitting:
        return min(PRESETS, key=lambda name: PRESETS[name].num_parameters())
    return max(fitting, key=lambda name: PRESETS[name].num_parameters())


def fit(tier, device_bytes: int) -> dict:
    """The tier's memory presets where it leaves them to the device (None): the largest that fits."""
    return (
        {} if tier.memory_presets is not None else {"memory_presets": (largest_fitting_preset(device_bytes),)}
    )


SUITES = (
    # Peak memory (perf/test_memory.py): presets (None: the largest one whose training state fits the
    # device) and context lengths; its precision is the model's axis, its allocators --allocators'.
    Suite(
        "memory",
        fit=fit,
        axes=(
            Axis(
                "memory_presets",
                values={"cpu": ("tiny",)},
                default=None,
                set_by="presets",
            ),
            Axis(
                "allocators",
                argument=False,
                filters="allocator",  # perf/test_memory.py parametrizes its cases by allocator itself
                default=ALLOCATORS,
                help=f"comma-separated CUDA caching allocator settings of the memory suite: "
                f"{', '.join(ALLOCATORS)}",
                choices=ALLOCATORS,
            ),
            Axis(
                "memory_contexts",
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
        cells={
            "pr": (
                cell(
                    "test_memory.py::test_peak_memory",
                    precision="bf16",
                    memory_context=512,
                    memory_mode="train_step",
                    allocator="default",
                ),
            )
        },
    ),
)
