"""Kernel tables (perf/harness/kernel_table.py) built from hand-made activities, and their comparison
between a baseline and a current run (perf/tools/reading/kernel_changes.py), on stored rows good and bad."""

from __future__ import annotations

import hashlib
import math

import pytest

from perf.harness import kernel_table as harness_table
from perf.harness.kernel_table import Activity, kernel_table, short_name
from perf.tools.reading import kernel_changes as tools_changes
from perf.tools.reading.kernel_changes import (
    NOT_LISTED,
    KernelChange,
    explanation_lines,
    explanation_rows,
    kernel_changes,
    no_breakdown_reason,
)

ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
)
SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)"
)
CUBLAS = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off"
    "_kernel__5x_cublas"
)
FLASH = (
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, "
    "false, true, true, false, false>(flash::Flash_fwd_params)"
)


def sha6(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()[:6]


# --------------------------------------------------------------------------- short names
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (ADD, "vectorized_elementwise_kernel<4, CUDAFunctor_add<BFloat16>, array<char*, 3ul>>"),
        (SOFTMAX, "cunn_SoftMaxForward<4, float, float, float, SoftMaxForwardEpilogue>"),
        ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT"),
        (CUBLAS, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_e…5094e0"),
        (
            "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0",
            "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0",
        ),
        ("_attn_fwd", "_attn_fwd"),
        ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),  # no signature: kept
        ("Memset (Device)", "Memset (Device)"),
        (FLASH, "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, bfloat16…e29146"),
        ("at::cuda::(anonymous namespace)::spin_kernel(long)", "spin_kernel"),
    ],
)
def test_short_names(name, expected):
    assert short_name(name) == expected


def test_long_names_are_cut_with_the_hash_of_the_full_name():
    first = short_name(CUBLAS)
    assert len(first) == 80 + 1 + 6
    assert first.endswith("…" + sha6(CUBLAS))
    # The same first 80 characters, another kernel: the hash keeps them apart.
    other = CUBLAS.replace("5x_cublas", "6x_cublas")
    assert short_name(other) != first
    assert short_name(other)[:80] == first[:80]
    # At most 90 characters stay whole.
    assert short_name("k" * 90) == "k" * 90
    assert short_name("k" * 91) == "k" * 80 + "…" + sha6("k" * 91)


def test_short_names_are_deterministic():
    # The hash is sha1's, fixed above as a literal: the same in every process, whatever PYTHONHASHSEED.
    assert sha6(CUBLAS) == "5094e0"
    assert [short_name(FLASH) for _ in range(3)] == [short_name(FLASH)] * 3


# --------------------------------------------------------------------------- tables
def call(*kernels: tuple[str, int]) -> list[Activity]:
    """Activities of one call: (name, duration in ns) each, one after another."""
    activities, t = [], 0
    for name, duration in kernels:
        activities.append(Activity(name, t, t + duration))
        t += duration + 100
    return activities


def test_per_call_averages():
    # 3 calls, ADD launched twice in each (10 us and 30 us); SOFTMAX once in one call only.
    per_call = [call((ADD, 10_000), (ADD, 30_000)) for _ in range(3)]
    per_call[1] += call((SOFTMAX, 6_000))
    assert kernel_table(per_call) == [
        {"kernel": short_name(ADD), "launches": 2.0, "us": 40.0},
        {"kernel": short_name(SOFTMAX), "launches": 0.333, "us": 2.0},
    ]


def test_calls_without_activities_count_in_the_division():
    assert kernel_table([call(("k", 8_000)), [], [], []]) == [{"kernel": "k", "launches": 0.25, "us": 2.0}]
    assert kernel_table([[], []]) == []


def test_zero_calls_is_an_error():
    with pytest.raises(ValueError, match="at least one call"):
        kernel_table([])


def test_top_rows_and_the_other_row():
    # Kernels k0..k24, kernel ki taking (i + 1) us, once per call over 2 calls.
    kernels = [(f"k{i}", (i + 1) * 1_000) for i in range(25)]
    rows = kernel_table([call(*kernels), call(*kernels)])
    assert len(rows) == 21
    assert [r["kernel"] for r in rows[:20]] == [f"k{i}" for i in range(24, 4, -1)]  # costliest first
    assert rows[0] == {"kernel": "k24", "launches": 1.0, "us": 25.0}
    # The 5 cheapest (1 + 2 + 3 + 4 + 5 us) make the last row.
    assert rows[-1] == {"kernel": "other (5 kernels)", "launches": 5.0, "us": 15.0}
    # Without leftovers there is no other row.
    assert kernel_table([call(*kernels[:3])], top=3)[-1]["kernel"] == "k0"
    assert kernel_table([call(*kernels[:4])], top=0) == [
        {"kernel": "other (4 kernels)", "launches": 4.0, "us": 10.0}
    ]


