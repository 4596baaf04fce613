"""The norm suite's cases: the model's RMSNorm (fp32 inside, model/layers.py) against torch's own
F.rms_norm in the input's dtype and F.layer_norm, forward and forward+backward, per hidden width."""

from __future__ import annotations

from perf.cases.declare import Axis, Figure, Key, Suite, Table, cell

PROVIDERS = ("model_rms", "torch_rms", "layer_norm")
MODES = ("forward", "forward_backward")
ROWS = {"cpu": 256}  # rows per call by tier; every other tier: 8192 (a 2.7b batch's tokens per rank)

SUITES = (
    Suite(
        "norm",
        axes=(
            Axis(
                "norm_widths",
                id_prefix="d",
                values={"cpu": (256,), "pr": (2560,)},
                default=(1024, 2560, 8192),  # large's, 2.7b's and beyond
                help="comma-separated hidden widths of the norm suite, e.g. 2560",
                read="ints",
            ),
            Axis(
                "norm_providers",
                default=PROVIDERS,
                help=f"comma-separated: {', '.join(PROVIDERS)}",
                choices=PROVIDERS,
            ),
        ),
        cells={"pr": (cell("test_norm.py::test_norm", precision="bf16"),)},
        records=("provider", "mode", "width", "rows"),
        tables=(
            Table(
                "norms: GB/s of the model's RMSNorm, torch's rms_norm and layer_norm (ratio above 1: the "
                "model's faster)",
                keys=(Key("mode"), Key("width"), Key("precision", "prec")),
                figures=(Figure("gb_per_s", "GB/s", ".1f"),),
                across=("provider", PROVIDERS),
                ratios=(("model_rms", "torch_rms"),),
                order=75,
            ),
        ),
    ),
)
