"""Which shapes each tier runs, end-to-end and attention: the one place benchmarks draw their axes from.

A tier is a set of values per axis, chosen among the suites' cases (perf/cases/); every benchmark
takes the axes it names (perf/plugin/parametrize.py). Command-line options replace a tier's values
axis by axis (perf/plugin/options.py).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from model.config import PRESETS
from model.optim import OPTIMIZER_IMPLS
from model.precision import PRECISIONS
from perf.cases.attention import ATTENTION_MODES, PROVIDER_NAMES, SWEEPS, AttentionShape, select_shapes
from perf.cases.collectives import ALLREDUCE_BACKENDS, COLLECTIVES, DTYPES, PLACEMENTS, CollectiveCase, cases
from perf.cases.model import COMPILE_ATTENTIONS, CPU_MODEL_IMPLS, LAUNCHES, MODEL_IMPLS

CONTEXTS = (128, 256, 512, 1024)
WARMUPS = (0, 1, 2, 5)


@functools.cache
def cell_pattern(pattern: str) -> re.Pattern[str]:
    """A Tier.cells pattern as a regular expression: `*` is any text, every other character itself."""
    return re.compile(".*".join(map(re.escape, pattern.split("*"))))


@dataclass(frozen=True)
class Tier:
    name: str
    presets: tuple[str, ...]
    precisions: tuple[str, ...]
    contexts: tuple[int, ...]
    warmups: tuple[int, ...]
    impls: tuple[str, ...]
    attention_providers: tuple[str, ...]
    attention_modes: tuple[str, ...]
    attention_sweeps: tuple[str, ...]
    # Filters on the sweeps' shapes; None keeps every sequence length (head dim) of the sweeps.
    seqs: tuple[int, ...] | None = None
    head_dims: tuple[int, ...] | None = None
    # End-to-end steps launched op by op (eager) and/or replayed from a captured CUDA graph.
    launches: tuple[str, ...] = ("eager",)
    # torch's fused AdamW: one pass over parameters, gradients and states. The foreach version
    # took 104 ms of a 228 ms 2.7b bf16 step on an H100 (step minus forward+backward).
    optimizer: str = "torch_fused"
    # The naive attention's scaling sweep (perf/test_attention_scaling.py), eager and compiled,
    # filtered like the attention sweeps (--seqs and --head-dims set both filters).
    scaling_seqs: tuple[int, ...] | None = None
    scaling_head_dims: tuple[int, ...] | None = None
    scaling_precisions: tuple[str, ...] = ("fp32",)
    # torch.compile gains (perf/test_compile.py): presets, precisions, the model's attention
    # implementations and context lengths compiled, whole model.
    compile_presets: tuple[str, ...] = ()
    compile_precisions: tuple[str, ...] = ()
    compile_attentions: tuple[str, ...] = ("sdpa",)
    compile_contexts: tuple[int, ...] = (512,)
    # Mixed precision (perf/test_mixed_precision.py): the training step in each precision, per preset.
    step_precisions: tuple[str, ...] = PRECISIONS
    # Square matmul sizes n of n x n @ n x n (perf/test_matmul.py).
    matmul_sizes: tuple[int, ...] = ()
    # Peak memory (perf/test_memory.py): presets (None: the largest one whose training state fits
    # the device) and context lengths.
    memory_presets: tuple[str, ...] | None = None
    memory_contexts: tuple[int, ...] = ()
    # CUDA graph replay against eager launches (perf/test_cuda_graphs.py).
    graph_presets: tuple[str, ...] = ()
    # Host-to-device copies (perf/test_transfer.py): bytes per copy.
    transfer_sizes: tuple[int, ...] = ()
    # Collectives (perf/test_allreduce.py, perf/test_collectives.py): message bytes of every
    # collective, process counts (those beyond the GPUs present skip for nccl), backends, and the
    # collectives, dtypes and placements measured (perf/cases/collectives.py).
    allreduce_sizes: tuple[int, ...] = ()
    world_sizes: tuple[int, ...] = (2,)
    allreduce_backends: tuple[str, ...] = ("gloo",)
    collectives: tuple[str, ...] = tuple(COLLECTIVES)
    collective_dtypes: tuple[str, ...] = tuple(DTYPES)
    placements: tuple[str, ...] = PLACEMENTS
    # Data parallel training (perf/test_data_parallel.py): preset, and bucket sizes of DDPBucketed.
    dp_presets: tuple[str, ...] = ()
    bucket_sizes_mb: tuple[float, ...] = ()
    # The cells the tier keeps of its axes' grid: patterns of node ids under perf/ in which `*` stands
    # for any text and brackets are plain ("test_matmul.py::test_matmul[*]"); None keeps every cell.
    # A benchmark none of them matches does not run in the tier.
    cells: tuple[str, ...] | None = None

    @property
    def compared_impls(self) -> tuple[str, ...]:
        """Implementations measured against the reference model: the naive attention is left out,
        it is the readable definition, not a contender."""
        return tuple(i for i in self.impls if i not in ("reference", "naive"))

    @property
    def attention_shapes(self) -> tuple[AttentionShape, ...]:
        return select_shapes(self.attention_sweeps, self.seqs, self.head_dims)

    @property
    def scaling_shapes(self) -> tuple[AttentionShape, ...]:
        return select_shapes(("naive_scaling",), self.scaling_seqs, self.scaling_head_dims)

    @property
    def collective_run_cases(self) -> tuple[CollectiveCase, ...]:
        """Every collective case one run of ranks measures: each placement a collective offers."""
        return cases(self.collectives, self.collective_dtypes, self.placements)

    @property
    def allreduce_dtypes(self) -> tuple[str, ...]:
        """test_allreduce's dtypes: all-reduce exists in place only, under the names its baselines have."""
        return tuple(c.dtype for c in self.collective_run_cases if c.collective == "all_reduce")

    @property
    def collective_cases(self) -> tuple[CollectiveCase, ...]:
        """test_collective's cases: every collective case but all-reduce's."""
        return tuple(c for c in self.collective_run_cases if c.collective != "all_reduce")

    def keeps(self, node_id: str) -> bool:
        """Whether the tier runs the benchmark of this node id ('perf/test_x.py::test_y[ids]')."""
        if self.cells is None:
            return True
        relative = node_id.removeprefix("perf/")
        return any(cell_pattern(pattern).fullmatch(relative) for pattern in self.cells)

    def with_overrides(self, **axes: tuple | str | None) -> Tier:
        return replace(self, **{k: v for k, v in axes.items() if v is not None})


