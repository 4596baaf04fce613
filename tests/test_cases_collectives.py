"""The collectives' specs: bus bandwidth factors, sizes that cannot run, buffers, and the check's known
values, held against each collective simulated on several ranks in this process, correct and faulty."""

import pytest
import torch

from perf.cases import collectives as collective_cases
from perf.cases.collectives import (
    COLLECTIVES,
    CollectiveCase,
    algorithm_bandwidth_gbps,
    buffers,
    bus_bandwidth_gbps,
    cases,
    count_wrong,
    fill,
    first_wrong,
    size_problem,
    suite_of,
)

CPU = torch.device("cpu")
EVERY_CASE = cases(tuple(COLLECTIVES), ("fp32", "bf16"), ("in_place", "out_of_place"))


# --------------------------------------------------------------------------- bandwidths
@pytest.mark.parametrize(
    ("collective", "world_size", "factor"),
    [
        ("all_reduce", 1, 0.0),
        ("all_reduce", 2, 1.0),
        ("all_reduce", 4, 1.5),
        ("all_reduce", 8, 1.75),
        ("all_gather", 2, 0.5),
        ("all_gather", 8, 0.875),
        ("reduce_scatter", 4, 0.75),
        ("reduce_scatter", 8, 0.875),
        ("broadcast", 2, 1.0),
        ("broadcast", 8, 1.0),
        ("all_to_all", 4, 0.75),
        ("all_to_all", 8, 0.875),
    ],
)
def test_bus_bandwidth_factors_are_nccl_tests(collective, world_size, factor):
    assert bus_bandwidth_gbps(100.0, collective, world_size) == pytest.approx(100.0 * factor)


def test_bandwidths_reject_bad_input():
    assert algorithm_bandwidth_gbps(2 * 10**9, 0.5) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="seconds: a positive number is accepted; got 0"):
        algorithm_bandwidth_gbps(8, 0)
    for world_size in (0, 2.0, True):
        with pytest.raises(ValueError, match="world_size: an int >= 1 is accepted"):
            bus_bandwidth_gbps(1.0, "all_reduce", world_size)
    with pytest.raises(ValueError, match="collective: unknown value 'reduce'; accepted: all_reduce, "):
        bus_bandwidth_gbps(1.0, "reduce", 2)


# --------------------------------------------------------------------------- cases and ids
def test_cases_are_the_placements_torch_offers():
    assert [str(c) for c in EVERY_CASE] == [
        "all_reduce-fp32-in_place",
        "all_reduce-bf16-in_place",
        "all_gather-fp32-in_place",
        "all_gather-fp32-out_of_place",
        "all_gather-bf16-in_place",
        "all_gather-bf16-out_of_place",
        "reduce_scatter-fp32-in_place",
        "reduce_scatter-fp32-out_of_place",
        "reduce_scatter-bf16-in_place",
        "reduce_scatter-bf16-out_of_place",
        "broadcast-fp32-in_place",
        "broadcast-bf16-in_place",
        "all_to_all-fp32-out_of_place",
        "all_to_all-bf16-out_of_place",
    ]
    # Only fp32 all-reduce keeps the suite its baselines and the report's plot read.
    assert [suite_of(c) for c in EVERY_CASE[:3]] == ["allreduce", "collectives", "collectives"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("all_reduce", "fp32", "out_of_place"), "all_reduce exists in_place only; got out_of_place"),
        (("all_to_all", "bf16", "in_place"), "all_to_all exists out_of_place only; got in_place"),
        (("allgather", "fp32", "in_place"), "collective: unknown value 'allgather'; accepted: all_reduce, "),
        (("all_gather", "fp16", "in_place"), "dtype: unknown value 'fp16'; accepted: fp32, bf16"),
    ],
)
def test_a_case_names_what_is_wrong(args, message):
    with pytest.raises(ValueError, match=message):
        CollectiveCase(*args)


