"""ShardedOptimizer over AdamW on 2 ranks steps like one AdamW in one process, holding half the state."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import Tensor, nn

from parallel.launch import run_ranks
from parallel.sharded_optimizer import ShardedOptimizer

WORLD = 2
STEPS = 5
TIMEOUT_S = 60
HYPERPARAMETERS = dict(lr=1e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
FIRST_GROUP = 6  # parameters given at construction; the rest join through add_param_group
ADD_GROUP_AT = 2  # step before which the second group is added
LATE_LR = 3e-2  # the added group's own learning rate
NEW_LR_AT = 3  # step before which the first group's lr changes, as a scheduler would change it
NEW_LR = 5e-3


def small_model() -> nn.Module:
    torch.manual_seed(0)
    # Sizes 288, 24, 24, 24, 576, 24 | 144, 6: one large weight, several small ones, an odd bias.
    return nn.Sequential(nn.Linear(12, 24), nn.LayerNorm(24), nn.Linear(24, 24), nn.Tanh(), nn.Linear(24, 6))


def set_grads(params: list[Tensor], step: int) -> None:
    """The same gradients on every rank, as after data-parallel averaging."""
    gen = torch.Generator().manual_seed(100 + step)
    for param in params:
        param.grad = torch.randn(param.shape, generator=gen).to(param.device)


def train(params: list[Tensor], optimizer: torch.optim.Optimizer, add_group) -> list[list[Tensor]]:
    trajectory = []
    for step in range(STEPS):
        if step == ADD_GROUP_AT:
            add_group({"params": params[FIRST_GROUP:], "lr": LATE_LR})
        if step == NEW_LR_AT:
            optimizer.param_groups[0]["lr"] = NEW_LR
        set_grads(params, step)
        optimizer.step()
        trajectory.append([param.detach().cpu().clone() for param in params])
    return trajectory


def train_one_process() -> list[list[Tensor]]:
    params = list(small_model().parameters())
    optimizer = torch.optim.AdamW(params[:FIRST_GROUP], **HYPERPARAMETERS)
    return train(params, optimizer, optimizer.add_param_group)


def _train_sharded(rank: int, world_size: int, device_type: str) -> bytes:
    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    params = list(small_model().to(device).parameters())
    optimizer = ShardedOptimizer(params[:FIRST_GROUP], torch.optim.AdamW, **HYPERPARAMETERS)
    trajectory = train(params, optimizer, optimizer.add_param_group)
    state = optimizer.local_optimizer.state
    state_bytes = sum(
        t.numel() * t.element_size() for s in state.values() for key, t in s.items() if key != "step"
    )
    groups = [{key: value for key, value in g.items() if key != "params"} for g in optimizer.param_groups]
    optimizer.zero_grad()
    return dict(
        trajectory=trajectory,
        owners=[optimizer.owner(param) for param in params],
        with_state=[i for i, param in enumerate(params) if param in state],
        state_bytes=state_bytes,
        shard_bytes=optimizer.shard_bytes,
        groups=groups,
        shard_state_entries=len(optimizer.state_dict()["state"]),
        grads_cleared=all(param.grad is None for param in params),
    )


def train_on_ranks(backend: str, device_type: str) -> list[dict]:
    return run_ranks(_train_sharded, WORLD, backend=backend, args=(device_type,), timeout_s=TIMEOUT_S)


@pytest.fixture(scope="module")
def sharded() -> list[dict]:
    return train_on_ranks("gloo", "cpu")


def param_bytes(indices: list[int]) -> int:
    params = list(small_model().parameters())
    return sum(params[i].numel() * params[i].element_size() for i in indices)


def test_steps_like_adamw_in_one_process(sharded):
    expected = train_one_process()
    for rank_result in sharded:
        for step, (params, reference) in enumerate(zip(rank_result["trajectory"], expected, strict=True)):
            for i, (param, want) in enumerate(zip(params, reference, strict=True)):
                # The owner runs AdamW's own per-parameter arithmetic; the broadcast copies its bits.
                assert torch.equal(param, want), f"step {step}, parameter {i}"


def test_every_parameter_has_one_owner_agreed_by_every_rank(sharded):
    owners = sharded[0]["owners"]
    assert all(rank_result["owners"] == owners for rank_result in sharded)
    assert set(owners) == set(range(WORLD))
    for rank, rank_result in enumerate(sharded):
        assert rank_result["with_state"] == [i for i, owner in enumerate(owners) if owner == rank]
        assert rank_result["shard_state_entries"] == len(rank_result["with_state"])


def test_each_rank_holds_state_for_about_half_the_parameter_bytes(sharded):
    total = param_bytes(list(range(len(sharded[0]["owners"]))))
    largest = max(param_bytes([i]) for i in range(len(sharded[0]["owners"])))
    for rank, rank_result in enumerate(sharded):
        own = param_bytes(rank_result["with_state"])
        assert rank_result["shard_bytes"][rank] == own
        # Greedy by size, largest first: no shard exceeds the mean by more than one parameter.
        assert 0 < own <= total / WORLD + largest
        assert rank_result["state_bytes"] == 2 * own  # AdamW: exp_avg and exp_avg_sq
    assert sum(sharded[0]["shard_bytes"]) == total


def test_added_group_keeps_its_options_and_gets_the_inner_defaults(sharded):
    first, added = sharded[0]["groups"]
    assert added["lr"] == LATE_LR and first["lr"] == NEW_LR
    for group in (first, added):
        assert (
            group["betas"] == HYPERPARAMETERS["betas"]
            and group["weight_decay"] == HYPERPARAMETERS["weight_decay"]
        )
        assert group["amsgrad"] is False  # an AdamW default nobody passed


def test_zero_grad_clears_every_parameter_on_every_rank(sharded):
    assert all(rank_result["grads_cleared"] for rank_result in sharded)


@pytest.mark.parametrize("optimizer_cls", [object, "AdamW", 3, torch.optim.lr_scheduler.StepLR])
def test_optimizer_cls_must_be_an_optimizer_class(optimizer_cls):
    with pytest.raises(ValueError, match=r"optimizer_cls must be a torch\.optim\.Optimizer subclass"):
        ShardedOptimizer(small_model().parameters(), optimizer_cls, lr=1e-3)


def test_an_optimizer_instance_is_not_a_class():
    instance = torch.optim.AdamW(small_model().parameters())
    with pytest.raises(ValueError, match=r"optimizer_cls must be a torch\.optim\.Optimizer subclass"):
        ShardedOptimizer(small_model().parameters(), instance)


def test_a_process_group_is_required():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match=r"ShardedOptimizer needs torch\.distributed to be initialized"):
        ShardedOptimizer(small_model().parameters(), torch.optim.AdamW)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs for NCCL with 2 ranks")
def test_steps_like_adamw_in_one_process_over_nccl():
    sharded = train_on_ranks("nccl", "cuda")
    expected = train_one_process()
    # CUDA AdamW runs the foreach kernels, the CPU reference the per-tensor loop: the tolerance that
    # tests/test_optim.py allows between two such implementations.
    for rank_result in sharded:
        for params, reference in zip(rank_result["trajectory"], expected, strict=True):
            for param, want in zip(params, reference, strict=True):
                torch.testing.assert_close(param, want, rtol=1e-5, atol=1e-6)
