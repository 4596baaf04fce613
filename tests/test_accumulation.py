"""Summing 0.01 a thousand times in each format: error bounds derived from the formats themselves.

Unit roundoff u (half the spacing at 1) and how 0.01 is stored:
  fp32: 24 significant bits, u = 2^-24 = 6.0e-8; fp32(0.01) = 0.01 - 2.2e-10
  fp16: 11 significant bits, u = 2^-11 = 4.9e-4; fp16(0.01) = 1311 * 2^-17 = 0.01 + 2.1e-6
  bf16:  8 significant bits, u = 2^-8  = 3.9e-3; bf16(0.01) =   41 * 2^-12 = 0.01 + 9.8e-6
A sum s in [2^e, 2^(e+1)) lies on a grid of spacing 2^(e+1) * u; each `s += v` rounds s + v to it.
"""

import pytest
import torch

from model.precision import accumulate

VALUE, COUNT = 0.01, 1000
EXACT = VALUE * COUNT


def stored(value: float, dtype: torch.dtype) -> float:
    return torch.tensor(value, dtype=dtype).item()


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def test_fp32_sum_of_fp32_values_within_the_recursive_summation_bound():
    # Recursive summation: |s - exact| <= count * |fp32(0.01) - 0.01| + u * sum_k s_k, as step k
    # rounds the partial sum s_k ~ 0.01 * k by at most u * s_k. sum_k s_k = 0.01 * 1000 * 1001 / 2
    # = 5005 (1% slack for the partial sums' own errors): 2.2e-7 + 3.0e-4. Seen: 1.3e-4.
    representation = COUNT * abs(stored(VALUE, torch.float32) - VALUE)
    partial_sums = 1.01 * VALUE * COUNT * (COUNT + 1) / 2
    bound = representation + unit_roundoff(torch.float32) * partial_sums
    error = abs(accumulate(VALUE, COUNT, torch.float32, torch.float32).item() - EXACT)
    assert error < bound


@pytest.mark.parametrize(
    "binade_start, increment",
    [
        # fp16(0.01) / spacing: 20.48, 10.24, 5.12 spacings round down to 0.009765625 = 5 * 2^-9;
        (0.5, 5 * 2**-9),
        (1.0, 5 * 2**-9),
        (2.0, 5 * 2**-9),
        # 2.56 spacings of 2^-8 round up to 3;
        (4.0, 3 * 2**-8),
        # 1.28 spacings of 2^-7 = 0.0078 round down to 1: from 8 on, each +0.01 adds 0.0078.
        (8.0, 2**-7),
    ],
)
def test_fp16_adds_a_whole_number_of_spacings(binade_start, increment):
    s = torch.tensor(binade_start, dtype=torch.float16)
    s += torch.tensor(VALUE, dtype=torch.float16)
    assert s.item() - binade_start == increment


def test_fp16_sum_of_fp16_values_stalls_past_8():
    # With those increments the sum passes 0.5 near step 50, climbs by 0.0098 to 4 (step 409) and by
    # 0.0117 to 8 (step 750); the last 250 steps add 2^-7 each: 8 + 250 * 2^-7 = 9.953125.
    total = accumulate(VALUE, COUNT, torch.float16, torch.float16).item()
    assert abs(total - EXACT) > 0.01
    assert total == 8 + 250 * 2**-7
    last_step = total - accumulate(VALUE, COUNT - 1, torch.float16, torch.float16).item()
    assert last_step == 2**-7


@pytest.mark.parametrize("value_dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_fp32_sum_of_low_precision_values_is_exact(value_dtype):
    # fp16(0.01) = 1311 * 2^-17 and bf16(0.01) = 41 * 2^-12: every partial sum k * m * 2^-p with
    # k <= 1000 has k * m <= 1311000 < 2^24, so fp32 holds it exactly. The whole error is the
    # value's representation error, a thousand times: 2.1e-3 for fp16, 9.8e-3 for bf16.
    total = accumulate(VALUE, COUNT, value_dtype, torch.float32).item()
    assert total == COUNT * stored(VALUE, value_dtype)
    assert total - EXACT == pytest.approx(COUNT * (stored(VALUE, value_dtype) - VALUE), rel=1e-12)


def test_fp16_sum_of_fp32_values_loses_as_much_as_the_fp16_sum():
    # The sum's format decides: fp32(0.01) is 1.28 spacings of 2^-7 as well, so past 8 each step
    # again adds 2^-7, however precisely the value was stored.
    total = accumulate(VALUE, COUNT, torch.float32, torch.float16).item()
    assert abs(total - EXACT) > 0.01
    assert total - accumulate(VALUE, COUNT - 1, torch.float32, torch.float16).item() == 2**-7


def test_bf16_sum_stagnates_at_4():
    # bf16 spacing in [2, 4) is 2^-6 = 0.0156: bf16(0.01) is 0.64 of it and rounds up to a whole one.
    # At 4 the spacing is 2^-5 = 0.031, its half 0.0156 > 0.01: s + 0.01 rounds back to s, for good.
    assert accumulate(VALUE, COUNT, torch.bfloat16, torch.bfloat16).item() == 4.0


def test_zero_count_is_zero_in_the_sum_dtype():
    total = accumulate(VALUE, 0, "fp16", "bf16")
    assert total.dtype == torch.bfloat16 and total.item() == 0


@pytest.mark.parametrize(
    "args, message",
    [
        ((float("nan"), 10, "fp32", "fp32"), "value: expected a finite int or float, got nan"),
        (("0.01", 10, "fp32", "fp32"), "value: expected a finite int or float, got '0.01'"),
        ((0.01, -1, "fp32", "fp32"), r"count: expected an integer >= 0, got -1"),
        ((0.01, 10.0, "fp32", "fp32"), r"count: expected an integer >= 0, got 10.0"),
        ((0.01, 10, "fp8", "fp32"), "value_dtype: unknown dtype 'fp8'; accepted: fp32"),
        ((0.01, 10, "fp32", torch.int32), "sum_dtype: torch.int32 is not a floating-point dtype; accepted"),
    ],
)
def test_accumulate_rejects_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        accumulate(*args)