def test_colliding_short_names_are_made_unique():
    first = "void at::native::reduce_kernel<512, 1>(int)"
    second = "void c10::reduce_kernel<512, 1>(long)"  # another kernel, the same short name
    rows = kernel_table([call((first, 5_000), (second, 3_000), ("plain", 1_000))])
    assert [r["kernel"] for r in rows] == [
        f"reduce_kernel<512, 1> #{sha6(first)}",
        f"reduce_kernel<512, 1> #{sha6(second)}",
        "plain",
    ]


def test_the_tools_read_the_key_the_harness_writes():
    assert tools_changes.EXTRA_INFO_KEY == harness_table.EXTRA_INFO_KEY == "gpu_kernels"
    assert tools_changes.TOP_KERNELS == harness_table.TOP_KERNELS


# --------------------------------------------------------------------------- changes
def row(kernel: str, us: float, launches: float = 1.0) -> dict:
    return {"kernel": kernel, "launches": launches, "us": us}


BASE = [row("gemm", 100.0), row("add", 20.0, 2.0), row("softmax", 10.0), row("other (3 kernels)", 3.0, 3.0)]


def test_an_added_kernel_comes_first():
    current = [row("gemm", 100.2), row("add", 20.0, 2.0), row("softmax", 10.0), row("copy", 50.0)]
    current.append(row("other (4 kernels)", 3.0, 3.0))
    changes = kernel_changes(BASE, current)
    # gemm moved by 0.2% with the same launches, add/softmax/other not at all: unchanged, left out.
    assert changes == [KernelChange("copy", None, 50.0, None, 1.0)]
    assert changes[0].change_us == 50.0


def test_doubled_launches_and_a_removed_kernel():
    current = [row("gemm", 100.0), row("add", 40.0, 4.0), row("other (5 kernels)", 4.5, 5.0)]
    changes = kernel_changes(BASE, current)
    assert isinstance(changes, list)
    assert [(c.kernel, c.change_us) for c in changes] == [
        ("add", 20.0),
        ("softmax", -10.0),  # gone: its current side is missing, counted as 0
        ("other (5 kernels)", 1.5),  # compared with "other (3 kernels)" under one key
    ]
    assert (changes[0].base_launches, changes[0].current_launches) == (2.0, 4.0)
    assert changes[1].current_us is None and changes[1].current_launches is None


def test_same_time_other_launches_is_a_change():
    changes = kernel_changes([row("add", 20.0, 2.0)], [row("add", 20.0, 4.0)])
    assert changes == [KernelChange("add", 20.0, 20.0, 2.0, 4.0)]
    assert kernel_changes([row("add", 20.0, 2.0)], [row("add", 20.09, 2.0)]) == []  # 0.45%: unchanged
    assert len(kernel_changes([row("add", 20.0, 2.0)], [row("add", 20.11, 2.0)])) == 1  # 0.55%


def test_the_limit_holds():
    base = [row(f"k{i}", 10.0) for i in range(12)]
    current = [row(f"k{i}", 10.0 + i) for i in range(12)]
    changes = kernel_changes(base, current, limit=3)
    assert [c.kernel for c in changes] == ["k11", "k10", "k9"]
    assert len(kernel_changes(base, current)) == 8
    assert len(kernel_changes(base, current, limit=20)) == 11  # k0 is unchanged


@pytest.mark.parametrize(
    ("baseline", "current", "expected"),
    [
        (None, BASE, "the baseline has no kernel table (recorded before kernel tables were kept)"),
        (BASE, None, "this run has no kernel table"),
        ("garbage", BASE, "the baseline's kernel table is damaged: it is 'garbage', not a list of rows"),
        (BASE, ["a", "b"], "this run's kernel table is damaged: row 0 is 'a', not a dict"),
        ([row("k", -1.0)], BASE, "the baseline's kernel table is damaged: row 0 ('k') has us -1.0"),
        ([row("k", math.nan)], BASE, "the baseline's kernel table is damaged: row 0 ('k') has us nan"),
        ([row("k", 1.0, True)], BASE, "row 0 ('k') has launches True, not a number"),
        ([{"launches": 1, "us": 1}], BASE, "row 0 has kernel None, not a name"),
        ([row("k", 1.0, "2")], BASE, "row 0 ('k') has launches '2', not a number"),
        ([row("k", 1.0), row("k", 2.0)], BASE, "row 1 repeats kernel 'k'"),
        (BASE, {"gemm": 1.0}, "this run's kernel table is damaged: it is {'gemm': 1.0}, not a list"),
    ],
)
def test_reasons_instead_of_a_breakdown(baseline, current, expected):
    found = kernel_changes(baseline, current)
    assert isinstance(found, str)
    assert expected in found


