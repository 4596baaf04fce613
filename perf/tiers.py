"""Which shapes each tier of the end-to-end benchmarks runs: the one registry benchmarks draw from.

A tier is a set of values per axis; every benchmark takes the axes it names (see conftest.py's
`pytest_generate_tests`). Command-line options replace a tier's values axis by axis.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from model.config import PRESETS
from model.optim import OPTIMIZER_IMPLS
from model.precision import PRECISIONS

# The project's model with each attention implementation, and the plain-PyTorch reference model
# (torch.nn modules and F.scaled_dot_product_attention) that it is measured against.
MODEL_IMPLS = ("naive", "sdpa", "reference")
CONTEXTS = (128, 256, 512, 1024)
WARMUPS = (0, 1, 2, 5)


@dataclass(frozen=True)
class Tier:
    name: str
    presets: tuple[str, ...]
    precisions: tuple[str, ...]
    contexts: tuple[int, ...]
    warmups: tuple[int, ...]
    impls: tuple[str, ...]
    # torch's fused AdamW: one pass over parameters, gradients and states. The foreach version
    # took 104 ms of a 228 ms 2.7b bf16 step on an H100 (step minus forward+backward).
    optimizer: str = "torch_fused"

    @property
    def compared_impls(self) -> tuple[str, ...]:
        """Implementations measured against the reference model: the naive attention is left out,
        it is the readable definition, not a contender."""
        return tuple(i for i in self.impls if i not in ("reference", "naive"))

    def with_overrides(self, **axes: tuple | str | None) -> Tier:
        return replace(self, **{k: v for k, v in axes.items() if v is not None})


TIERS: dict[str, Tier] = {
    "cpu": Tier(
        name="cpu",
        presets=("tiny", "mini"),
        # bf16 matmuls are emulated on most CPUs (10x slower than fp32 seen here): selectable only.
        precisions=("fp32",),
        contexts=(128,),
        warmups=(1,),
        impls=MODEL_IMPLS,
    ),
    "default": Tier(
        name="default",
        presets=("small", "large", "2.7b"),
        precisions=("fp32", "bf16"),
        contexts=(512,),
        warmups=(2,),
        impls=MODEL_IMPLS,
    ),
    "full": Tier(
        name="full",
        presets=("small", "medium", "large", "xl", "2.7b"),
        precisions=("fp32", "bf16"),
        contexts=CONTEXTS,
        warmups=WARMUPS,
        impls=MODEL_IMPLS,
    ),
}

# Accepted names per named axis, for validating command-line options (counts are checked as integers).
AXIS_CHOICES: dict[str, tuple] = {
    "presets": tuple(PRESETS),
    "precisions": PRECISIONS,
    "impls": MODEL_IMPLS,
    "optimizer": OPTIMIZER_IMPLS,
}
