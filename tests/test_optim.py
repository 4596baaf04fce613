import copy

import pytest
import torch
from torch import nn

from model.optim import OPTIMIZER_IMPLS, AdamW, build_optimizer, clip_grad_norm

# Same algorithm in fp32, same operation order: a few ulps apart after each step.
TOL = dict(rtol=1e-6, atol=1e-7)
# The fused kernel reorders the arithmetic; still a thousand times below one update at lr=1e-2.
FUSED_TOL = dict(rtol=1e-5, atol=1e-6)
STEPS = 12

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def small_model(device: str = "cpu") -> nn.Module:
    torch.manual_seed(0)
    # An odd width beside a 1-d bias and a LayerNorm, so shapes are not all alike.
    return nn.Sequential(nn.Linear(7, 5), nn.Tanh(), nn.LayerNorm(5), nn.Linear(5, 3, bias=False)).to(device)


def set_random_grads(models: list[nn.Module], step: int) -> None:
    """Give every model the same random gradients; the last parameter gets none, to be skipped."""
    gen = torch.Generator().manual_seed(1000 + step)
    params = [list(m.parameters()) for m in models]
    for i, ps in enumerate(zip(*params, strict=True)):
        grad = None if i == len(params[0]) - 1 else torch.randn(ps[0].shape, generator=gen)
        for p in ps:
            p.grad = None if grad is None else grad.to(p.device).clone()


def param_groups(model: nn.Module, two_groups: bool, **hp) -> list[dict]:
    params = list(model.parameters())
    if not two_groups:
        return [{"params": params, **hp}]
    return [{"params": params[:2], **hp}, {"params": params[2:], **{**hp, "lr": hp.get("lr", 1e-3) * 3}}]


HYPERPARAMETERS = [
    pytest.param({}, False, id="defaults"),
    pytest.param(dict(lr=3e-2, weight_decay=0.0), False, id="no-decay"),
    pytest.param(dict(lr=1e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1), False, id="decay-0.1"),
    pytest.param(dict(lr=1e-2, weight_decay=0.05), True, id="two-groups"),
]


def run_side_by_side(make_a, make_b, device: str = "cpu", tol: dict = TOL) -> None:
    """Step two optimizers over identical models and grads; parameters must agree after every step."""
    model_a = small_model(device)
    model_b = copy.deepcopy(model_a)
    opt_a, opt_b = make_a(model_a), make_b(model_b)
    for step in range(STEPS):
        set_random_grads([model_a, model_b], step)
        opt_a.step()
        opt_b.step()
        for pa, pb in zip(model_a.parameters(), model_b.parameters(), strict=True):
            torch.testing.assert_close(pa, pb, **tol, msg=lambda m, step=step: f"step {step}: {m}")


@pytest.mark.parametrize("hp, two_groups", HYPERPARAMETERS)
def test_adamw_matches_torch_every_step(hp, two_groups):
    run_side_by_side(
        lambda m: AdamW(param_groups(m, two_groups, **hp)),
        lambda m: torch.optim.AdamW(param_groups(m, two_groups, **hp)),
    )


def test_adamw_actually_moves_and_decays():
    # Guards against both sides of the comparison doing nothing: with a zero gradient only the
    # decay acts, p <- p * (1 - lr * wd), and the moments stay zero.
    p = nn.Parameter(torch.full((4,), 2.0))
    opt = AdamW([p], lr=0.1, weight_decay=0.5)
    p.grad = torch.zeros(4)
    opt.step()
    torch.testing.assert_close(p.detach(), torch.full((4,), 2.0 * (1 - 0.1 * 0.5)))
    assert set(opt.state[p]) == {"step", "exp_avg", "exp_avg_sq"}
    assert opt.state[p]["step"].item() == 1.0


def test_adamw_skips_params_without_grad():
    model = small_model()
    last = list(model.parameters())[-1]
    before = last.detach().clone()
    opt = AdamW(model.parameters())
    set_random_grads([model], 0)
    opt.step()
    assert last.grad is None and last not in opt.state
    torch.testing.assert_close(last.detach(), before, rtol=0, atol=0)


def test_adamw_step_returns_closure_loss():
    p = nn.Parameter(torch.ones(3))
    opt = AdamW([p])

    def closure():
        loss = (p**2).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 3.0
    assert p.grad is not None


def test_state_dict_round_trip_continues_identically():
    model = small_model()
    opt = AdamW(param_groups(model, True, lr=1e-2))
    for step in range(5):
        set_random_grads([model], step)
        opt.step()
    resumed_model = copy.deepcopy(model)
    resumed = AdamW(param_groups(resumed_model, True, lr=1e-2))
    # load_state_dict keeps the tensors it is given: copy, as torch.save/torch.load would.
    resumed.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert resumed.state_dict()["param_groups"] == opt.state_dict()["param_groups"]
    for step in range(5, 10):
        set_random_grads([model, resumed_model], step)
        opt.step()
        resumed.step()
    for pa, pb in zip(model.parameters(), resumed_model.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)


def test_torch_state_dict_loads_into_own_adamw():
    # The state layout is torch's, so a run can switch implementation mid-way.
    model_torch = small_model()
    model_own = copy.deepcopy(model_torch)
    opt_torch = torch.optim.AdamW(model_torch.parameters(), lr=1e-2)
    for step in range(5):
        set_random_grads([model_torch], step)
        opt_torch.step()
    model_own.load_state_dict(model_torch.state_dict())
    opt_own = AdamW(model_own.parameters(), lr=1e-2)
    opt_own.load_state_dict(copy.deepcopy(opt_torch.state_dict()))
    for step in range(5, 10):
        set_random_grads([model_torch, model_own], step)
        opt_torch.step()
        opt_own.step()
    for pa, pb in zip(model_torch.parameters(), model_own.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, **TOL)