def test_reasons_from_extra_info():
    base_info, current_info = {"gpu_ms": 1.0, "gpu_kernels": BASE}, {"gpu_ms": 1.1, "gpu_kernels": BASE}
    assert no_breakdown_reason(base_info, current_info) is None
    assert no_breakdown_reason({"gpu_ms": 1.0}, current_info) == (
        "the baseline has no kernel table (recorded before kernel tables were kept)"
    )
    nsys = "a CUDA profiling tool holds CUPTI in this process (NSYS_PROFILING_SESSION_ID set)"
    assert no_breakdown_reason(base_info, {"gpu_ms_absent": nsys}) == f"this run has no kernel table: {nsys}"
    assert no_breakdown_reason({"gpu_ms_absent": "runs on cpu"}, current_info) == (
        "the baseline has no kernel table: runs on cpu"
    )
    damaged = no_breakdown_reason({"gpu_kernels": [None]}, current_info)
    assert damaged == "the baseline's kernel table is damaged: row 0 is None, not a dict"


@pytest.mark.parametrize(
    "garbage",
    [None, "text", 3, math.nan, [], ["a"], [None], {"gpu_kernels": "x"}, {"gpu_kernels": [["k", 1, 2]]}],
)
def test_garbage_never_raises(garbage):
    good = {"gpu_ms": 1.0, "gpu_kernels": BASE}
    for baseline, current in ((garbage, good), (good, garbage), (garbage, garbage)):
        assert isinstance(kernel_changes(baseline, current), list | str)
        reason = no_breakdown_reason(baseline, current)
        assert reason is None or isinstance(reason, str)
        lines = explanation_lines("bench", baseline, current)
        assert isinstance(lines, list) and all(isinstance(x, str) for x in lines)
        assert isinstance(explanation_rows(baseline, current), list | str)
    # A good side against garbage is never read as a breakdown.
    assert no_breakdown_reason(garbage, good) is not None
    assert no_breakdown_reason(good, garbage) is not None


def test_extra_info_that_is_no_dict_has_no_table():
    good = {"gpu_ms": 1.0, "gpu_kernels": BASE}
    assert explanation_lines("bench", None, good) == [
        "no kernel breakdown for bench: the baseline has no kernel table "
        "(recorded before kernel tables were kept)"
    ]


# --------------------------------------------------------------------------- the gate's lines
def test_explanation_lines_name_the_added_kernel():
    base_info = {"gpu_ms": 0.133, "gpu_kernels": BASE}
    current_rows = [
        row("gemm", 100.0),
        row("add", 40.0, 4.0),
        row("copy", 50.0),
        row("other (3 kernels)", 3.0, 3.0),
    ]
    current_info = {"gpu_ms": 0.193, "gpu_kernels": current_rows}
    lines = explanation_lines("test_step[1b-bf16]", base_info, current_info)
    assert lines[0] == "kernels of test_step[1b-bf16]: GPU busy time 0.133 -> 0.193 ms per call (+45.1%)"
    assert lines[1].split() == ["change", "us", "base", "us", "current", "us", "launches", "kernel"]
    assert lines[2].split() == ["+50.00", "-", "50.00", "-", "->", "1", "copy"]
    assert lines[3].split() == ["+20.00", "20.00", "40.00", "2", "->", "4", "add"]
    assert lines[4].split() == ["-10.00", "10.00", "-", "1", "->", "-", "softmax"]
    assert lines[5] == f"    {NOT_LISTED}"
    assert len(lines) == 6
    # The columns line up: each row's kernel starts where the header's does.
    assert {
        line.index(kernel)
        for line, kernel in zip(lines[1:5], ["kernel", "copy", "add", "softmax"], strict=True)
    } == {lines[1].index("kernel")}
    assert explanation_rows(base_info, current_info, limit=1) == [["+50.00", "-", "50.00", "- -> 1", "copy"]]


def test_explanation_without_changes_or_table():
    info = {"gpu_ms": 0.133, "gpu_kernels": BASE}
    lines = explanation_lines("bench", info, info)
    assert lines[0] == "kernels of bench: GPU busy time 0.133 -> 0.133 ms per call (+0.0%)"
    assert lines[1:] == ["    no kernel changed by 0.5% of its time or more, nor in launches"]
    assert explanation_lines("bench", info, {"gpu_ms_absent": "runs on cpu"}) == [
        "no kernel breakdown for bench: this run has no kernel table: runs on cpu"
    ]
    assert (
        explanation_rows({}, info)
        == "the baseline has no kernel table (recorded before kernel tables were kept)"
    )