# --------------------------------------------------------------------------- sizes
@pytest.mark.parametrize(
    ("case", "size", "world_size", "reason"),
    [
        (("all_reduce", "fp32", "in_place"), 6, 2, "6B is not whole fp32 elements (4 bytes each)"),
        (("broadcast", "bf16", "in_place"), 3, 2, "3B is not whole bf16 elements (2 bytes each)"),
        (
            ("all_gather", "fp32", "out_of_place"),
            8,
            4,
            "2 fp32 elements do not split into 4 equal chunks, one per rank (all_gather needs a multiple "
            "of 16 bytes)",
        ),
        (("all_to_all", "bf16", "out_of_place"), 12, 4, "6 bf16 elements do not split into 4 equal chunks"),
        # 1 + ... + 23 = 276: beyond bf16's exact integers; 22 ranks (253) are not.
        (("all_reduce", "bf16", "in_place"), 2**20, 23, "the check's values reach 276 with 23 ranks"),
        (("reduce_scatter", "bf16", "in_place"), 22 * 2**10, 22, "reach 274 with 22 ranks; bf16 holds"),
    ],
)
def test_sizes_that_cannot_run_say_why(case, size, world_size, reason):
    problem = size_problem(CollectiveCase(*case), size, world_size)
    assert problem is not None and reason in problem


@pytest.mark.parametrize(
    ("case", "size", "world_size"),
    [
        (("all_reduce", "fp32", "in_place"), 4, 8),  # one element: all-reduce does not split it
        (("all_reduce", "bf16", "in_place"), 2, 22),
        (("all_gather", "bf16", "in_place"), 16, 8),
        (("reduce_scatter", "bf16", "out_of_place"), 21 * 2, 21),
        (("all_to_all", "bf16", "out_of_place"), 64 * 64 * 2, 64),  # movers' values stay below 252
        (("broadcast", "fp32", "in_place"), 2**33, 8),
    ],
)
def test_sizes_that_run(case, size, world_size):
    assert size_problem(CollectiveCase(*case), size, world_size) is None


@pytest.mark.parametrize(("size", "world_size"), [(0, 2), (-4, 2), (4.0, 2), (True, 2), (8, 0)])
def test_size_problem_rejects_bad_input(size, world_size):
    with pytest.raises(ValueError, match="is accepted"):
        size_problem(CollectiveCase("all_reduce", "fp32", "in_place"), size, world_size)


# --------------------------------------------------------------------------- buffers
@pytest.mark.parametrize(
    ("case", "shapes", "shared"),
    [
        (("all_reduce", "fp32", "in_place"), (12, 12), "same"),
        (("broadcast", "bf16", "in_place"), (12, 12), "same"),
        (("all_gather", "fp32", "in_place"), (4, 12), "input is chunk 1 of the output"),
        (("all_gather", "fp32", "out_of_place"), (4, 12), None),
        (("reduce_scatter", "bf16", "in_place"), (12, 4), "output is chunk 1 of the input"),
        (("reduce_scatter", "bf16", "out_of_place"), (12, 4), None),
        (("all_to_all", "fp32", "out_of_place"), (12, 12), None),
    ],
)
def test_buffers_place_a_ranks_chunk_as_nccl_tests(case, shapes, shared):
    case = CollectiveCase(*case)
    source, result = buffers(case, 12, 1, 3, CPU)  # rank 1 of 3
    assert (source.numel(), result.numel()) == shapes
    assert source.dtype == result.dtype == case.torch_dtype
    assert not source.any() and not result.any()
    if shared is None:
        assert source.untyped_storage().data_ptr() != result.untyped_storage().data_ptr()
    elif shared == "same":
        assert source is result
    else:
        larger, smaller = (result, source) if case.collective == "all_gather" else (source, result)
        assert smaller.data_ptr() == larger[4:].data_ptr()


