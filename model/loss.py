"""Next-token cross entropy, computed in fp32 whatever the logits' dtype."""

import torch
from torch import Tensor


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean over all positions of -log softmax(logits)[target].

    logits: (..., V) any float dtype; targets: (...) int64 class indices. Returns an fp32 scalar.
    """
    if targets.dtype != torch.long:
        raise ValueError(f"targets must be int64 (torch.long), got {targets.dtype}")
    if logits.shape[:-1] != targets.shape:
        shapes = f"{tuple(logits.shape)} and {tuple(targets.shape)}"
        raise ValueError(f"logits (..., V) and targets (...) must share leading dims, got {shapes}")
    vocab = logits.shape[-1]
    # bf16 carries 8 significant bits: a sum of V exponentials in it loses the loss to rounding.
    logits = logits.float().reshape(-1, vocab)  # (N, V)
    targets = targets.reshape(-1, 1)  # (N, 1)

    # loss = logsumexp(x) - x[t] = log(sum(exp(x - m))) - (x[t] - m) for any m; with m = max(x)
    # every exponent is <= 0, so nothing overflows even for logits of 1e4. The loss does not
    # depend on m, so m carries no gradient.
    shifted = logits - logits.detach().amax(dim=-1, keepdim=True)  # (N, V)
    log_normalizer = shifted.exp().sum(dim=-1).log()  # (N,)
    target_logit = shifted.gather(-1, targets).squeeze(-1)  # (N,)
    return (log_normalizer - target_logit).mean()
