"""AdamW written out with plain tensor ops, a builder that picks it or torch's, and grad clipping.

The own AdamW is the readable reference: one parameter at a time, no foreach or fused kernels.
It keeps torch.optim.AdamW's defaults, update order and state layout ('step' as a float32
tensor on the CPU, 'exp_avg', 'exp_avg_sq'), so state dicts move between the two.
"""

from collections.abc import Callable, Iterable

import torch
from torch import Tensor

OPTIMIZER_IMPLS = ("own", "torch", "torch_fused")


def _check_hyperparameters(lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> None:
    if not lr >= 0.0:
        raise ValueError(f"lr must be in [0, inf), got {lr}")
    if len(betas) != 2:
        raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"betas[{i}] must be in [0, 1), got {beta}")
    if not eps >= 0.0:
        raise ValueError(f"eps must be in [0, inf), got {eps}")
    if not weight_decay >= 0.0:
        raise ValueError(f"weight_decay must be in [0, inf), got {weight_decay}")


class AdamW(torch.optim.Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019), step for step as torch.optim.AdamW."""

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        # Checked here rather than in __init__ so per-group overrides are validated too.
        merged = {**self.defaults, **param_group}
        _check_hyperparameters(merged["lr"], merged["betas"], merged["eps"], merged["weight_decay"])
        super().add_param_group(param_group)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2) = group["lr"], group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                self._update(p, p.grad, lr, beta1, beta2, group["eps"], group["weight_decay"])
        return loss

    def _update(
        self, p: Tensor, grad: Tensor, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float
    ) -> None:
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        # 'step' lives on the CPU, so reading it back never waits for the GPU.
        t = state["step"].item()
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]

        # Decay before the Adam update, as torch does: p <- p - lr * wd * p.
        p.mul_(1.0 - lr * weight_decay)
        exp_avg.lerp_(grad, 1.0 - beta1)  # m <- beta1 m + (1 - beta1) g
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)  # v <- beta2 v + (1 - beta2) g^2

        # p <- p - lr * m_hat / (sqrt(v_hat) + eps), m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t)
        step_size = lr / (1.0 - beta1**t)
        denom = (exp_avg_sq.sqrt() / (1.0 - beta2**t) ** 0.5).add_(eps)
        p.addcdiv_(exp_avg, denom, value=-step_size)


# AdamW implementations whose step can be captured into a CUDA graph: torch's keep the step count
# on the device with capturable=True; the own one reads it on the host every step.
CAPTURABLE_IMPLS = ("torch", "torch_fused")


def build_optimizer(
    params: Iterable[Tensor] | Iterable[dict], impl: str = "own", capturable: bool = False, **kwargs
) -> torch.optim.Optimizer:
    """AdamW from one of OPTIMIZER_IMPLS; kwargs are its hyperparameters (lr, betas, eps, weight_decay).

    capturable=True builds one whose step a CUDA graph can capture (CAPTURABLE_IMPLS only).
    """
    if impl not in OPTIMIZER_IMPLS:
        raise ValueError(f"unknown optimizer impl {impl!r}; accepted: {', '.join(OPTIMIZER_IMPLS)}")
    if capturable and impl not in CAPTURABLE_IMPLS:
        raise ValueError(
            f"optimizer impl {impl!r} reads its step count on the host every step, which a CUDA graph "
            f"cannot capture; capturable ones: {', '.join(CAPTURABLE_IMPLS)}"
        )
    if impl == "own":
        return AdamW(params, **kwargs)
    options = {"capturable": True} if capturable else {}
    if impl == "torch_fused":
        options["fused"] = True
    return torch.optim.AdamW(params, **options, **kwargs)


def clip_grad_norm(parameters: Tensor | Iterable[Tensor], max_norm: float, eps: float = 1e-6) -> Tensor:
    """Scale all gradients together so their total L2 norm is at most max_norm; return the norm before.

    Parameters without a gradient are skipped. The norm is accumulated in fp32 whatever the grad dtype.
    """
    if not max_norm > 0.0:
        raise ValueError(f"max_norm must be in (0, inf), got {max_norm}")
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    device = grads[0].device
    norms = [torch.linalg.vector_norm(g, 2, dtype=torch.float32).to(device) for g in grads]
    total_norm = torch.linalg.vector_norm(torch.stack(norms), 2)
    # Multiplying by min(1, coef) instead of branching on `norm > max_norm` keeps the norm on the
    # device: a Python `if` on it would synchronize with the GPU on every step.
    coef = (max_norm / (total_norm + eps)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.to(g.device))
    return total_norm
