"""The training step of each data-parallel variant, built inside a rank, and the bytes of training
state (parameters, gradients, optimizer state) a rank holds after it.

Every variant trains the same model (rank 0's weights, broadcast) with torch's AdamW on the rank's own
batch; a step is zero_grad, forward, loss, backward, the variant's gradient averaging where it has a
separate one, optimizer step:

- "single": no wrapper and no communication, what one GPU alone takes: the reference point.
- "naive", "flat", "individual", "bucketed": the wrappers of parallel/ddp.py, whose
  finish_gradient_synchronization is timed apart as the step's sync time.
- "torch_ddp": torch.nn.parallel.DistributedDataParallel, its all-reduces started inside backward.
- "fsdp2": torch's fully_shard on every Transformer block, then on the whole model. Parameters,
  gradients and AdamW's state are sharded over the ranks (DTensors): each block's weights are
  all-gathered before its forward and again before its backward, the root's (embeddings, final norm,
  LM head) once, kept whole from forward to backward (fully_shard's default for the root); gradients
  are reduce-scattered inside backward.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from model.config import ModelConfig
from model.loss import cross_entropy
from model.optim import build_optimizer
from parallel.ddp import DDPBucketed, DDPFlat, DDPIndividualParameters, DDPNaive, broadcast_from_rank0
from parallel.sharded_optimizer import ShardedOptimizer
from perf.cases.data_parallel import BUCKETED, OPTIMIZER_KINDS, VARIANTS
from perf.harness import mark, nvtx_range
from perf.workloads.lm import build_model, random_batch

LEARNING_RATE = 1e-4
# The project's wrappers, whose gradient averaging is a call of its own after backward.
_WRAPPERS = {"naive": DDPNaive, "flat": DDPFlat, "individual": DDPIndividualParameters}

Marks = tuple[Any, Any]  # CUDA events or host clock readings around finish_gradient_synchronization
Step = Callable[[], tuple[torch.Tensor, Marks | None]]  # -> (this rank's loss, marks or None)


@dataclass(frozen=True)
class TrainingStep:
    """A variant's step with what it trains: `model` as the step calls it (wrapped or sharded)."""

    run: Step
    model: nn.Module
    optimizer: torch.optim.Optimizer


# --------------------------------------------------------------------------- optimizers and state
def adamw_options(device: torch.device) -> dict[str, Any]:
    """torch AdamW's implementation: fused on GPUs (one kernel for all tensors: the foreach version took
    almost half of a 2.7b step, NOTES.md); foreach on the CPU, where torch picks the per-tensor loop."""
    return {"fused": True} if device.type == "cuda" else {"foreach": True}


def build_adamw(params: Iterable[nn.Parameter], kind: str, device: torch.device) -> torch.optim.Optimizer:
    """kind 'adamw': torch's AdamW over every parameter given (for FSDP2, this rank's shards);
    'sharded_adamw': the same, each rank over its share (ShardedOptimizer: needs a process group)."""
    if kind == "adamw":
        return build_optimizer(params, impl="torch", lr=LEARNING_RATE, **adamw_options(device))
    if kind == "sharded_adamw":
        return ShardedOptimizer(params, torch.optim.AdamW, lr=LEARNING_RATE, **adamw_options(device))
    raise ValueError(f"kind: unknown value {kind!r}; accepted: {', '.join(OPTIMIZER_KINDS)}")


def local_bytes(tensor: torch.Tensor) -> int:
    """Bytes of a tensor that this rank holds: a DTensor's local shard, any other tensor whole."""
    return (tensor.to_local() if isinstance(tensor, DTensor) else tensor).nbytes


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the tensors in this rank's optimizer state (for a ShardedOptimizer, its own shard's;
    over FSDP2's parameters, the local shards of AdamW's moments)."""
    inner = optimizer.local_optimizer if isinstance(optimizer, ShardedOptimizer) else optimizer
    return sum(
        local_bytes(value)
        for per_param in inner.state.values()
        for value in per_param.values()
        if isinstance(value, torch.Tensor)
    )


def held_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of parameters, gradients and optimizer state on this rank, counted from the tensors.

    Buffers a wrapper keeps besides them (torch DDP's gradient buckets, FSDP2's all-gather buffers
    between steps) are not counted: on a GPU the peak allocated shows them.
    """
    params = list(model.parameters())  # a Parameter reachable twice (tied weights) is yielded once
    grads = [param.grad for param in params if param.grad is not None]
    return sum(local_bytes(tensor) for tensor in (*params, *grads)) + optimizer_state_bytes(optimizer)