TIERS: dict[str, Tier] = {
    "cpu": Tier(
        name="cpu",
        presets=("tiny", "mini"),
        # bf16 matmuls are emulated on most CPUs (10x slower than fp32 seen here): selectable only.
        precisions=("fp32",),
        contexts=(128,),
        warmups=(1,),
        impls=CPU_MODEL_IMPLS,
        # 12 benchmarks, about a minute on two cores with a cold inductor cache, nearly all of it
        # torch.compile: FlashAttentionPyTorch's unrolled key loop took 11 s (forward) and 18 s
        # (forward+backward) to compile at seq 128, 40-63 s at seq 256.
        attention_providers=("naive", "naive_compiled", "flash_pytorch_compiled", "sdpa_flash"),
        attention_modes=ATTENTION_MODES,
        attention_sweeps=("scaling",),
        seqs=(128,),
        head_dims=(32,),
        scaling_seqs=(256, 1024),
        scaling_head_dims=(16, 64),
        compile_presets=("tiny",),
        compile_precisions=("fp32",),
        compile_contexts=(128,),
        # bf16 and fp16 autocast run on the CPU, emulated: slow, but the step is tiny.
        step_precisions=PRECISIONS,
        matmul_sizes=(512,),
        memory_presets=("tiny",),
        memory_contexts=(64, 128),
        graph_presets=("tiny",),
        transfer_sizes=(2**20,),
        # gloo on a laptop: 2 and 4 processes, every collective, dtype and placement (14 cases). 10 MiB
        # is near gloo's bandwidth already (fp32 all-reduce, 2 ranks on 2 cores: 0.90 GB/s against
        # 0.98 at 100 MiB); 100 MiB took 53 s of a 75 s run with --benchmark-disable.
        allreduce_sizes=(2**20, 10 * 2**20),
        world_sizes=(2, 4),
        allreduce_backends=("gloo",),
        dp_presets=("tiny",),
        bucket_sizes_mb=(0.01, 0.1, 1.0),
    ),
    # What a pull request's gate runs: the cells of each suite that tell the most per second, every
    # one of them a cell of the default tier, so that a default-tier baseline judges it (README: Tiers).
    "pr": Tier(
        name="pr",
        presets=("small", "large"),
        precisions=("fp32", "bf16"),
        contexts=(512,),
        warmups=(2,),
        impls=("sdpa", "flash_triton"),
        attention_providers=("flash_triton", "sdpa_flash", "sdpa_cudnn"),
        attention_modes=("forward_backward",),
        attention_sweeps=("fixed_tokens",),
        head_dims=(64, 80, 128),
        scaling_seqs=(4096,),
        scaling_head_dims=(64,),
        compile_presets=("2.7b",),
        compile_precisions=("bf16",),
        compile_attentions=("sdpa",),
        compile_contexts=(512,),
        step_precisions=PRECISIONS,
        matmul_sizes=(8192,),
        memory_contexts=(512,),
        graph_presets=("small",),
        transfer_sizes=(2**26,),
        allreduce_sizes=(2**30,),
        world_sizes=(2,),
        allreduce_backends=("nccl",),
        collective_dtypes=("bf16",),
        dp_presets=("xl",),
        cells=(
            # The training step of a small and a large preset, fp32 and bf16, SDPA and the Triton kernel.
            "test_end_to_end.py::test_train_step[*]",
            # The 2.7b bf16 training step, eager and compiled.
            "test_compile.py::test_compile_gain[*-train_step-*]",
            # Attention forward+backward in bf16, causal, at every fixed-tokens seq and head dims 64, 80, 128.
            "test_attention.py::test_attention[bf16-forward_backward-*-causal-*]",
            # The naive attention's score matrix at one size, eager and compiled.
            "test_attention_scaling.py::test_naive_attention_scaling[*]",
            # Every matmul math mode at one size.
            "test_matmul.py::test_matmul[*]",
            # fp16 with its gradient scaler (fp32 and bf16 steps are the end-to-end cells), and autocast alone.
            "test_mixed_precision.py::test_train_step_precision[small-ctx512-fp16]",
            "test_mixed_precision.py::test_toy_autocast[bf16]",
            "test_memory.py::test_peak_memory[bf16-*-ctx512-train_step-default]",
            "test_cuda_graphs.py::test_train_step_cuda_graph[bf16-*]",
            "test_transfer.py::test_host_to_device[64MiB-pinned]",
            "test_transfer.py::test_copy_compute_overlap[*]",
            "test_timing_agreement.py::test_timing_agreement[matmul_bf16_1ms]",
            # Where two GPUs are visible: every collective at 1 GiB in bf16, and data parallel xl.
            "test_allreduce.py::test_allreduce[*]",
            "test_collectives.py::test_collective[*-out_of_place-*]",
            "test_collectives.py::test_collective[broadcast-*]",
            "test_data_parallel.py::test_data_parallel_step[*-torch_ddp]",
            "test_data_parallel.py::test_data_parallel_step[*-fsdp2]",
            "test_data_parallel.py::test_sharded_optimizer_memory[*]",
        ),
    ),
    "default": Tier(
        name="default",
        presets=("small", "large", "2.7b"),
        precisions=("fp32", "bf16"),
        contexts=(512,),
        warmups=(2,),
        impls=MODEL_IMPLS,
        # The contenders and eager naive attention as the reference point. The compiled providers
        # compile once per shape and mode (48 graphs here, FlashAttentionPyTorch's up to minutes
        # each): they are in the full tier, or chosen with --attention-providers.
        attention_providers=("naive", "flash_triton", "sdpa_flash", "sdpa_cudnn"),
        attention_modes=ATTENTION_MODES,
        attention_sweeps=("fixed_tokens",),
        # Every head dim of the sweeps but 96, which the full tier adds: fixed_tokens runs 64, 80 (the
        # 2.7b preset's, 2560 / 32) and 128, and the scaling sweep keeps 16 and 32 where
        # --attention-sweeps chooses it.
        head_dims=(16, 32, 64, 80, 128),
        # Compiling a 2.7b training step takes about a minute: the default tier compiles the
        # smallest and the largest preset, in bf16, where compiling gains the most.
        compile_presets=("small", "2.7b"),
        compile_precisions=("bf16",),
        compile_attentions=COMPILE_ATTENTIONS,
        compile_contexts=(512,),
        step_precisions=PRECISIONS,
        matmul_sizes=(8192,),
        memory_contexts=(128, 256, 512),
        graph_presets=("small",),
        transfer_sizes=(2**20, 2**26, 2**30),
        allreduce_sizes=(2**20, 10 * 2**20, 100 * 2**20, 2**30),
        world_sizes=(2, 4, 8),
        allreduce_backends=("nccl", "gloo"),
        dp_presets=("xl",),
        bucket_sizes_mb=(1.0, 10.0, 100.0, 1000.0),
    ),
    "full": Tier(
        name="full",
        presets=("small", "medium", "large", "xl", "2.7b"),
        precisions=("fp32", "bf16"),
        contexts=CONTEXTS,
        warmups=WARMUPS,
        impls=MODEL_IMPLS,
        launches=LAUNCHES,
        attention_providers=PROVIDER_NAMES,
        attention_modes=ATTENTION_MODES,
        attention_sweeps=("scaling", "fixed_tokens"),
        compile_presets=("small", "medium", "large", "xl", "2.7b"),
        compile_precisions=("fp32", "bf16"),
        compile_attentions=COMPILE_ATTENTIONS,
        # 2048 adds a context where attention takes a larger share of the step: its work per token
        # grows with the context, the rest does not (causal attention is 3.8% of small's forward
        # FLOPs at 512, 13.5% at 2048; 2.7b's 1.2% and 4.7%). A context that does not fit the GPU
        # is the suite's out-of-memory skip.
        compile_contexts=(512, 2048),
        step_precisions=PRECISIONS,
        matmul_sizes=(1024, 2048, 4096, 8192, 16384),
        memory_contexts=(128, 256, 512, 1024),
        graph_presets=("small", "medium"),
        transfer_sizes=(2**16, 2**20, 2**24, 2**26, 2**28, 2**30),
        allreduce_sizes=(2**20, 10 * 2**20, 100 * 2**20, 2**30),
        world_sizes=(2, 4, 8),
        allreduce_backends=("nccl", "gloo"),
        dp_presets=("xl",),
        bucket_sizes_mb=(1.0, 10.0, 100.0, 1000.0),
    ),
}


