"""The data-parallel wrappers train like one process on the whole batch (gloo, 2 ranks; NCCL on 2 GPUs).

All variants train in one spawned run (spawning costs seconds), each from different random weights per rank
and on different rows per rank; the tests then compare every rank's start, gradients and end with one
process training on the concatenated batch.
"""

from __future__ import annotations

import gc
import math
import time
import weakref
from functools import partial

import pytest
import torch
import torch.distributed as dist
from torch import Tensor, nn

from model.loss import cross_entropy
from parallel.ddp import DDPBucketed, DDPFlat, DDPIndividualParameters, DDPNaive, plan_buckets
from parallel.launch import RankFailed, run_ranks

WORLD = 2
STEPS = 4
IN_FEATURES, WIDTH, CLASSES = 8, 16, 5
ROWS_PER_RANK = 6
TIMEOUT_S = 60
# SGD with momentum and weight decay: a parameter handed a zero gradient instead of none would move.
SGD_OPTIONS = dict(lr=0.1, momentum=0.9, weight_decay=0.01)

# Synchronized fp32 gradients, reverse order (bytes): head.bias 20, head.weight 320, rare.bias 64,
# rare.weight 1024, tied.bias 64, shared.bias 64, shared.weight 1024, inp.bias 64, inp.weight 512: 3156 B.
BUCKETS_MB = {
    "bucketed-one": 1.0,  # all in one
    "bucketed-two": 0.0019,  # 1992 B: 1556 B, then 1600 B
    "bucketed-six": 0.0005,  # 524 B: the 1024 B weights alone, small ones together where they fit
}
WRAPPERS = {
    "naive": DDPNaive,
    "flat": DDPFlat,
    "individual": DDPIndividualParameters,
    **{name: partial(DDPBucketed, bucket_size_mb=size) for name, size in BUCKETS_MB.items()},
}
BUCKET_COUNTS = {"bucketed-one": 1, "bucketed-two": 2, "bucketed-six": 6}


class SharedWeightNet(nn.Module):
    """A Parameter reachable twice (`tied.weight is shared.weight`), a frozen layer, a buffer, and a branch
    (`rare`) that only flagged rows take: a rank without such rows gets no gradient for it."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(IN_FEATURES, WIDTH)
        self.shared = nn.Linear(WIDTH, WIDTH)
        self.tied = nn.Linear(WIDTH, WIDTH)
        self.tied.weight = self.shared.weight
        self.frozen = nn.Linear(WIDTH, WIDTH).requires_grad_(False)
        self.rare = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)
        self.register_buffer("input_scale", torch.rand(IN_FEATURES) + 0.5)

    def forward(self, x: Tensor, rare_rows: Tensor) -> Tensor:  # x (N, IN), rare_rows (N,) bool -> (N, C)
        h = torch.tanh(self.inp(x * self.input_scale))
        h = torch.tanh(self.shared(h))
        h = torch.tanh(self.frozen(h))
        h = torch.tanh(self.tied(h))
        if rare_rows.any():
            h = torch.where(rare_rows[:, None], h + self.rare(h), h)
        return self.head(h)


def make_model(seed: int) -> SharedWeightNet:
    torch.manual_seed(seed)
    return SharedWeightNet()


def whole_batch(step: int) -> tuple[Tensor, Tensor, Tensor]:
    """x (R, IN), targets (R,), rare_rows (R,) for R = WORLD * ROWS_PER_RANK; rank r takes the r-th slice.

    Odd steps flag rows of the last rank only (one rank uses `rare`, the other not); even steps flag none
    (no rank uses it: its gradient must stay None)."""
    gen = torch.Generator().manual_seed(1000 + step)
    rows = WORLD * ROWS_PER_RANK
    x = torch.randn(rows, IN_FEATURES, generator=gen)
    targets = torch.randint(0, CLASSES, (rows,), generator=gen)
    rare_rows = torch.zeros(rows, dtype=torch.bool)
    if step % 2 == 1:
        rare_rows[-ROWS_PER_RANK:] = torch.rand(ROWS_PER_RANK, generator=gen) < 0.7
        rare_rows[-1] = True
    return x, targets, rare_rows


def snapshot(tensors: dict[str, Tensor | None]) -> dict[str, Tensor | None]:
    return {name: None if t is None else t.detach().cpu().clone() for name, t in tensors.items()}


def train_one_process(steps: int = STEPS) -> dict:
    """The reference: rank 0's initial weights, the whole batch, the mean loss over all its rows."""
    model = make_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), **SGD_OPTIONS)
    grads = []
    for step in range(steps):
        x, targets, rare_rows = whole_batch(step)
        optimizer.zero_grad()
        cross_entropy(model(x, rare_rows), targets).backward()
        grads.append(snapshot({name: p.grad for name, p in model.named_parameters()}))
        optimizer.step()
    return dict(grads=grads, final=snapshot(model.state_dict()))


