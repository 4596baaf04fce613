"""The suite's command-line options, and the tier they choose: `--tier` picks one of perf/tiers.py, the
other options replace its values axis by axis. `--allocators` selects among the memory suite's own
allocator cases (perf/test_memory.py) instead.

Every value is checked before anything is measured: a bad one stops the run with a UsageError that
names the option and the accepted values, so that a typo never runs (or stores) a different suite.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from perf.cases.attention import SWEEPS
from perf.cases.memory import ALLOCATORS
from perf.cases.transfer import parse_byte_size
from perf.tiers import (
    ALLREDUCE_SWEEP,
    AXIS_CHOICES,
    TIERS,
    Tier,
    largest_fitting_preset,
    shape_filter_problem,
)

PERF = Path(__file__).resolve().parents[1]  # the benchmarks' folder


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perf", "LM training-stack benchmarks")
    group.addoption("--device", default="auto", help="auto (cuda when present), cpu, cuda, cuda:N")
    group.addoption(
        "--tier", default="auto", help=f"auto, {', '.join(TIERS)}; auto is 'default' on a GPU, 'cpu' without"
    )
    group.addoption("--presets", help="comma-separated model presets, replacing the tier's")
    group.addoption("--precisions", help="comma-separated precisions: fp32, bf16, fp16")
    group.addoption("--contexts", help="comma-separated context lengths, e.g. 128,256,512,1024")
    group.addoption("--warmups", help="comma-separated warm-up step counts, e.g. 0,1,2,5")
    group.addoption("--impls", help="comma-separated models: naive, sdpa, flash_triton, reference")
    group.addoption("--optimizer", help="train_step AdamW: own, torch (foreach), torch_fused (default)")
    group.addoption(
        "--launches",
        help="comma-separated end-to-end step launches: eager (op by op), cuda_graph (the whole step "
        "captured once and replayed)",
    )
    group.addoption(
        "--attention-providers", help=f"comma-separated: {', '.join(AXIS_CHOICES['attention-providers'])}"
    )
    group.addoption(
        "--attention-modes", help=f"comma-separated: {', '.join(AXIS_CHOICES['attention-modes'])}"
    )
    group.addoption("--attention-sweeps", help=f"comma-separated shape sweeps: {', '.join(SWEEPS)}")
    group.addoption("--seqs", help="comma-separated sequence lengths: keeps the sweeps' shapes with these")
    group.addoption("--head-dims", help="comma-separated head dims: keeps the sweeps' shapes with these")
    group.addoption("--matmul-sizes", help="comma-separated n of the n x n matmuls, e.g. 4096,8192")
    group.addoption(
        "--transfer-sizes",
        help="comma-separated bytes per host-to-device copy, with K, M or G (binary), e.g. 1M,1G",
    )
    group.addoption(
        "--allreduce-sizes", help="comma-separated fp32 all-reduce message bytes, with K, M or G, e.g. 1M,1G"
    )
    group.addoption(
        "--allreduce-sweep",
        action="store_true",
        help="all-reduce sizes from 8 B to 8 GiB, doubling (as nccl-tests), in place of the tier's",
    )
    group.addoption("--allreduce-backends", help="comma-separated: gloo (CPU tensors), nccl (GPUs)")
    group.addoption("--collectives", help=f"comma-separated: {', '.join(AXIS_CHOICES['collectives'])}")
    group.addoption(
        "--collective-dtypes", help=f"comma-separated: {', '.join(AXIS_CHOICES['collective-dtypes'])}"
    )
    group.addoption("--placements", help=f"comma-separated: {', '.join(AXIS_CHOICES['placements'])}")
    group.addoption("--world-sizes", help="comma-separated process counts, e.g. 2,4,8")
    group.addoption("--bucket-sizes-mb", help="comma-separated DDPBucketed bucket sizes in MB, e.g. 1,10,100")
    group.addoption(
        "--allocators",
        help=f"comma-separated CUDA caching allocator settings of the memory suite: {', '.join(ALLOCATORS)}",
    )
    group.addoption(
        "--memory-snapshot",
        metavar="DIR",
        help="write a torch.cuda.memory snapshot (.pickle) and its HTML view per benchmark into DIR",
    )


def _split(option: str, raw: str, accepted: tuple | None = None) -> tuple[str, ...]:
    values = tuple(v.strip() for v in raw.split(",") if v.strip())
    if not values:
        what = f"accepted: {', '.join(map(str, accepted))}" if accepted else "give at least one value"
        raise pytest.UsageError(f"--{option}: empty; {what}")
    return values


def _parse_ints(option: str, raw: str, minimum: int) -> tuple[int, ...]:
    values = []
    for v in _split(option, raw):
        try:
            n = int(v)
        except ValueError:
            n = minimum - 1
        if n < minimum:
            raise pytest.UsageError(f"--{option}: {v!r} is not an integer >= {minimum}")
        values.append(n)
    return tuple(values)


def _parse_names(option: str, raw: str, accepted: tuple | None = None) -> tuple[str, ...]:
    accepted = AXIS_CHOICES[option] if accepted is None else accepted
    values = _split(option, raw, accepted)
    for v in values:
        if v not in accepted:
            raise pytest.UsageError(f"--{option}: unknown value {v!r}; accepted: {', '.join(accepted)}")
    return values


def _parse_positive_floats(option: str, raw: str) -> tuple[float, ...]:
    values = []
    for v in _split(option, raw):
        try:
            x = float(v)
        except ValueError:
            x = 0.0
        if not x > 0 or x == float("inf"):
            raise pytest.UsageError(f"--{option}: {v!r} is not a positive number")
        values.append(x)
    return tuple(values)


def _parse_sizes(option: str, raw: str) -> tuple[int, ...]:
    try:
        return tuple(parse_byte_size(v) for v in _split(option, raw))
    except ValueError as err:
        raise pytest.UsageError(f"--{option}: {err}") from None


def select_allocators(config: pytest.Config) -> tuple[str, ...]:
    """--allocators: the memory suite's allocator settings (perf/workloads/memory.py), all by default."""
    raw = config.getoption("allocators")
    return ALLOCATORS if raw is None else _parse_names("allocators", raw, ALLOCATORS)


