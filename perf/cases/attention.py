"""The attention suites' cases: shapes and the named sweeps of them, modes and providers by name.

The one registry attention benchmarks draw from (through the tiers) and that the end-of-run tables
and the report read results back by: a shape's fields are what its results record.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from kernels.attention_inputs import attention_flops
from perf.cases.declare import Axis, Derived, Suite, cell

ATTENTION_MODES = ("forward", "backward", "forward_backward")

# The providers, in the order tiers, tables and plots list them; perf/workloads/attention.py
# implements each: the model's einsum-softmax attention (eager, compiled), FlashAttentionPyTorch
# compiled, the project's Triton kernel, and SDPA held to its flash or its cuDNN backend.
PROVIDER_NAMES = (
    "naive",
    "naive_compiled",
    "flash_pytorch_compiled",
    "flash_triton",
    "sdpa_flash",
    "sdpa_cudnn",
)
# What perf/test_attention_scaling.py records as `suite`: naive attention, forward and backward timed
# together, eager against compiled.
SCALING_SUITE = "attention_scaling"

# Matmul work of each mode in forwards: backward does five matmuls to the forward's two
# (see kernels.attention_inputs.attention_flops), so it counts 2.5 forwards.
MODE_FLOP_FACTORS = {"forward": 1.0, "backward": 2.5, "forward_backward": 3.5}

# The fixed_tokens sweep keeps batch x seq and heads x head_dim constant, so every cell moves the
# same amount of q, k, v and only the split between batch and sequence (and heads and head dim)
# changes: what the attention kernel's tiling sees. Head dims that do not divide the width get the
# nearest whole number of heads: 80 (the 2.7b preset's, 2560 / 32) has 26 heads (2080 wide), 96 has
# 21 (2016 wide), within 1.6% of it.
FIXED_TOKENS = 16384
FIXED_WIDTH = 2048
FIXED_HEAD_DIMS = (64, 80, 96, 128)


@dataclass(frozen=True)
class AttentionShape:
    """q, k and v of shape (batch, heads, seq, head_dim); self-attention, so seq_q == seq_k."""

    batch: int
    heads: int
    seq: int
    head_dim: int
    causal: bool

    def __str__(self) -> str:  # the benchmark id
        return f"b{self.batch}-h{self.heads}-s{self.seq}-d{self.head_dim}-{self.masking}"

    @property
    def masking(self) -> str:
        return "causal" if self.causal else "full"

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    def flops(self, mode: str) -> float:
        """Useful matmul FLOPs of one call: a causal score matrix counts half, whatever a provider does."""
        forward = attention_flops(self.batch, self.heads, self.seq, self.seq, self.head_dim, self.causal)
        return forward * MODE_FLOP_FACTORS[mode]

    def as_extra_info(self, dtype: torch.dtype) -> dict[str, object]:
        """The shape and dtype as benchmarks record them (the report tables read these keys)."""
        return dict(
            batch=self.batch,
            heads=self.heads,
            seq=self.seq,
            head_dim=self.head_dim,
            causal=self.causal,
            dtype=str(dtype).removeprefix("torch."),
        )

    def score_bytes(self, element_size: int) -> int:
        """Bytes of one (batch, heads, seq, seq) score matrix, as naive attention materializes it."""
        return self.batch * self.heads * self.seq * self.seq * element_size


def _scaling() -> tuple[AttentionShape, ...]:
    """One sequence of 16 heads, causal, from 128 to 64K tokens: where naive attention runs out of memory."""
    return tuple(
        AttentionShape(batch=1, heads=16, seq=2**p, head_dim=d, causal=True)
        for d in (16, 32, 64, 128)
        for p in range(7, 17)
    )


def _fixed_tokens() -> tuple[AttentionShape, ...]:
    """The cells where the Triton kernel is held against SDPA's flash backend."""
    return tuple(
        AttentionShape(
            batch=FIXED_TOKENS // seq,
            heads=round(FIXED_WIDTH / head_dim),
            seq=seq,
            head_dim=head_dim,
            causal=causal,
        )
        for head_dim in FIXED_HEAD_DIMS
        for causal in (True, False)
        for seq in (1024, 4096, 16384)
    )