def _train_every_variant(rank: int, world_size: int, variants: list[str], device_type: str) -> bytes:
    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    rows = slice(rank * ROWS_PER_RANK, (rank + 1) * ROWS_PER_RANK)
    results = {}
    for variant in variants:
        model = make_model(seed=rank).to(device)  # every rank starts from other weights
        ddp = WRAPPERS[variant](model)
        start = snapshot(model.state_dict())
        optimizer = torch.optim.SGD(model.parameters(), **SGD_OPTIONS)
        grads = []
        for step in range(STEPS):
            x, targets, rare_rows = (t[rows].to(device) for t in whole_batch(step))
            optimizer.zero_grad()
            # The mean over this rank's rows; averaged over equal shards, the mean over the whole batch.
            cross_entropy(ddp(x, rare_rows), targets).backward()
            ddp.finish_gradient_synchronization()
            grads.append(snapshot({name: p.grad for name, p in model.named_parameters()}))
            optimizer.step()
        results[variant] = dict(
            start=start,
            grads=grads,
            final=snapshot(model.state_dict()),
            buckets=getattr(ddp, "bucket_parameter_names", None),
        )
        # Nothing may keep the model alive once the wrapper and the optimizer are dropped (gradient
        # hooks on the parameters are one way to leak it): its memory must be back for the next model.
        model_ref = weakref.ref(model)
        del ddp, model, optimizer
        gc.collect()
        results[variant]["released"] = model_ref() is None
    return results


def train_on_ranks(backend: str, device_type: str) -> list[dict]:
    return run_ranks(
        _train_every_variant, WORLD, backend=backend, args=(list(WRAPPERS), device_type), timeout_s=TIMEOUT_S
    )


@pytest.fixture(scope="module")
def reference() -> dict:
    return train_one_process()


@pytest.fixture(scope="module")
def trained() -> list[dict]:
    return train_on_ranks("gloo", "cpu")


