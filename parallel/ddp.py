"""Data-parallel wrappers: four ways to give every rank the average of the ranks' gradients.

    ddp = DDPBucketed(model, bucket_size_mb=25.0)   # the model already on its device (cuda:rank for NCCL)
    loss = loss_fn(ddp(inputs), targets)            # each rank on its own shard of the batch
    loss.backward()
    ddp.finish_gradient_synchronization()           # every rank now holds the averaged gradients
    optimizer.step()

- DDPNaive: after backward, one blocking all-reduce per parameter.
- DDPFlat: after backward, all gradients copied into one buffer, one all-reduce.
- DDPIndividualParameters: one asynchronous all-reduce per parameter, started during backward.
- DDPBucketed: gradients copied into buckets of at most bucket_size_mb, one asynchronous all-reduce per
  bucket, started during backward as soon as the bucket's gradients are all there.

All four broadcast rank 0's parameters and buffers when built, synchronize only parameters that
require grad (a tied one once) and average by a sum and one division (gloo has no ReduceOp.AVG). A
parameter that some rank did not use is still averaged (`_adopt_missing`); docs/distributed.md has the
contract in full.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from parallel.process_group import require_process_group

MIB = 2**20  # bucket_size_mb counts MiB, as PyTorch DDP's bucket_cap_mb does


def broadcast_from_rank0(module: nn.Module) -> None:
    """Overwrite every rank's parameters (trainable or not) and buffers with rank 0's."""
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.detach(), src=0)


def plan_buckets(params: Sequence[Tensor], bucket_bytes: float) -> list[list[int]]:
    """Indices into params grouped into buckets, filled from the last parameter to the first.

    Backward produces gradients roughly in the reverse of the order in which parameters are registered
    (the last layer's first), so the first bucket fills, and its all-reduce starts, while backward is
    still computing the earlier layers. A bucket holds at most bucket_bytes of one dtype on one device
    (it becomes one flat buffer); a parameter larger than bucket_bytes gets a bucket of its own.
    """
    buckets: list[list[int]] = []
    filled = 0
    kind = None
    for index in reversed(range(len(params))):
        param = params[index]
        size = param.numel() * param.element_size()
        if not buckets or (param.dtype, param.device) != kind or filled + size > bucket_bytes:
            buckets.append([])
            filled = 0
            kind = (param.dtype, param.device)
        buckets[-1].append(index)
        filled += size
    return buckets


def check_bucket_size_mb(bucket_size_mb: float) -> float:
    """bucket_size_mb in bytes; ValueError unless it is a finite number > 0."""
    if (
        isinstance(bucket_size_mb, bool)
        or not isinstance(bucket_size_mb, int | float)
        or not math.isfinite(bucket_size_mb)
        or bucket_size_mb <= 0
    ):
        raise ValueError(f"bucket_size_mb must be a finite number > 0 (MiB); got {bucket_size_mb!r}")
    return bucket_size_mb * MIB


# --------------------------------------------------------------------------- gradients in and out
def _local_gradient(param: Tensor) -> Tensor:
    """This rank's gradient, or zeros where backward gave the parameter none."""
    return param.grad if param.grad is not None else torch.zeros_like(param)


def _write_has_gradient_flags(flags: Tensor, params: Sequence[Tensor]) -> None:
    """flags (P,): 1 where this rank has a gradient, else 0. Written in place on the flags' device: a
    tensor built from a Python list would be a host-to-device copy, which waits for the GPU and would
    stall backward inside a gradient hook."""
    flags.fill_(1)
    for index, param in enumerate(params):
        if param.grad is None:
            flags[index] = 0


def _has_gradient_flags(params: Sequence[Tensor]) -> Tensor:
    flags = torch.empty(len(params), device=params[0].device)
    _write_has_gradient_flags(flags, params)
    return flags


def _adopt_missing(params: Sequence[Tensor], averages: Sequence[Tensor], used_by: Tensor) -> None:
    """Give the average to each parameter that had no gradient here but did on some rank (used_by > 0).

    Such a rank sent zeros, so that every rank issues the same collectives in the same order; they count
    towards the average as that rank's rows would in one process on the whole batch. A parameter no rank
    used keeps grad None, and the optimizer skips it as it would in one process."""
    missing = [index for index, param in enumerate(params) if param.grad is None]
    if not missing:
        return
    counts = used_by.tolist()  # waits for the reduction; only a rank without some gradient comes here
    for index in missing:
        if counts[index] > 0:
            params[index].grad = averages[index].view(params[index].shape).clone()


def _pack(params: Sequence[Tensor]) -> Tensor:
    """(N + P,): the P gradients flattened one after another (zeros where this rank has none), then P
    has-gradient flags."""
    numels = [param.numel() for param in params]
    buffer = torch.empty(sum(numels) + len(params), dtype=params[0].dtype, device=params[0].device)
    *segments, flags = buffer.split([*numels, len(params)])
    present = [
        (segment, param.grad)
        for segment, param in zip(segments, params, strict=True)
        if param.grad is not None
    ]
    if present:
        torch._foreach_copy_([segment for segment, _ in present], [grad.reshape(-1) for _, grad in present])
    for segment, param in zip(segments, params, strict=True):
        if param.grad is None:
            segment.zero_()
    _write_has_gradient_flags(flags, params)
    return buffer


def _unpack_average(params: Sequence[Tensor], buffer: Tensor, world_size: int) -> None:
    """Divide a reduced _pack buffer by the world size and copy each parameter's part into its gradient."""
    buffer.div_(world_size)
    *averages, used_by = buffer.split([*(param.numel() for param in params), len(params)])
    present = [
        (param.grad, average)
        for param, average in zip(params, averages, strict=True)
        if param.grad is not None
    ]
    if present:
        torch._foreach_copy_([grad for grad, _ in present], [avg.view(grad.shape) for grad, avg in present])
    _adopt_missing(params, averages, used_by)


# --------------------------------------------------------------------------- wrappers
class _DataParallel(nn.Module):
    """What the wrappers share: the broadcast when built, the synchronized parameters, forward."""

    def __init__(self, module: nn.Module) -> None:
        require_process_group(type(self).__name__)
        super().__init__()
        self.module = module
        self.world_size = dist.get_world_size()
        broadcast_from_rank0(module)
        # named_parameters() yields a Parameter reachable twice (tied weights) once, under its first name.
        named = [(name, param) for name, param in module.named_parameters() if param.requires_grad]
        self.parameter_names = [name for name, _ in named]
        self._params = [param for _, param in named]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)