def pytest_configure(config: pytest.Config) -> None:
    config.perf_allocators = select_allocators(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Benchmarks deselected: cells the tier does not keep (Tier.cells), and the memory suite's cases of
    allocators that --allocators leaves out (the benchmark's own parametrization, not the tier's)."""
    kept, left_out = [], []
    tier: Tier = config.perf_tier
    for item in items:
        callspec = getattr(item, "callspec", None)
        allocator = callspec.params.get("allocator") if callspec is not None else None
        benchmark = PERF in item.path.parents  # tests/ parametrize themselves
        dropped = benchmark and (
            (allocator is not None and allocator not in config.perf_allocators) or not tier.keeps(item.nodeid)
        )
        (left_out if dropped else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


def select_tier(config: pytest.Config, device: torch.device) -> Tier:
    name = config.getoption("tier")
    if name == "auto":
        name = "default" if device.type == "cuda" else "cpu"
    if name not in TIERS:
        raise pytest.UsageError(f"--tier: unknown tier {name!r}; accepted: auto, {', '.join(TIERS)}")

    def opt(dest: str, parse: Callable[..., tuple], *args: object) -> tuple | None:
        """The option's values by `parse`, or None where it was not given; an empty value is given
        (and refused by `parse`, naming what is accepted), never the tier's default."""
        raw = config.getoption(dest)
        return None if raw is None else parse(dest.replace("_", "-"), raw, *args)

    optimizer = config.getoption("optimizer")
    if optimizer is not None and optimizer not in AXIS_CHOICES["optimizer"]:
        raise pytest.UsageError(
            f"--optimizer: unknown value {optimizer!r}; accepted: {', '.join(AXIS_CHOICES['optimizer'])}"
        )
    presets = opt("presets", _parse_names)
    precisions = opt("precisions", _parse_names)
    contexts = opt("contexts", _parse_ints, 1)
    seqs = opt("seqs", _parse_ints, 1)
    head_dims = opt("head_dims", _parse_ints, 1)
    tier = TIERS[name].with_overrides(
        presets=presets,
        precisions=precisions,
        impls=opt("impls", _parse_names),
        contexts=contexts,
        warmups=opt("warmups", _parse_ints, 0),
        launches=opt("launches", _parse_names),
        optimizer=optimizer,
        attention_providers=opt("attention_providers", _parse_names),
        attention_modes=opt("attention_modes", _parse_names),
        attention_sweeps=opt("attention_sweeps", _parse_names),
        seqs=seqs,
        head_dims=head_dims,
        scaling_seqs=seqs,
        scaling_head_dims=head_dims,
        # The measurement suites follow --presets, --precisions and --contexts too.
        compile_presets=presets,
        compile_contexts=contexts,
        scaling_precisions=precisions,
        compile_precisions=precisions,
        step_precisions=precisions,
        memory_presets=presets,
        memory_contexts=contexts,
        graph_presets=presets,
        matmul_sizes=opt("matmul_sizes", _parse_ints, 1),
        transfer_sizes=opt("transfer_sizes", _parse_sizes),
        allreduce_sizes=ALLREDUCE_SWEEP
        if config.getoption("allreduce_sweep")
        else opt("allreduce_sizes", _parse_sizes),
        allreduce_backends=opt("allreduce_backends", _parse_names),
        collectives=opt("collectives", _parse_names),
        collective_dtypes=opt("collective_dtypes", _parse_names),
        placements=opt("placements", _parse_names),
        world_sizes=opt("world_sizes", _parse_ints, 1),
        dp_presets=presets,
        bucket_sizes_mb=opt("bucket_sizes_mb", _parse_positive_floats),
    )
    if tier.memory_presets is None:
        total = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else 0
        tier = tier.with_overrides(memory_presets=(largest_fitting_preset(total),))
    problem = shape_filter_problem(tier, given={"seqs": seqs is not None, "head-dims": head_dims is not None})
    if problem:
        raise pytest.UsageError(problem)
    return tier