def assert_matches(rank_result: dict, reference: dict, **tol) -> None:
    for step, (grads, expected) in enumerate(zip(rank_result["grads"], reference["grads"], strict=True)):
        for name, grad in grads.items():
            if expected[name] is None:
                assert grad is None, f"step {step}: {name} has a gradient; in one process it has none"
            else:
                assert grad is not None, f"step {step}: {name} has no gradient"
                torch.testing.assert_close(
                    grad, expected[name], **tol, msg=lambda m, s=step, n=name: f"{s} {n}: {m}"
                )
    for name, value in rank_result["final"].items():
        torch.testing.assert_close(value, reference["final"][name], **tol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("variant", list(WRAPPERS))
def test_every_rank_starts_from_rank_zero_weights(trained, variant):
    rank_zero = snapshot(make_model(seed=0).state_dict())
    rank_one = snapshot(make_model(seed=1).state_dict())
    assert not torch.equal(rank_zero["frozen.weight"], rank_one["frozen.weight"])
    for rank_result in trained:
        for name, value in rank_result[variant]["start"].items():
            assert torch.equal(value, rank_zero[name]), name  # frozen weights and the buffer too


@pytest.mark.parametrize("variant", list(WRAPPERS))
def test_trains_like_one_process_on_the_whole_batch(trained, reference, variant):
    # fp32 on both sides; only the order of the sum over the batch differs: default float32 tolerances.
    for rank_result in trained:
        assert_matches(rank_result[variant], reference)


@pytest.mark.parametrize("variant", list(WRAPPERS))
def test_dropping_the_wrapper_releases_the_model(trained, variant):
    for rank, result in enumerate(trained):
        assert result[variant]["released"], f"rank {rank}: the {variant} wrapper's model is still alive"


def test_the_reference_has_rare_and_missing_gradients(reference):
    """The cases the variants are checked on: `rare` without a gradient on even steps, with one on odd
    steps (from one rank's rows), and the frozen layer never."""
    assert [grads["rare.weight"] is None for grads in reference["grads"]] == [True, False, True, False]
    assert all(grads["frozen.weight"] is None for grads in reference["grads"])
    model = make_model(seed=0)
    assert model.tied.weight is model.shared.weight
    assert "tied.weight" not in reference["grads"][0]  # named_parameters() lists it once, as shared.weight


@pytest.mark.parametrize(("variant", "count"), list(BUCKET_COUNTS.items()))
def test_buckets_fill_in_reverse_parameter_order(trained, variant, count):
    buckets = trained[0][variant]["buckets"]
    assert len(buckets) == count
    sizes = {
        name: p.numel() * p.element_size()
        for name, p in make_model(seed=0).named_parameters()
        if p.requires_grad
    }
    assert "tied.weight" not in sizes and "frozen.weight" not in sizes
    assert [name for bucket in buckets for name in bucket] == list(sizes)[::-1]
    limit = BUCKETS_MB[variant] * 2**20
    assert all(len(bucket) == 1 or sum(sizes[name] for name in bucket) <= limit for bucket in buckets)
    assert all(rank_result[variant]["buckets"] == buckets for rank_result in trained)


def test_plan_buckets_sizes_and_dtypes():
    params = [
        torch.empty(100),  # 400 B
        torch.empty(10),  # 40 B
        torch.empty(10),  # 40 B
        torch.empty(1000),  # 4000 B: larger than the bucket
        torch.empty(10, dtype=torch.float64),  # 80 B, another dtype
        torch.empty(20),  # 80 B
        torch.empty(20),  # 80 B
    ]
    assert plan_buckets(params, bucket_bytes=200) == [[6, 5], [4], [3], [2, 1], [0]]
    assert plan_buckets(params, bucket_bytes=math.inf) == [[6, 5], [4], [3, 2, 1, 0]]
    assert plan_buckets([], bucket_bytes=200) == []


@pytest.mark.parametrize("bucket_size_mb", [0, -1.0, math.nan, math.inf, "25", True, None])
def test_bucket_size_must_be_a_positive_number(bucket_size_mb):
    with pytest.raises(ValueError, match=r"bucket_size_mb must be a finite number > 0 \(MiB\); got"):
        DDPBucketed(make_model(seed=0), bucket_size_mb=bucket_size_mb)


@pytest.mark.parametrize("variant", list(WRAPPERS))
def test_a_process_group_is_required(variant):
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match=r"needs torch\.distributed to be initialized"):
        WRAPPERS[variant](make_model(seed=0))


def _rank_one_raises_after_backward(rank: int, world_size: int) -> None:
    model = make_model(seed=rank)
    ddp = DDPBucketed(model, bucket_size_mb=BUCKETS_MB["bucketed-six"])
    for step in range(STEPS):
        x, targets, rare_rows = whole_batch(step)
        loss = cross_entropy(ddp(x, rare_rows), targets)
        if rank == 1 and step == 1:
            raise FloatingPointError("rank one's loss diverged")
        loss.backward()
        ddp.finish_gradient_synchronization()  # rank 0 waits here for buckets rank 1 never sends


def test_a_rank_that_raises_mid_training_fails_the_run_with_its_error():
    start = time.monotonic()
    with pytest.raises(RankFailed, match="FloatingPointError: rank one's loss diverged") as err:
        run_ranks(_rank_one_raises_after_backward, WORLD, timeout_s=TIMEOUT_S)
    assert err.value.rank == 1
    assert time.monotonic() - start < TIMEOUT_S
    assert not [p for p in torch.multiprocessing.active_children() if p.name.startswith("rank")]


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs for NCCL with 2 ranks")
def test_every_variant_trains_like_one_process_over_nccl(reference):
    trained = train_on_ranks("nccl", "cuda")
    # GPU float32 kernels sum in another order than the CPU reference's; cuBLAS does not use TF32 for
    # fp32 unless asked. 1e-5 relative is ten times the CPU tolerance, a thousandth of one SGD update.
    for rank_result in trained:
        for variant in WRAPPERS:
            assert_matches(rank_result[variant], reference, rtol=1e-5, atol=1e-5)