class DDPNaive(_DataParallel):
    """After backward, one blocking all-reduce per parameter: the baseline the others improve on."""

    def finish_gradient_synchronization(self) -> None:
        if not self._params:
            return
        grads = [_local_gradient(param) for param in self._params]  # a rank's own .grad is reduced in place
        used_by = _has_gradient_flags(self._params)
        for grad in grads:
            dist.all_reduce(grad)
        dist.all_reduce(used_by)
        torch._foreach_div_(grads, self.world_size)
        _adopt_missing(self._params, grads, used_by)


class DDPFlat(_DataParallel):
    """After backward, every gradient copied into one flat buffer and one all-reduce: one call's latency
    instead of one per parameter, for two copies of the gradients."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__(module)
        # A flat buffer has one dtype: one per dtype (and device), so one in all for a model in one dtype.
        self._groups = [[self._params[i] for i in group] for group in plan_buckets(self._params, math.inf)]

    def finish_gradient_synchronization(self) -> None:
        for params in self._groups:
            buffer = _pack(params)
            dist.all_reduce(buffer)
            _unpack_average(params, buffer, self.world_size)


def _forward_gradient(wrapper: weakref.ref[_OverlappedDataParallel], index: int, param: Tensor) -> None:
    live = wrapper()
    if live is not None:
        live._on_gradient(index, param)


def _remove_hooks(handles: list[RemovableHandle]) -> None:
    for handle in handles:
        handle.remove()


class _OverlappedDataParallel(_DataParallel):
    """Starts reductions from gradient hooks during backward, so communication overlaps computation.

    Parameters are grouped into units (one parameter, or one bucket) in launch order. Collectives are
    matched across ranks by the order they are issued, not by their tensors, so units are launched
    strictly in that order: a unit whose gradients are all there still waits for the units before it.
    Every rank then issues the same sequence even where autograd finishes two gradients in another order,
    or a rank has no gradient for a parameter (its unit is launched, with zeros, by
    finish_gradient_synchronization). The order is the reverse of registration, the order in which
    backward produces gradients in most models, so the wait is short.

    One backward per finish_gradient_synchronization: a second backward would accumulate into gradients
    that are being reduced, so it raises instead.
    """

    def __init__(self, module: nn.Module, plan: Callable[[Sequence[Tensor]], list[list[int]]]) -> None:
        super().__init__(module)
        self._units = plan(self._params)
        self._unit_of = {index: unit for unit, indices in enumerate(self._units) for index in indices}
        self._reset()
        # The hooks live on the parameters and must not keep the wrapper alive: a parameter's hooks are
        # invisible to Python's cycle collector, so a hook holding the wrapper (which holds the module,
        # which holds the parameter) would keep model and gradients allocated after the wrapper is
        # dropped: 15 GB per rank for the xl preset in fp32. A weak reference breaks the cycle; when
        # the wrapper is collected, the finalizer removes its hooks from a module that lives on.
        this = weakref.ref(self)
        handles = [
            param.register_post_accumulate_grad_hook(partial(_forward_gradient, this, index))
            for index, param in enumerate(self._params)
        ]
        weakref.finalize(self, _remove_hooks, handles)

    def _reset(self) -> None:
        self._ready = [False] * len(self._params)
        self._waiting = [len(indices) for indices in self._units]  # gradients each unit still waits for
        self._launched: list[tuple[dist.Work, Tensor]] = []  # (handle, reduced tensor) per launched unit

    def _on_gradient(self, index: int, param: Tensor) -> None:
        if self._ready[index]:
            raise RuntimeError(
                f"{self.parameter_names[index]} got a second gradient before "
                "finish_gradient_synchronization(): call it after every backward"
            )
        self._ready[index] = True
        self._waiting[self._unit_of[index]] -= 1
        self._launch_ready()

    def _launch_ready(self, flush: bool = False) -> None:
        while len(self._launched) < len(self._units):
            unit = len(self._launched)
            if not flush and self._waiting[unit] > 0:
                return
            self._launched.append(self._launch([self._params[index] for index in self._units[unit]]))

    def _launch(self, params: list[Tensor]) -> tuple[dist.Work, Tensor]:
        raise NotImplementedError

    def _complete(self, launched: list[tuple[dist.Work, Tensor]]) -> None:
        raise NotImplementedError

    def finish_gradient_synchronization(self) -> None:
        self._launch_ready(flush=True)
        launched = self._launched
        self._reset()
        self._complete(launched)


class DDPIndividualParameters(_OverlappedDataParallel):
    """An asynchronous all-reduce per parameter, started from its gradient hook during backward; finish
    waits for them all and divides. One more small all-reduce carries the has-gradient flags."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__(module, lambda params: [[index] for index in reversed(range(len(params)))])

    def _launch(self, params: list[Tensor]) -> tuple[dist.Work, Tensor]:
        (param,) = params
        grad = _local_gradient(param)  # this rank's own .grad is reduced in place
        return dist.all_reduce(grad, async_op=True), grad

    def _complete(self, launched: list[tuple[dist.Work, Tensor]]) -> None:
        if not self._params:
            return
        used_by = _has_gradient_flags(self._params)
        flags_sent = dist.all_reduce(used_by, async_op=True)
        for handle, _ in launched:
            handle.wait()
        flags_sent.wait()
        reduced = {index: grad for (index,), (_, grad) in zip(self._units, launched, strict=True)}
        grads = [reduced[index] for index in range(len(self._params))]
        torch._foreach_div_(grads, self.world_size)
        _adopt_missing(self._params, grads, used_by)


