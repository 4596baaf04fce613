"""The collectives of sharded training, one small spec each: the call, the placements torch offers, the
buffers, nccl-tests' bus bandwidth factor and the known values of the correctness check.

Sizes and bandwidths follow nccl-tests (docs/PERFORMANCE.md of NVIDIA/nccl-tests): a result's size is
the largest buffer of a rank, the whole message of all-reduce and broadcast, the gathered buffer of
all-gather (each rank sends size / n), the buffer before scattering of reduce-scatter (each rank keeps
size / n) and the send buffer of all-to-all (size / n to each peer). Algorithm bandwidth is size over
time; bus bandwidth multiplies it by what each rank's link carries per byte of size, so it can be set
against the link's peak whatever the number of ranks n:

| collective | bus factor | why |
| --- | --- | --- |
| all_reduce | 2 (n - 1) / n | a reduce-scatter and an all-gather of n - 1 chunks each |
| all_gather | (n - 1) / n | receives the n - 1 chunks of its peers |
| reduce_scatter | (n - 1) / n | sends the n - 1 chunks its peers keep |
| broadcast | 1 | every byte passes every link of the pipeline once |
| all_to_all | (n - 1) / n | sends n - 1 of its n chunks away |

In place, all-gather's input is this rank's chunk of its output and reduce-scatter's output is this
rank's chunk of its input, as nccl-tests places them; all-reduce and broadcast exist in place only,
all-to-all out of place only (NCCL has no in-place all-to-all).

The check runs one collective on small integers and counts the elements that differ from what it
must give, as nccl-tests' #wrong: every partial sum is a positive integer no larger than the result,
so it is exact in bf16 (up to 256) and fp32 (up to 2^24) in any order of summation. Collectives that
only move data send values below 252 at any world size; sums grow with it (see size_problem).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from perf.cases.declare import Axis, Derived, Flag, Suite, cell
from perf.cases.transfer import byte_size_label

# What the benchmarks pass to the harness as `suite`. fp32 all-reduce keeps "allreduce": its stored
# baselines and the report's bus bandwidth plot (perf/tools/reporting/plots.py) read that suite as one
# series per backend and world size; every other collective and dtype is "collectives".
ALLREDUCE_SUITE = "allreduce"
SUITE = "collectives"
# The process-group backends, in the order tables and plots list them: gloo (CPU tensors), nccl (GPUs).
ALLREDUCE_BACKENDS = ("gloo", "nccl")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
PLACEMENTS = ("in_place", "out_of_place")
# The check counts wrong elements this many at a time: a temporary of at most 16 MiB (bool) beside
# buffers of up to 8 GiB.
COUNT_SLICE = 2**24

# torch 2.13 renamed all_gather_into_tensor and reduce_scatter_tensor to *_single (same arguments)
# and the old names warn (FutureWarning) on every call; a GPU runner's older torch has the old ones only.
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _all_reduce(source: torch.Tensor, result: torch.Tensor) -> None:
    dist.all_reduce(result)


def _all_gather(source: torch.Tensor, result: torch.Tensor) -> None:
    _ALL_GATHER(result, source)


def _reduce_scatter(source: torch.Tensor, result: torch.Tensor) -> None:
    _REDUCE_SCATTER(result, source)


def _broadcast(source: torch.Tensor, result: torch.Tensor) -> None:
    dist.broadcast(result, src=0)


def _all_to_all(source: torch.Tensor, result: torch.Tensor) -> None:
    dist.all_to_all_single(result, source)


@dataclass(frozen=True)
class Collective:
    """One collective. `layout`: "same" (input and output of `size` bytes, one tensor in place),
    "gather" (the input is a 1/n chunk of the output) or "scatter" (the output a 1/n chunk of the
    input). `sent(rank, n)` and `expected(rank, n)`: the check's value per chunk of a rank's input
    before the call and of its output after it (one value: the whole tensor; n values: its n chunks)."""

    name: str
    call: Callable[[torch.Tensor, torch.Tensor], None]  # (input, output)
    placements: tuple[str, ...]
    layout: str
    chunked: bool  # the size must split into n equal chunks
    bus_factor: Callable[[int], float]
    sent: Callable[[int, int], tuple[int, ...]]
    expected: Callable[[int, int], tuple[int, ...]]


def _triangle(n: int) -> int:
    return n * (n + 1) // 2  # 1 + 2 + ... + n: each rank r contributes r + 1


def _tag(k: int) -> int:
    """1 to 251 (the largest prime below 256): exact in bf16, and distinct for k below 251."""
    return 1 + k % 251


COLLECTIVES: dict[str, Collective] = {
    c.name: c
    for c in (
        Collective(
            "all_reduce",
            _all_reduce,
            ("in_place",),
            "same",
            chunked=False,
            bus_factor=lambda n: 2 * (n - 1) / n,
            sent=lambda r, n: (r + 1,),
            expected=lambda r, n: (_triangle(n),),
        ),
        Collective(
            "all_gather",
            _all_gather,
            PLACEMENTS,
            "gather",
            chunked=True,
            bus_factor=lambda n: (n - 1) / n,
            sent=lambda r, n: (_tag(r),),
            expected=lambda r, n: tuple(_tag(s) for s in range(n)),
        ),
        # Rank 0 adds j to chunk j, so a rank that kept another rank's sum has a wrong value.
        Collective(
            "reduce_scatter",
            _reduce_scatter,
            PLACEMENTS,
            "scatter",
            chunked=True,
            bus_factor=lambda n: (n - 1) / n,
            sent=lambda r, n: tuple(r + 1 + (j if r == 0 else 0) for j in range(n)),
            expected=lambda r, n: (_triangle(n) + r,),
        ),
        # Every rank starts with its own value: one that missed the broadcast keeps it.
        Collective(
            "broadcast",
            _broadcast,
            ("in_place",),
            "same",
            chunked=False,
            bus_factor=lambda n: 1.0,
            sent=lambda r, n: (_tag(r),),
            expected=lambda r, n: (_tag(0),),
        ),
        # A value per (source, destination), distinct up to 15 ranks: a chunk from the wrong peer, or
        # a rank's own chunk left where it was, reads wrong.
        Collective(
            "all_to_all",
            _all_to_all,
            ("out_of_place",),
            "same",
            chunked=True,
            bus_factor=lambda n: (n - 1) / n,
            sent=lambda r, n: tuple(_tag(n * r + j) for j in range(n)),
            expected=lambda r, n: tuple(_tag(n * s + r) for s in range(n)),
        ),
    )
}


@dataclass(frozen=True)
class CollectiveCase:
    """One collective in one dtype and placement; reads as its benchmarks' id, e.g.
    'all_gather-bf16-out_of_place'."""

    collective: str
    dtype: str
    placement: str

    def __post_init__(self) -> None:
        for what, value, accepted in (
            ("collective", self.collective, tuple(COLLECTIVES)),
            ("dtype", self.dtype, tuple(DTYPES)),
            ("placement", self.placement, PLACEMENTS),
        ):
            if value not in accepted:
                raise ValueError(f"{what}: unknown value {value!r}; accepted: {', '.join(accepted)}")
        offered = COLLECTIVES[self.collective].placements
        if self.placement not in offered:
            raise ValueError(f"{self.collective} exists {' and '.join(offered)} only; got {self.placement}")

    def __str__(self) -> str:
        return f"{self.collective}-{self.dtype}-{self.placement}"

    @property
    def spec(self) -> Collective:
        return COLLECTIVES[self.collective]

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


def cases(
    collectives: Sequence[str], dtypes: Sequence[str], placements: Sequence[str]
) -> tuple[CollectiveCase, ...]:
    """Every placement each collective offers among `placements`, in every dtype, in that order."""
    return tuple(
        CollectiveCase(c, d, p)
        for c in collectives
        for d in dtypes
        for p in placements
        if p in COLLECTIVES[c].placements
    )


def suite_of(case: CollectiveCase) -> str:
    return ALLREDUCE_SUITE if (case.collective, case.dtype) == ("all_reduce", "fp32") else SUITE


def size_problem(case: CollectiveCase, size_bytes: int, world_size: int) -> str | None:
    """Why `case` is not measured at `size_bytes` on `world_size` ranks, or None.

    Sizes are not rounded to fit: a result's size is the size asked for, so that the same name
    means the same message in every run. A size that is not whole elements, or not n equal chunks
    where the collective splits it, is skipped; so is a world size at which the check's sums exceed
    the integers the dtype holds exactly (bf16: reduce-scatter beyond 21 ranks, all-reduce beyond 22).
    """
    if not isinstance(size_bytes, int) or isinstance(size_bytes, bool) or size_bytes <= 0:
        raise ValueError(f"size_bytes: a positive int is accepted; got {size_bytes!r}")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size: an int >= 1 is accepted; got {world_size!r}")
    itemsize = case.torch_dtype.itemsize
    if size_bytes % itemsize:
        return f"{byte_size_label(size_bytes)} is not whole {case.dtype} elements ({itemsize} bytes each)"
    elements = size_bytes // itemsize
    if case.spec.chunked and elements % world_size:
        return (
            f"{elements} {case.dtype} elements do not split into {world_size} equal chunks, one per rank "
            f"({case.collective} needs a multiple of {world_size * itemsize} bytes)"
        )
    largest = largest_check_value(case.spec, world_size)
    exact = round(2 / torch.finfo(case.torch_dtype).eps)  # 2^(significand bits): 2^24 fp32, 2^8 bf16
    if largest > exact:
        return (
            f"the check's values reach {largest} with {world_size} ranks; {case.dtype} holds integers "
            f"exactly up to {exact}"
        )
    return None


def largest_check_value(spec: Collective, world_size: int) -> int:
    """The largest value the check sends or expects: every partial sum lies between 1 and it."""
    return max(max(*spec.sent(r, world_size), *spec.expected(r, world_size)) for r in range(world_size))


def bus_bandwidth_gbps(algbw_gbps: float, collective: str, world_size: int) -> float:
    """nccl-tests' bus bandwidth: algbw times the collective's factor (see the table above)."""
    if collective not in COLLECTIVES:
        raise ValueError(f"collective: unknown value {collective!r}; accepted: {', '.join(COLLECTIVES)}")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size: an int >= 1 is accepted; got {world_size!r}")
    return algbw_gbps * COLLECTIVES[collective].bus_factor(world_size)


def algorithm_bandwidth_gbps(size_bytes: int, seconds: float) -> float:
    """The size (see above) over the time of one collective, in GB/s (1e9 bytes)."""
    if not seconds > 0:
        raise ValueError(f"seconds: a positive number is accepted; got {seconds!r}")
    return size_bytes / seconds / 1e9


# --------------------------------------------------------------------------- buffers and the check
def element_counts(spec: Collective, elements: int, world_size: int) -> tuple[int, int]:
    """(input, output) elements of a rank for a size of `elements`."""
    chunk = elements // world_size
    return (
        chunk if spec.layout == "gather" else elements,
        chunk if spec.layout == "scatter" else elements,
    )


def rank_elements(spec: Collective, elements: int, world_size: int, in_place: bool) -> int:
    """Elements a rank allocates: in place, the larger buffer holds the smaller one."""
    counts = element_counts(spec, elements, world_size)
    return max(counts) if in_place else sum(counts)


def buffers(
    case: CollectiveCase, elements: int, rank: int, world_size: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, output) of a rank, zeroed; in place, the smaller is this rank's chunk of the larger
    (one tensor where both are the same size).

    Zeros stay zeros however many reductions add them up: no overflow to inf, and no subnormals,
    which the CPU adds more slowly, over hundreds of iterations.
    """
    spec, dtype = case.spec, case.torch_dtype
    in_count, out_count = element_counts(spec, elements, world_size)
    if case.placement == "out_of_place":
        return (
            torch.zeros(in_count, dtype=dtype, device=device),
            torch.zeros(out_count, dtype=dtype, device=device),
        )
    larger = torch.zeros(max(in_count, out_count), dtype=dtype, device=device)
    if in_count == out_count:
        return larger, larger
    mine = larger.narrow(0, rank * (elements // world_size), elements // world_size)
    return (mine, larger) if spec.layout == "gather" else (larger, mine)


def fill(tensor: torch.Tensor, values: Sequence[int]) -> None:
    """Chunk j of `tensor` (len(values) equal chunks) set to values[j]."""
    for chunk, value in zip(tensor.view(len(values), -1), values, strict=True):
        chunk.fill_(value)


def count_wrong(tensor: torch.Tensor, values: Sequence[int]) -> int:
    """Elements of chunk j of `tensor` (len(values) equal chunks) that differ from values[j]."""
    wrong = torch.zeros((), dtype=torch.int64, device=tensor.device)
    for chunk, value in zip(tensor.view(len(values), -1), values, strict=True):
        for part in chunk.split(COUNT_SLICE):
            wrong += torch.count_nonzero(part != value)
    return int(wrong.item())


def first_wrong(tensor: torch.Tensor, values: Sequence[int]) -> tuple[int, float, int] | None:
    """The first element of `tensor` that differs from its chunk's value, as (flat index, value found,
    value expected); None where every element agrees."""
    chunks = tensor.view(len(values), -1)
    for j, (chunk, value) in enumerate(zip(chunks, values, strict=True)):
        offset = j * chunks.shape[1]
        for part in chunk.split(COUNT_SLICE):
            differs = (part != value).nonzero()
            if differs.numel():
                index = int(differs[0, 0])
                return offset + index, float(part[index]), value
            offset += part.numel()
    return None


# --------------------------------------------------------------------------- the suite's declaration
# --allreduce-sweep: 8 B to 8 GiB, doubling, as nccl-tests sweeps (-b 8 -e 8G -f 2).
ALLREDUCE_SWEEP = tuple(2**p for p in range(3, 34))


def collective_run_cases(tier) -> tuple[CollectiveCase, ...]:
    """Every collective case one run of ranks measures: each placement a collective offers."""
    return cases(tier.collectives, tier.collective_dtypes, tier.placements)


def allreduce_dtypes(tier) -> tuple[str, ...]:
    """test_allreduce's dtypes: all-reduce exists in place only, under the names its baselines have."""
    return tuple(c.dtype for c in collective_run_cases(tier) if c.collective == "all_reduce")


def collective_cases(tier) -> tuple[CollectiveCase, ...]:
    """test_collective's cases: every collective case but all-reduce's."""
    return tuple(c for c in collective_run_cases(tier) if c.collective != "all_reduce")


def _out_of_place(case: CollectiveCase) -> bool:
    return case.placement == "out_of_place"


def _broadcast(case: CollectiveCase) -> bool:
    return case.collective == "broadcast"


SUITES = (
    # Collectives (perf/test_allreduce.py, perf/test_collectives.py): the message bytes of every
    # collective, process counts (those beyond the GPUs present skip for nccl), backends, and the
    # collectives, dtypes and placements measured.
    Suite(
        "collectives",
        axes=(
            Derived("allreduce_dtypes", allreduce_dtypes, unnamed="fp32"),
            Derived("collective_cases", collective_cases),
            Axis(
                "collective_backends",
                # gloo moves CPU tensors: `default` leaves it to `full` (over 17 minutes at its sizes
                # on a GPU host; NOTES.md: the default tier on one H200).
                values={"cpu": ("gloo",), "pr": ("nccl",), "default": ("nccl",)},
                default=("nccl", "gloo"),
                aliases=("allreduce-backends",),
                help="comma-separated process-group backends of every collective: gloo (CPU tensors), "
                "nccl (GPUs)",
                choices=ALLREDUCE_BACKENDS,
            ),
            Axis(
                "world_sizes",
                id_prefix="world",
                # cpu: ranks beyond the cores share them; 4 ranks on two cores took 47 s for the collectives
                # and 55 s for data parallel (NOTES.md: the CPU tier in five minutes).
                values={"cpu": (2,), "pr": (2,)},
                default=(2, 4, 8),
                help="comma-separated process counts, e.g. 2,4,8",
                read="ints",
            ),
            Axis(
                "collective_sizes",
                label=byte_size_label,
                # gloo on a laptop: 10 MiB is near gloo's bandwidth already (NOTES.md: comments).
                values={"cpu": (2**20,), "pr": (2**30,)},
                default=(2**20, 10 * 2**20, 100 * 2**20, 2**30),
                aliases=("allreduce-sizes",),
                help="comma-separated message bytes of every collective, with K, M or G, e.g. 1M,1G",
                read="sizes",
            ),
            Axis(
                "collectives",
                argument=False,
                default=tuple(COLLECTIVES),
                help=f"comma-separated: {', '.join(COLLECTIVES)}",
                choices=tuple(COLLECTIVES),
            ),
            Axis(
                "collective_dtypes",
                argument=False,
                # cpu: one dtype; gloo's bf16 path is the same code, and 7 more rows of the CPU run's table.
                values={"cpu": ("fp32",), "pr": ("bf16",)},
                default=tuple(DTYPES),
                help=f"comma-separated: {', '.join(DTYPES)}",
                choices=tuple(DTYPES),
            ),
            Axis(
                "placements",
                argument=False,
                default=PLACEMENTS,
                help=f"comma-separated: {', '.join(PLACEMENTS)}",
                choices=PLACEMENTS,
            ),
            Derived("collective_run_cases", collective_run_cases, argument=False),
        ),
        flags=(
            Flag(
                "allreduce-sweep",
                sets="collective_sizes",
                value=ALLREDUCE_SWEEP,
                help="every collective's sizes from 8 B to 8 GiB, doubling (as nccl-tests), in place of the "
                "tier's",
            ),
        ),
        # Where two GPUs are visible: every collective at 1 GiB in bf16.
        cells={
            "pr": (
                cell("test_allreduce.py::test_allreduce"),
                cell("test_collectives.py::test_collective", collective_case=_out_of_place),
                cell("test_collectives.py::test_collective", collective_case=_broadcast),
            )
        },
    ),
)
