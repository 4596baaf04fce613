"""A two-layer model small enough to read off which dtype autocast gives each tensor."""

from collections.abc import Callable

import torch
from torch import Tensor, nn

from model.loss import cross_entropy
from model.precision import autocast

HIDDEN = 10


class ToyModel(nn.Module):
    """fc1 -> relu -> LayerNorm -> fc2: one matmul, a normalization, one matmul."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, HIDDEN, bias=False)
        self.relu = nn.ReLU()
        self.ln = nn.LayerNorm(HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, out_features, bias=False)

    def forward(self, x: Tensor) -> Tensor:  # (..., in_features) -> (..., out_features) logits
        return self.fc2(self.ln(self.relu(self.fc1(x))))


def _one_dtype(tensors: list[Tensor], what: str) -> torch.dtype:
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise ValueError(f"{what} do not share one dtype: {sorted(map(str, dtypes))}")
    return dtypes.pop()


def autocast_dtypes(
    model: ToyModel,
    x: Tensor,
    precision: str,
    device_type: str | torch.device,
    loss_fn: Callable[[Tensor, Tensor], Tensor] = cross_entropy,
) -> dict[str, torch.dtype]:
    """Run forward and loss under autocast, then backward; return the dtype each stage produced.

    Keys: 'params', 'fc1', 'ln', 'logits', 'loss', 'grads'. The model's gradients are replaced.
    """
    params = list(model.parameters())
    seen: dict[str, torch.dtype] = {"params": _one_dtype(params, "parameters")}

    def record(name: str):
        def hook(module: nn.Module, args: tuple, output: Tensor) -> None:
            seen[name] = output.dtype

        return hook

    handles = [
        model.fc1.register_forward_hook(record("fc1")),
        model.ln.register_forward_hook(record("ln")),
        model.fc2.register_forward_hook(record("logits")),
    ]
    model.zero_grad(set_to_none=True)
    try:
        with autocast(precision, device_type):
            logits = model(x)
            # Any in-range class will do: only dtypes are recorded.
            targets = torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)
            loss = loss_fn(logits, targets)
        # Backward outside autocast, as torch's AMP recipe says: each backward op already runs
        # in the dtype autocast chose for its forward op.
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    seen["loss"] = loss.dtype
    seen["grads"] = _one_dtype([p.grad for p in params], "gradients")
    return seen