# --------------------------------------------------------------------------- the steps
def build_training_step(
    variant: str,
    bucket_size_mb: float | None,
    config: ModelConfig,
    rank: int,
    world_size: int,
    device: torch.device,
) -> TrainingStep:
    """The variant's model, wrapper or sharding, optimizer and this rank's batch, and its step."""
    torch.manual_seed(rank)  # other weights per rank: the broadcast makes them rank 0's
    model = build_model("sdpa", config, device)
    inputs, targets = random_batch(config, device, seed=rank)  # (B, T) each, other rows per rank
    if variant == "fsdp2":
        # Sharded first, then the optimizer: AdamW steps this rank's shards and keeps their state only.
        sharded = fully_sharded(model, world_size, device)
        optimizer = build_adamw(sharded.parameters(), "adamw", device)
        # FSDP2's reduce-scatters run inside backward, whose end waits for the last of them: like
        # torch_ddp, no call of its own to time as sync.
        return TrainingStep(step_function(sharded, None, optimizer, inputs, targets), sharded, optimizer)
    optimizer = build_adamw(model.parameters(), "adamw", device)
    if variant == "single":
        return TrainingStep(step_function(model, None, optimizer, inputs, targets), model, optimizer)
    if variant == "torch_ddp":
        # As users build it: default buckets (25 MiB), and buffers broadcast before every forward,
        # which the project's wrappers do only when built. The model's only buffers are its RoPE tables,
        # 128 KiB at xl and context 512: one broadcast of microseconds in a step of hundreds of
        # milliseconds (NOTES.md).
        wrapped = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
        return TrainingStep(step_function(wrapped, None, optimizer, inputs, targets), wrapped, optimizer)
    if variant == BUCKETED:
        wrapped = DDPBucketed(model, bucket_size_mb=bucket_size_mb)
    elif variant in _WRAPPERS:
        wrapped = _WRAPPERS[variant](model)
    else:
        raise ValueError(f"variant: unknown value {variant!r}; accepted: {', '.join((*VARIANTS, BUCKETED))}")
    step = step_function(wrapped, wrapped.finish_gradient_synchronization, optimizer, inputs, targets)
    return TrainingStep(step, wrapped, optimizer)


def fully_sharded(model: nn.Module, world_size: int, device: torch.device) -> nn.Module:
    """The model under FSDP2 over all `world_size` ranks, with rank 0's weights, as users shard it.

    fully_shard on each Transformer block (`model.layers`), then on the root, which takes what is left:
    embeddings, final norm and LM head. Each block is then its own all-gather and reduce-scatter, and
    its full weights live only from its forward (or backward) to the next block's. fully_shard keeps
    each rank's own values of its shard, so rank 0's weights are broadcast first, as the other
    variants' wrappers do. A mesh over the whole world uses the default process group: no group is
    created, whatever backends it carries.
    """
    broadcast_from_rank0(model)
    mesh = init_device_mesh(device.type, (world_size,))
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def step_function(
    model: nn.Module,
    finish: Callable[[], None] | None,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> Step:
    """A training step that returns this rank's loss (detached: reading it waits for the step) and the
    marks around `finish` (None without one).

    On a GPU, CUDA events around `finish` time it on the stream without synchronizing inside the step:
    from the end of backward's kernels to the last gradient averaged, which for the overlapping wrappers
    is the communication that backward did not hide. On the CPU the host clock does.
    """
    cuda = inputs.device.type == "cuda"

    def step() -> tuple[torch.Tensor, Marks | None]:
        optimizer.zero_grad(set_to_none=True)
        with nvtx_range("forward"):
            loss = cross_entropy(model(inputs), targets)  # logits (B, T, V)
        with nvtx_range("backward"):
            loss.backward()
        marks = None
        if finish is not None:
            with nvtx_range("gradient_sync"):
                start = mark(cuda)
                finish()
                marks = start, mark(cuda)
        with nvtx_range("optimizer_step"):
            optimizer.step()
        return loss.detach(), marks

    return step
