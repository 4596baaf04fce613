"""The model suites' cases by name: which model implementation a step runs, how its kernels are
launched, and which attention the compile suite compiles the model with."""

from __future__ import annotations

from model.config import PRESETS
from model.optim import OPTIMIZER_IMPLS
from model.precision import PRECISIONS
from perf.cases.declare import Axis, Derived, Suite, cell

# The project's model with each attention implementation (flash_triton: the project's Triton kernel,
# CUDA only), and the plain-PyTorch reference model (torch.nn modules and
# F.scaled_dot_product_attention) that it is measured against.
MODEL_IMPLS = ("naive", "sdpa", "flash_triton", "reference")
# Every implementation but the Triton kernel's, which runs on the CPU only in Triton's interpreter.
CPU_MODEL_IMPLS = ("naive", "sdpa", "reference")
# The compile suite's attention implementations: PyTorch's fused kernel, and the project's Triton
# kernel (registered operators, so the model compiles whole with it: one opaque node per call).
COMPILE_ATTENTIONS = ("sdpa", "flash_triton")
# How a step's kernels are launched: one by one from Python, or by replaying a captured CUDA graph.
LAUNCHES = ("eager", "cuda_graph")


# --------------------------------------------------------------------------- the suite's declaration
CONTEXTS = (128, 256, 512, 1024)
WARMUPS = (0, 1, 2, 5)


def compared_impls(tier) -> tuple[str, ...]:
    """Implementations measured against the reference model: the naive attention is left out, it is
    the readable definition, not a contender."""
    return tuple(i for i in tier.impls if i not in ("reference", "naive"))


# The model's axes: other suites' benchmarks take presets, precisions and contexts too (shared: first
# in every id). The end-to-end steps (perf/test_end_to_end.py) run them all.
def header(tier) -> str:
    """The model's axes a run takes, said after collection."""
    return (
        f"presets {','.join(tier.presets)}; precisions {','.join(tier.precisions)}; "
        f"contexts {','.join(map(str, tier.contexts))}; warm-ups {','.join(map(str, tier.warmups))}"
    )


SUITES = (
    Suite(
        "end_to_end",
        header=header,
        shared=True,
        axes=(
            Axis(
                "impls",
                values={"cpu": CPU_MODEL_IMPLS, "pr": ("sdpa", "flash_triton")},
                default=MODEL_IMPLS,
                help="comma-separated models: naive, sdpa, flash_triton, reference",
                choices=MODEL_IMPLS,
            ),
            Derived("compared_impls", compared_impls),
            Axis(
                "presets",
                left_out_note="presets {values}",
                # cpu: one preset is enough to check that every step runs (NOTES.md: the CPU tier in five
                # minutes; mini's fp16 step alone took 108 s on two cores).
                values={
                    "cpu": ("tiny",),
                    "pr": ("small", "large"),
                    "full": ("small", "medium", "large", "xl", "2.7b"),
                },
                default=("small", "large", "2.7b"),
                help="comma-separated model presets, replacing the tier's",
                choices=tuple(PRESETS),
            ),
            Axis(
                "precisions",
                left_out_note="model steps and attention not in {values} (--precisions adds it)",
                # bf16 matmuls are emulated on most CPUs: selectable there, not run by default.
                values={"cpu": ("fp32",)},
                default=("fp32", "bf16"),
                help="comma-separated precisions: fp32, bf16, fp16",
                choices=PRECISIONS,
            ),
            Axis(
                "contexts",
                id_prefix="ctx",
                values={"cpu": (64,), "full": CONTEXTS},
                default=(512,),
                help="comma-separated context lengths, e.g. 128,256,512,1024",
                read="ints",
            ),
            Axis(
                "warmups",
                id_prefix="warm",
                values={"cpu": (1,), "full": WARMUPS},
                default=(2,),
                help="comma-separated warm-up step counts, e.g. 0,1,2,5",
                read="ints",
                minimum=0,
            ),
            # Steps launched op by op (eager) and/or replayed from a captured CUDA graph.
            Axis(
                "launches",
                unnamed="eager",
                values={"full": LAUNCHES},
                default=("eager",),
                help="comma-separated end-to-end step launches: eager (op by op), cuda_graph (the whole step "
                "captured once and replayed)",
                choices=LAUNCHES,
            ),
            # torch's fused AdamW: one pass over parameters, gradients and states (the foreach version
            # took almost half of a 2.7b bf16 step: NOTES.md, Measurements behind comments in the code).
            Axis(
                "optimizer",
                argument=False,
                default="torch_fused",
                help="train_step AdamW: own, torch (foreach), torch_fused (default)",
                read="name",
                choices=OPTIMIZER_IMPLS,
            ),
        ),
        cells={
            # The training step of a small and a large preset, fp32 and bf16, SDPA and the Triton kernel.
            "pr": (cell("test_end_to_end.py::test_train_step"),),
        },
    ),
    # torch.compile's gain (perf/test_compile.py): eager against compiled, whole model. Compiling a 2.7b step
    # takes long (NOTES.md: The Triton attention in the 2.7b step): the default tier compiles the smallest
    # and the largest preset, in bf16.
    Suite(
        "compile",
        axes=(
            Axis(
                "compile_contexts",
                id_prefix="ctx",
                # 2048 adds a context where attention takes a larger share of the step (NOTES.md: comments).
                values={"cpu": (64,), "full": (512, 2048)},
                default=(512,),
                set_by="contexts",
            ),
            Axis(
                "compile_presets",
                values={
                    "cpu": ("tiny",),
                    "pr": ("2.7b",),
                    "default": ("small", "2.7b"),
                    "full": ("small", "medium", "large", "xl", "2.7b"),
                },
                set_by="presets",
            ),
            Axis(
                "compile_precisions",
                values={"cpu": ("fp32",), "pr": ("bf16",), "default": ("bf16",), "full": ("fp32", "bf16")},
                set_by="precisions",
            ),
            Axis(
                "compile_attentions",
                has_option=False,
                unnamed="sdpa",
                values={"default": COMPILE_ATTENTIONS, "full": COMPILE_ATTENTIONS},
                default=("sdpa",),
            ),
        ),
        cells={
            "pr": (cell("test_compile.py::test_compile_gain", compile_mode="train_step"),)
        },  # 2.7b bf16, eager and compiled
    ),
    # The training step in each precision (perf/test_mixed_precision.py), per preset.
    Suite(
        "mixed_precision",
        axes=(Axis("step_precisions", default=PRECISIONS, set_by="precisions"),),
        # fp16 with its gradient scaler (fp32 and bf16 steps are the end-to-end cells), and autocast alone.
        cells={
            "pr": (
                cell(
                    "test_mixed_precision.py::test_train_step_precision",
                    preset="small",
                    context=512,
                    step_precision="fp16",
                ),
                cell("test_mixed_precision.py::test_toy_autocast", step_precision="bf16"),
            )
        },
    ),
    # CUDA graph replay against eager launches (perf/test_cuda_graphs.py).
    Suite(
        "cuda_graphs",
        axes=(
            Axis(
                "graph_presets",
                values={"cpu": ("tiny",), "full": ("small", "medium")},
                default=("small",),
                set_by="presets",
            ),
        ),
        cells={"pr": (cell("test_cuda_graphs.py::test_train_step_cuda_graph", precision="bf16"),)},
    ),
)