# --------------------------------------------------------------------------- the check
def _simulate(case, world_size, elements, fault=None):
    """Each rank's wrong elements after `case` on `world_size` simulated ranks, from each rank's filled
    input; `fault(rank, result)` then spoils a rank's result as a broken collective would."""
    spec = case.spec
    ranks = [buffers(case, elements, r, world_size, CPU) for r in range(world_size)]
    for r, (source, result) in enumerate(ranks):
        result.zero_()
        fill(source, spec.sent(r, world_size))
    inputs = [source.clone() for source, _ in ranks]
    total = torch.stack(inputs).sum(dim=0)
    for r, (_, result) in enumerate(ranks):
        if case.collective == "all_reduce":
            result.copy_(total)
        elif case.collective == "all_gather":
            result.copy_(torch.cat(inputs))
        elif case.collective == "reduce_scatter":
            result.copy_(total.view(world_size, -1)[r])
        elif case.collective == "broadcast":
            result.copy_(inputs[0])
        else:  # all_to_all: chunk s of rank r's output is chunk r of rank s's input
            result.copy_(torch.cat([inputs[s].view(world_size, -1)[r] for s in range(world_size)]))
        if fault is not None:
            fault(r, result, inputs)
    return [count_wrong(result, spec.expected(r, world_size)) for r, (_, result) in enumerate(ranks)]


@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
@pytest.mark.parametrize("case", EVERY_CASE, ids=str)
def test_a_correct_collective_has_no_wrong_elements(case, world_size):
    assert _simulate(case, world_size, elements=6 * world_size) == [0] * world_size


def _first_rank(fault):
    return lambda r, result, inputs: fault(result, inputs) if r == 0 else None


FAULTS = {
    # All-reduce: rank 3's contribution missing from the last element of rank 0's result.
    "all_reduce-fp32-in_place": (_first_rank(lambda out, ins: out[-1:].sub_(ins[3][-1:])), 1),
    # All-gather: chunks 1 and 2 swapped (6 elements each) in rank 0's output.
    "all_gather-bf16-in_place": (
        _first_rank(lambda out, ins: out[6:18].copy_(torch.cat([ins[2], ins[1]]))),
        12,
    ),
    # Reduce-scatter: every rank kept the sum of the next rank's chunk.
    "reduce_scatter-fp32-out_of_place": (
        lambda r, out, ins: out.copy_(torch.stack(ins).sum(dim=0).view(4, -1)[(r + 1) % 4]),
        24,
    ),
    # Broadcast: rank 0's data never left it; ranks 1 to 3 kept their own.
    "broadcast-bf16-in_place": (lambda r, out, ins: out.copy_(ins[r]), 3 * 24),
    # All-to-all: every rank's input copied to its output, nothing exchanged: all but the chunk
    # each rank keeps (6 of 24 elements) is wrong.
    "all_to_all-fp32-out_of_place": (lambda r, out, ins: out.copy_(ins[r]), 4 * 18),
    # An output that the collective never wrote: zeros, which no expected value is.
    "all_gather-fp32-out_of_place": (_first_rank(lambda out, ins: out.zero_()), 24),
}


@pytest.mark.parametrize("name", FAULTS)
def test_a_faulty_collective_has_wrong_elements(name):
    case = next(c for c in EVERY_CASE if str(c) == name)
    fault, wrong = FAULTS[name]
    assert sum(_simulate(case, 4, elements=24, fault=fault)) == wrong


def test_count_wrong_counts_across_slices(monkeypatch):
    monkeypatch.setattr(collective_cases, "COUNT_SLICE", 3)  # 10-element chunks in 4 slices each
    result = torch.tensor([1.0] * 10 + [2.0] * 10, dtype=torch.bfloat16)
    assert count_wrong(result, (1, 2)) == 0
    result[4], result[9], result[10] = 7, 0, 1
    assert count_wrong(result, (1, 2)) == 3
    assert count_wrong(result, (2,)) == 11


def test_first_wrong_names_the_first_element_off_across_slices_and_chunks(monkeypatch):
    monkeypatch.setattr(collective_cases, "COUNT_SLICE", 3)
    result = torch.tensor([1.0] * 10 + [2.0] * 10, dtype=torch.bfloat16)
    assert first_wrong(result, (1, 2)) is None
    result[13], result[17] = 5, 0  # chunk 1, its second slice
    assert first_wrong(result, (1, 2)) == (13, 5.0, 2)
    result[7] = 3  # chunk 0, its third slice: comes first
    assert first_wrong(result, (1, 2)) == (7, 3.0, 1)