def _naive_scaling() -> tuple[AttentionShape, ...]:
    """Batch 8 of one head, causal: where the model's naive attention (and its score matrix) grows
    from megabytes to tens of gigabytes, eager against compiled."""
    return tuple(
        AttentionShape(batch=8, heads=1, seq=seq, head_dim=d, causal=True)
        for d in (16, 32, 64, 128)
        for seq in (256, 1024, 4096, 8192, 16384)
    )


# A call so small that the GPU finishes it long before the host has launched the next: its time per
# call is the host's cost of one call (checks, allocations, launches), provider against provider.
HOST_BOUND = (AttentionShape(batch=1, heads=2, seq=128, head_dim=64, causal=True),)

SWEEPS: dict[str, tuple[AttentionShape, ...]] = {
    "scaling": _scaling(),
    "fixed_tokens": _fixed_tokens(),
    "naive_scaling": _naive_scaling(),
    "host_bound": HOST_BOUND,
}


def select_shapes(
    sweeps: Iterable[str], seqs: Iterable[int] | None = None, head_dims: Iterable[int] | None = None
) -> tuple[AttentionShape, ...]:
    """The sweeps' shapes, in order and once each, keeping only the given seqs and head dims (None: all)."""
    seqs = None if seqs is None else set(seqs)
    head_dims = None if head_dims is None else set(head_dims)
    chosen = (
        shape
        for name in sweeps
        for shape in SWEEPS[name]
        if (seqs is None or shape.seq in seqs) and (head_dims is None or shape.head_dim in head_dims)
    )
    return tuple(dict.fromkeys(chosen))


# --------------------------------------------------------------------------- the suites' declarations
def attention_shapes(tier) -> tuple[AttentionShape, ...]:
    return select_shapes(tier.attention_sweeps, tier.seqs, tier.head_dims)


def scaling_shapes(tier) -> tuple[AttentionShape, ...]:
    return select_shapes(("naive_scaling",), tier.scaling_seqs, tier.scaling_head_dims)


def shape_filter_problem(tier, given: set[str]) -> str | None:
    """Why the tier's seq and head-dim filters keep no shape of its sweeps, naming where each filter came
    from (`given`: the axes the options set), or None where some shape is kept."""
    if tier.attention_shapes or tier.scaling_shapes:
        return None
    shapes = [s for name in (*tier.attention_sweeps, "naive_scaling") for s in SWEEPS[name]]
    from_tier = f"tier {tier.name!r}"
    wanted = [
        f"{axis} in {', '.join(map(str, values))} ({f'--{option}' if name in given else from_tier})"
        for axis, name, option, values in (
            ("seq", "seqs", "seqs", tier.seqs),
            ("head dim", "head_dims", "head-dims", tier.head_dims),
        )
        if values is not None
    ]
    return (
        f"--seqs/--head-dims: sweeps {', '.join(tier.attention_sweeps)}, naive_scaling have no shape with "
        f"{' and '.join(wanted)}; their seqs: {', '.join(map(str, sorted({s.seq for s in shapes})))}; "
        f"head dims: {', '.join(map(str, sorted({s.head_dim for s in shapes})))}"
    )


def header(tier) -> str:
    """What a run of the attention benchmarks runs, said after collection."""
    shapes = tier.attention_shapes
    return (
        f"attention: sweeps {','.join(tier.attention_sweeps)} ({len(shapes)} shape"
        f"{'' if len(shapes) == 1 else 's'}; seqs {','.join(map(str, sorted({s.seq for s in shapes})))}; "
        f"head dims {','.join(map(str, sorted({s.head_dim for s in shapes})))}); providers "
        f"{','.join(tier.attention_providers)}; modes {','.join(tier.attention_modes)}"
    )