class DDPBucketed(_OverlappedDataParallel):
    """Gradients copied into buckets of at most bucket_size_mb MiB (see plan_buckets), one asynchronous
    all-reduce per bucket as soon as its gradients are all there; finish waits, divides and copies back.

    Larger buckets mean fewer calls (less latency) but a later start for the first one (less overlap).
    """

    def __init__(self, module: nn.Module, bucket_size_mb: float) -> None:
        bucket_bytes = check_bucket_size_mb(bucket_size_mb)
        super().__init__(module, partial(plan_buckets, bucket_bytes=bucket_bytes))
        self.bucket_size_mb = bucket_size_mb

    @property
    def bucket_count(self) -> int:
        return len(self._units)

    @property
    def bucket_parameter_names(self) -> list[list[str]]:
        """The parameters of each bucket, in launch order."""
        return [[self.parameter_names[index] for index in indices] for indices in self._units]

    def _launch(self, params: list[Tensor]) -> tuple[dist.Work, Tensor]:
        buffer = _pack(params)
        return dist.all_reduce(buffer, async_op=True), buffer

    def _complete(self, launched: list[tuple[dist.Work, Tensor]]) -> None:
        for indices, (handle, buffer) in zip(self._units, launched, strict=True):
            handle.wait()
            _unpack_average([self._params[index] for index in indices], buffer, self.world_size)