@pytest.mark.parametrize(
    "kwargs, name, accepted",
    [
        (dict(lr=-1e-3), "lr", "[0, inf)"),
        (dict(betas=(1.0, 0.999)), "betas[0]", "[0, 1)"),
        (dict(betas=(0.9, -0.1)), "betas[1]", "[0, 1)"),
        (dict(betas=(0.9,)), "betas", "pair"),
        (dict(eps=-1e-8), "eps", "[0, inf)"),
        (dict(weight_decay=-0.1), "weight_decay", "[0, inf)"),
        (dict(lr=float("nan")), "lr", "[0, inf)"),
    ],
)
def test_bad_hyperparameters_raise(kwargs, name, accepted):
    with pytest.raises(ValueError) as err:
        AdamW([nn.Parameter(torch.ones(2))], **kwargs)
    assert name in str(err.value) and accepted in str(err.value)


def test_bad_hyperparameter_in_a_param_group_raises():
    with pytest.raises(ValueError, match=r"lr must be in \[0, inf\)"):
        AdamW([{"params": [nn.Parameter(torch.ones(2))], "lr": -1.0}])


def build_or_skip(params, impl: str, **kwargs) -> torch.optim.Optimizer:
    try:
        return build_optimizer(params, impl=impl, **kwargs)
    except RuntimeError as err:
        if impl != "torch_fused":
            raise
        # torch < 2.4 has no fused AdamW for the CPU.
        pytest.skip(f"torch {torch.__version__} cannot build a fused AdamW here: {err}")


@pytest.mark.parametrize("impl", OPTIMIZER_IMPLS)
def test_build_optimizer_each_impl_matches_own(impl):
    opt = build_or_skip(small_model().parameters(), impl)
    assert type(opt) is (AdamW if impl == "own" else torch.optim.AdamW)
    assert opt.defaults["lr"] == 1e-3 and opt.defaults["betas"] == (0.9, 0.999)
    assert opt.defaults["eps"] == 1e-8 and opt.defaults["weight_decay"] == 0.01
    if impl == "torch_fused":
        assert opt.defaults["fused"] is True
    run_side_by_side(
        lambda m: AdamW(m.parameters(), lr=1e-2),
        lambda m: build_or_skip(m.parameters(), impl, lr=1e-2),
        tol=FUSED_TOL if impl == "torch_fused" else TOL,
    )


def test_build_optimizer_unknown_impl_lists_accepted():
    with pytest.raises(ValueError, match="unknown optimizer impl 'apex'; accepted: own, torch, torch_fused"):
        build_optimizer([nn.Parameter(torch.ones(2))], impl="apex")


@pytest.mark.gpu
@cuda_only
@pytest.mark.parametrize("impl, tol", [("torch", TOL), ("torch_fused", FUSED_TOL)], ids=["foreach", "fused"])
def test_adamw_matches_torch_on_cuda(impl, tol):
    # On CUDA torch.optim.AdamW defaults to its foreach kernels, another path than on the CPU.
    run_side_by_side(
        lambda m: AdamW(m.parameters(), lr=1e-2),
        lambda m: build_optimizer(m.parameters(), impl=impl, lr=1e-2),
        device="cuda",
        tol=tol,
    )


def grads_for_clipping(scale: float) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    torch.manual_seed(1)
    shapes = [(4, 3), (5,), (2, 2, 2), (3,)]
    ours = [nn.Parameter(torch.randn(s)) for s in shapes]
    theirs = [nn.Parameter(p.detach().clone()) for p in ours]
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if i == 2:
            continue  # no grad: must be skipped, not treated as zero or crash
        a.grad = torch.randn(a.shape) * scale
        b.grad = a.grad.clone()
    return ours, theirs


@pytest.mark.parametrize("scale", [10.0, 1e-3], ids=["clipped", "below-max"])
def test_clip_grad_norm_matches_torch(scale):
    ours, theirs = grads_for_clipping(scale)
    before = [None if p.grad is None else p.grad.clone() for p in ours]
    norm = clip_grad_norm(ours, max_norm=1.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm=1.0)
    torch.testing.assert_close(norm, expected, **TOL)
    for a, b in zip(ours, theirs, strict=True):
        assert (a.grad is None) == (b.grad is None)
        if a.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, **TOL)
    total_after = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in ours if p.grad is not None]))
    if scale == 10.0:
        assert norm > 1.0 and total_after == pytest.approx(1.0, rel=1e-5)
    else:
        assert norm < 1.0
        for a, g in zip(ours, before, strict=True):
            if g is not None:
                torch.testing.assert_close(a.grad, g, rtol=0, atol=0)


def test_clip_grad_norm_without_grads_returns_zero():
    assert clip_grad_norm([nn.Parameter(torch.ones(3))], max_norm=1.0).item() == 0.0


def test_clip_grad_norm_rejects_nonpositive_max_norm():
    with pytest.raises(ValueError, match=r"max_norm must be in \(0, inf\)"):
        clip_grad_norm([nn.Parameter(torch.ones(3))], max_norm=0.0)
