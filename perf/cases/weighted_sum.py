"""The weighted-sum suite's cases: the project's smallest Triton kernel (kernels/weighted_sum.py, a dot
product of every row of x with w) against its plain PyTorch reference, forward and forward+backward. Its
axes are declared here, once (docs/adding-a-suite.md walks through the norm suite, declared the same way).
"""

from __future__ import annotations

from perf.cases.declare import Axis, Figure, Key, Suite, Table, cell

# The kernel and the reference it is held against (a matmul of x with w through cuBLAS).
PROVIDERS = ("triton", "torch")
MODES = ("forward", "forward_backward")
# Every row has this many columns; the rows axis sets the size.
COLUMNS = 1024

SUITES = (
    Suite(
        "weighted_sum",
        axes=(
            Axis(
                "weighted_sum_sizes",
                aliases=("weighted-sum-rows",),
                id_prefix="rows",
                # Bytes read once: x is rows x 1024 values, 4 MiB (fp32) per 1024 rows at the smallest.
                values={"cpu": (4096,), "pr": (2**18,), "full": (2**12, 2**14, 2**16, 2**18, 2**20)},
                default=(2**16, 2**18),
                help="comma-separated row counts of the weighted-sum inputs (1024 columns each), e.g. 65536",
                read="ints",
            ),
            Axis(
                "weighted_sum_providers",
                # Triton's interpreter is for correctness (tests/), not timing: the CPU tier runs the
                # reference.
                values={"cpu": ("torch",)},
                default=PROVIDERS,
                help=f"comma-separated: {', '.join(PROVIDERS)}",
                choices=PROVIDERS,
            ),
        ),
        cells={"pr": (cell("test_weighted_sum.py::test_weighted_sum"),)},
        records=("provider", "mode", "rows"),
        tables=(
            Table(
                "weighted sum: GB/s of the Triton kernel and of the PyTorch reference (ratio above 1: Triton "
                "faster)",
                keys=(Key("mode"), Key("rows"), Key("precision", "prec")),
                figures=(Figure("gb_per_s", "GB/s", ".1f"),),
                across=("provider", PROVIDERS),
                ratios=(("triton", "torch"),),
                order=70,
            ),
        ),
    ),
)