SUITES = (
    # Attention alone (perf/test_attention.py); its precision is the model's axis. Providers last: the
    # providers of one shape run one after another, side by side in one table.
    Suite(
        "attention",
        header=header,
        check=shape_filter_problem,
        axes=(
            Axis(
                "attention_modes",
                values={"pr": ("forward_backward",)},
                default=ATTENTION_MODES,
                help=f"comma-separated: {', '.join(ATTENTION_MODES)}",
                choices=ATTENTION_MODES,
            ),
            Derived("attention_shapes", attention_shapes),
            Axis(
                "attention_providers",
                left_out_note="attention providers {values}",
                # The default tier: the contenders and eager naive attention as the reference point; the
                # compiled providers compile once per shape and mode (minutes each), so the full tier.
                values={
                    # cpu: naive_compiled compiles in the scaling suite; here it would compile once a mode.
                    "cpu": ("naive", "flash_pytorch_compiled", "sdpa_flash"),
                    "pr": ("flash_triton", "sdpa_flash", "sdpa_cudnn"),
                    "default": ("naive", "flash_triton", "sdpa_flash", "sdpa_cudnn"),
                    "full": PROVIDER_NAMES,
                },
                help=f"comma-separated: {', '.join(PROVIDER_NAMES)}",
                choices=PROVIDER_NAMES,
            ),
            Axis(
                "attention_sweeps",
                argument=False,
                # Not pr: the host-bound call's figures move with the host by 15-25% within a run, and
                # its GPU time is a few microseconds; the pull-request gate keeps to what it can judge.
                values={
                    "cpu": ("scaling",),
                    "pr": ("fixed_tokens",),
                    "full": ("scaling", "fixed_tokens", "host_bound"),
                },
                default=("fixed_tokens", "host_bound"),
                help=f"comma-separated shape sweeps: {', '.join(SWEEPS)}",
                choices=tuple(SWEEPS),
            ),
            # Filters on the sweeps' shapes; None keeps every sequence length (head dim) of the sweeps.
            Axis(
                "seqs",
                argument=False,
                values={"cpu": (128,)},
                default=None,
                help="comma-separated sequence lengths: keeps the sweeps' shapes with these",
                read="ints",
            ),
            # The default tier: every head dim of the sweeps but 96, which the full tier adds.
            Axis(
                "head_dims",
                argument=False,
                values={"cpu": (32,), "pr": (64, 80, 128), "default": (16, 32, 64, 80, 128)},
                default=None,
                help="comma-separated head dims: keeps the sweeps' shapes with these",
                read="ints",
            ),
        ),
        # Forward+backward in bf16, causal, at every fixed-tokens seq and head dims 64, 80, 128.
        cells={
            "pr": (
                cell(
                    "test_attention.py::test_attention",
                    precision="bf16",
                    attention_mode="forward_backward",
                    attention_shape=lambda shape: shape.causal,
                ),
            )
        },
    ),
    # The naive attention's scaling sweep (perf/test_attention_scaling.py), eager and compiled, filtered
    # like the attention sweeps (--seqs and --head-dims set both filters).
    Suite(
        "attention_scaling",
        axes=(
            Axis(
                "scaling_precisions",
                default=("fp32",),
                set_by="precisions",
            ),
            Derived("scaling_shapes", scaling_shapes),
            # cpu: one shape; seq 1024 took 20-28 s a benchmark on two cores.
            Axis(
                "scaling_seqs",
                argument=False,
                values={"cpu": (256,), "pr": (4096,)},
                default=None,
                set_by="seqs",
            ),
            Axis(
                "scaling_head_dims",
                argument=False,
                values={"cpu": (16,), "pr": (64,)},
                default=None,
                set_by="head_dims",
            ),
        ),
        # The naive attention's score matrix at one size, eager and compiled.
        cells={"pr": (cell("test_attention_scaling.py::test_naive_attention_scaling"),)},
    ),
)
