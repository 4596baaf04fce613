import pytest
import torch

from model.precision import tf32_enabled
from perf.cases.matmul import MATH_MODES, math_mode
from perf.workloads.matmul import (
    REDUCTION_FLAGS,
    math_settings,
    matmul_inputs,
    matmul_workload,
    reduced_precision_reductions,
    relative_error,
    unavailable_reason,
)

CPU = torch.device("cpu")
N = 256


def reduction_flags():
    # Read directly, split-K companions included where torch has them, so that the test sees
    # exactly what the context must put back.
    matmul = torch.backends.cuda.matmul
    names = [f for flag in REDUCTION_FLAGS for f in (flag, f"{flag}_split_k") if hasattr(matmul, f)]
    return {name: getattr(matmul, name) for name in names}


@pytest.fixture
def untouched_flags():
    """The reduction flags before the test; put back afterwards whatever the test did."""
    flags = reduction_flags()
    yield flags
    matmul = torch.backends.cuda.matmul
    for flag in REDUCTION_FLAGS:
        split_k = f"{flag}_split_k"
        setattr(matmul, flag, (flags[flag], flags[split_k]) if split_k in flags else flags[flag])


@pytest.mark.parametrize("allowed", [True, False])
def test_reduced_precision_reductions_sets_and_restores(allowed, untouched_flags):
    matmul = torch.backends.cuda.matmul
    with reduced_precision_reductions(allowed):
        for flag in REDUCTION_FLAGS:
            assert getattr(matmul, flag) is allowed
        with reduced_precision_reductions(not allowed):
            assert all(getattr(matmul, flag) is (not allowed) for flag in REDUCTION_FLAGS)
        assert all(getattr(matmul, flag) is allowed for flag in REDUCTION_FLAGS)
    assert reduction_flags() == untouched_flags


def test_reduced_precision_reductions_restores_split_k(untouched_flags):
    # Setting a plain bool resets split-K to True: a (False, split_k=False) setting must come back whole.
    matmul = torch.backends.cuda.matmul
    flag = REDUCTION_FLAGS[0]
    if not hasattr(matmul, f"{flag}_split_k"):
        pytest.skip(f"torch {torch.__version__} has no {flag}_split_k setting")
    setattr(matmul, flag, (False, False))
    before = reduction_flags()
    with reduced_precision_reductions(True):
        assert getattr(matmul, f"{flag}_split_k") is True
    assert reduction_flags() == before


def test_math_settings_restore_after_exception(untouched_flags):
    was_tf32 = tf32_enabled()
    with pytest.raises(KeyError), math_settings(math_mode("tf32")):
        assert tf32_enabled()
        raise KeyError("boom")
    with pytest.raises(KeyError), math_settings(math_mode("bf16_reduced")):
        assert not tf32_enabled()
        assert torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction is True
        raise KeyError("boom")
    assert reduction_flags() == untouched_flags
    assert tf32_enabled() is was_tf32


def test_modes_name_their_switches():
    assert {name: (m.precision, m.tf32, m.reduced_precision_reduction) for name, m in MATH_MODES.items()} == {
        "fp32": ("fp32", False, False),
        "tf32": ("fp32", True, False),
        "bf16": ("bf16", False, False),
        "bf16_reduced": ("bf16", False, True),
        "fp16": ("fp16", False, False),
        "fp16_reduced": ("fp16", False, True),
    }


def test_cuda_only_modes_say_why_on_the_cpu():
    assert unavailable_reason(math_mode("tf32"), CPU).startswith("needs a CUDA device: tf32 is fp32 with")
    assert "reduced-precision reduction" in unavailable_reason(math_mode("fp16_reduced"), CPU)
    for name in ("fp32", "bf16", "fp16"):
        assert unavailable_reason(math_mode(name), CPU) is None
    assert unavailable_reason(math_mode("tf32"), torch.device("cuda")) is None


def test_math_mode_rejects_unknown_name():
    with pytest.raises(ValueError, match="mode: unknown matmul mode 'int8'; accepted: fp32, tf32, bf16, "):
        math_mode("int8")


@pytest.mark.parametrize("n", [0, -4, 8.0, True])
def test_matmul_workload_rejects_bad_size(n):
    with pytest.raises(ValueError, match=r"n: expected an integer >= 1, got "):
        matmul_workload(math_mode("fp32"), n, CPU)


def test_inputs_are_the_same_draws_rounded():
    a32, b32 = matmul_inputs(N, torch.float32, CPU)
    a16, b16 = matmul_inputs(N, torch.float16, CPU)
    assert a16.dtype == b16.dtype == torch.float16
    torch.testing.assert_close(a16, a32.half(), rtol=0, atol=0)
    torch.testing.assert_close(b16, b32.half(), rtol=0, atol=0)
    assert not torch.equal(a32, b32)


@pytest.mark.parametrize("name", ["fp32", "bf16", "fp16"])
def test_step_writes_the_product_into_the_preallocated_output(name):
    workload = matmul_workload(math_mode(name), N, CPU)
    address = workload.out.data_ptr()
    assert workload.step() is None
    assert workload.out.data_ptr() == address and workload.out.dtype == MATH_MODES[name].dtype
    torch.testing.assert_close(workload.out, workload.a @ workload.b)
    assert workload.work.flops == 2 * N**3 and workload.work.precision == name


def error_of(name: str) -> float:
    workload = matmul_workload(math_mode(name), N, CPU)
    workload.step()
    return relative_error(workload.out, workload.a, workload.b)


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def fp32_accumulation_bound(dtype: torch.dtype) -> float:
    # Summing n products in fp32: |C - A B| <= n u |A| |B| elementwise (u = 2^-24), so the relative
    # error is at most n u ||A| |B||_F / ||A B||_F; for normal inputs that ratio is about sqrt(n) 2/pi.
    a, b = (x.float() for x in matmul_inputs(N, dtype, CPU))
    ratio = (torch.linalg.vector_norm(a.abs() @ b.abs()) / torch.linalg.vector_norm(a @ b)).item()
    return N * unit_roundoff(torch.float32) * ratio


def test_fp32_error_within_the_dot_product_bound():
    assert 0 < error_of("fp32") < fp32_accumulation_bound(torch.float32)


def test_bf16_error_exceeds_fp16_error():
    # Both accumulate in fp32 here and round the output once, which errs by at most u per element:
    # 2^-8 for bf16, 2^-11 for fp16.
    bf16, fp16 = error_of("bf16"), error_of("fp16")
    assert fp16 < bf16
    assert fp16 < unit_roundoff(torch.float16) + fp32_accumulation_bound(torch.float16)
    assert bf16 < unit_roundoff(torch.bfloat16) + fp32_accumulation_bound(torch.bfloat16)
    # Where an output falls within its binade spreads its relative rounding error between 0 and u;
    # over n^2 = 65536 outputs that averages to the same share of u for both formats, so the
    # errors stand near the ratio of their u, 8. Twice fp16's error leaves room.
    assert bf16 > 2 * fp16


def test_relative_error_of_a_wrong_product_is_large():
    a, b = matmul_inputs(N, torch.float32, CPU)
    assert relative_error(torch.zeros(N, N), a, b) == pytest.approx(1.0)
    assert relative_error(2 * (a.double() @ b.double()), a, b) == pytest.approx(1.0)