def shape_filter_problem(tier: Tier, given: dict[str, bool]) -> str | None:
    """Why the tier's seq and head-dim filters keep no shape of its sweeps, naming where each filter
    came from (`given`: whether --seqs, --head-dims set it), or None where some shape is kept."""
    if tier.attention_shapes or tier.scaling_shapes:
        return None
    shapes = [s for name in (*tier.attention_sweeps, "naive_scaling") for s in SWEEPS[name]]

    def source(option: str) -> str:
        return f"--{option}" if given[option] else f"tier {tier.name!r}"

    wanted = [
        f"{axis} in {', '.join(map(str, values))} ({source(option)})"
        for axis, option, values in (("seq", "seqs", tier.seqs), ("head dim", "head-dims", tier.head_dims))
        if values is not None
    ]
    return (
        f"--seqs/--head-dims: sweeps {', '.join(tier.attention_sweeps)}, naive_scaling have no shape with "
        f"{' and '.join(wanted)}; their seqs: {', '.join(map(str, sorted({s.seq for s in shapes})))}; "
        f"head dims: {', '.join(map(str, sorted({s.head_dim for s in shapes})))}"
    )


# fp32 weights, gradients and two AdamW states: bytes per parameter a training step keeps.
TRAINING_BYTES_PER_PARAMETER = 16
# Share of device memory the training state may take, leaving the rest to activations at context
# 512: 2.7b's 51 GiB state is 0.64 of an H100's 79 GiB, and its fused-AdamW step peaked at 54 GiB.
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


# --allreduce-sweep: 8 B to 8 GiB, doubling, as nccl-tests sweeps (-b 8 -e 8G -f 2).
ALLREDUCE_SWEEP = tuple(2**p for p in range(3, 34))


# Accepted names per named axis, for validating command-line options (counts are checked as integers).
AXIS_CHOICES: dict[str, tuple] = {
    "presets": tuple(PRESETS),
    "precisions": PRECISIONS,
    "impls": MODEL_IMPLS,
    "optimizer": OPTIMIZER_IMPLS,
    "launches": LAUNCHES,
    "attention-providers": PROVIDER_NAMES,
    "attention-modes": ATTENTION_MODES,
    "attention-sweeps": tuple(SWEEPS),
    "allreduce-backends": ALLREDUCE_BACKENDS,
    "collectives": tuple(COLLECTIVES),
    "collective-dtypes": tuple(DTYPES),
    "placements": PLACEMENTS,
}
