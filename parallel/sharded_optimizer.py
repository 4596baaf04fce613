"""Optimizer-state sharding: each rank keeps optimizer state for its own share of the parameters only.

    optimizer = ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=1e-3, weight_decay=0.1)
    ...backward, then gradients averaged across ranks (parallel/ddp.py)...
    optimizer.step()   # each rank updates the parameters it owns; each parameter is broadcast from its owner

Every parameter has one owner rank. The owner's inner optimizer (`local_optimizer`) holds its state (for
AdamW two tensors the size of the parameter) and updates it; the other ranks receive the updated values.
With N ranks, optimizer state per rank drops to about 1/N; every rank still holds all parameters and all
gradients, and the gradients must already be averaged when step() runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from parallel.process_group import require_process_group


def _bytes(tensor: Tensor) -> int:
    return tensor.numel() * tensor.element_size()


class ShardedOptimizer(torch.optim.Optimizer):
    """`optimizer_cls(**kwargs)` on every rank, each over the parameters that rank owns.

    param_groups holds every parameter (zero_grad and learning-rate schedulers see them all); their
    hyperparameters are copied to the inner optimizer's groups at each step, so a scheduler's change
    reaches it. state_dict() and load_state_dict() save and restore this rank's shard.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        optimizer_cls: type[torch.optim.Optimizer],
        **kwargs: Any,
    ) -> None:
        if not (isinstance(optimizer_cls, type) and issubclass(optimizer_cls, torch.optim.Optimizer)):
            raise ValueError(
                f"optimizer_cls must be a torch.optim.Optimizer subclass such as torch.optim.AdamW; "
                f"got {optimizer_cls!r}"
            )
        require_process_group(type(self).__name__)
        self._optimizer_cls = optimizer_cls
        self._kwargs = kwargs
        self._rank = dist.get_rank()
        self._owners: dict[Tensor, int] = {}
        self._shard_bytes = [0] * dist.get_world_size()
        self.local_optimizer: torch.optim.Optimizer | None = None
        # The base class calls add_param_group for each group; the first call builds local_optimizer.
        super().__init__(params, defaults=dict(kwargs))

    @property
    def shard_bytes(self) -> tuple[int, ...]:
        """Parameter bytes owned by each rank."""
        return tuple(self._shard_bytes)

    def owner(self, param: Tensor) -> int:
        return self._owners[param]

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)  # checks it, fills in the defaults, appends it
        group = self.param_groups[-1]
        own_group = {**group, "params": self._assign_owners(group["params"])}  # possibly no parameters
        if self.local_optimizer is None:
            self.local_optimizer = self._optimizer_cls([own_group], **self._kwargs)
        else:
            self.local_optimizer.add_param_group(own_group)
        # The inner optimizer filled in its own defaults (betas, eps, ...): show them here too, so that
        # schedulers and readers of param_groups see every hyperparameter of the group.
        for key, value in self.local_optimizer.param_groups[-1].items():
            group.setdefault(key, value)

    def _assign_owners(self, params: list[Tensor]) -> list[Tensor]:
        """Owners for new parameters; the ones this rank owns, in group order.

        Largest first, each to the rank owning the fewest bytes so far (ties to the lowest rank): the
        largest shard is at most the mean plus one parameter. Every rank sees the same shapes in the same
        order, so every rank computes the same owners without communicating.
        """
        for param in sorted(
            params, key=_bytes, reverse=True
        ):  # sorted is stable: equal sizes keep their order
            owner = min(range(len(self._shard_bytes)), key=lambda rank: (self._shard_bytes[rank], rank))
            self._owners[param] = owner
            self._shard_bytes[owner] += _bytes(param)
        return [param for param in params if self._owners[param] == self._rank]

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        for group, own_group in zip(self.param_groups, self.local_optimizer.param_groups, strict=True):
            own_group.update((key, value) for key, value in group.items() if key != "params")
        loss = self.local_optimizer.step(closure)
        self._broadcast_from_owners()
        return loss

    def _broadcast_from_owners(self) -> None:
        # One broadcast per parameter, in place and asynchronous, rather than one flat buffer per owner:
        # no extra buffer the size of a shard (about 3 GB for the xl preset's fp32 weights on 2 ranks),
        # and the broadcasts still queue back to back. Every rank issues them in param_groups order.
        with torch.no_grad():
            sent = [
                dist.broadcast(param.detach(), src=self._owners[param], async_op=True)
                for group in self.param_groups
                for param in group["params"]
            ]
            for handle in sent:
                handle.wait()

    def state_dict(self) -> dict[str, Any]:
        """This rank's shard: the inner optimizer's state dict. Load it on the same rank of the same world."""
        return self.local_optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.local_optimizer.load_state_dict(state_dict)
        for group, own_group in zip(self.param_groups, self.local_optimizer.param_groups, strict=True):
            group.update((key, value) for key, value in own_group.items() if key != "params")
