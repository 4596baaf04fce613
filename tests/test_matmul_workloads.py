from types import SimpleNamespace

import pytest
import torch

from model.precision import tf32_enabled
from perf.cases.matmul import MATH_MODES, MathMode, math_mode
from perf.tiers import TIERS
from perf.workloads.matmul import (
    FP16_ACCUMULATION_FLAG,
    REDUCTION_FLAGS,
    first_step_refusal,
    fp16_accumulation,
    fp16_accumulation_enabled,
    math_settings,
    matmul_inputs,
    matmul_workload,
    reduced_precision_reductions,
    relative_error,
    result_info,
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
    switches = {
        name: (m.precision, m.tf32, m.reduced_precision_reduction, m.fp16_accumulation)
        for name, m in MATH_MODES.items()
    }
    assert switches == {
        "fp32": ("fp32", False, False, False),
        "tf32": ("fp32", True, False, False),
        "bf16": ("bf16", False, False, False),
        "bf16_reduced": ("bf16", False, True, False),
        "fp16": ("fp16", False, False, False),
        "fp16_accum": ("fp16", False, False, True),
        "fp16_reduced": ("fp16", False, True, False),
    }
    # Listed right after fp16, from which it differs by the one switch: the end-of-run table follows
    # this order.
    assert list(MATH_MODES).index("fp16_accum") == list(MATH_MODES).index("fp16") + 1


def test_cuda_only_modes_say_why_on_the_cpu():
    assert unavailable_reason(math_mode("tf32"), CPU).startswith("needs a CUDA device: tf32 is fp32 with")
    assert "reduced-precision reduction" in unavailable_reason(math_mode("fp16_reduced"), CPU)
    for name in ("fp32", "bf16", "fp16"):
        assert unavailable_reason(math_mode(name), CPU) is None
    assert unavailable_reason(math_mode("tf32"), torch.device("cuda")) is None


def test_math_mode_rejects_unknown_name():
    with pytest.raises(
        ValueError, match="mode: unknown matmul mode 'int8'; accepted: fp32, tf32, bf16, "
    ) as err:
        math_mode("int8")
    assert "fp16, fp16_accum, fp16_reduced" in str(err.value)


def test_fp16_accumulation_needs_fp16_inputs():
    with pytest.raises(
        ValueError, match=r"bf16_accum: fp16 accumulation needs fp16 inputs, got torch\.bfloat16"
    ):
        MathMode("bf16_accum", torch.bfloat16, fp16_accumulation=True)


# ------------------------------------------------------------------ fp16 accumulation (CUBLAS_COMPUTE_16F)


@pytest.fixture
def untouched_fp16_accumulation():
    """The switch before the test; put back afterwards whatever the test did."""
    matmul = torch.backends.cuda.matmul
    if not hasattr(matmul, FP16_ACCUMULATION_FLAG):
        yield None
        return
    before = getattr(matmul, FP16_ACCUMULATION_FLAG)
    yield before
    setattr(matmul, FP16_ACCUMULATION_FLAG, before)


class FakeMatmul:
    """Stands in for torch.backends.cuda.matmul: holds the switch (or lacks it) and logs each write."""

    def __init__(self, **flags: bool):
        object.__setattr__(self, "writes", [])
        for name, value in flags.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        self.writes.append((name, value))
        object.__setattr__(self, name, value)


@pytest.mark.parametrize("before", [False, True])
def test_fp16_accumulation_set_inside_its_mode_only_and_restored(before, untouched_fp16_accumulation):
    # The installed torch's own switch (the CPU build has it too; a matmul on the CPU ignores it).
    matmul = torch.backends.cuda.matmul
    if untouched_fp16_accumulation is None:
        pytest.skip(f"torch {torch.__version__} has no {FP16_ACCUMULATION_FLAG}")
    setattr(matmul, FP16_ACCUMULATION_FLAG, before)
    with math_settings(math_mode("fp16_accum")):
        assert getattr(matmul, FP16_ACCUMULATION_FLAG) is True
        # Every other mode runs with it off, even nested inside the fp16 accumulation mode.
        for name in MATH_MODES.keys() - {"fp16_accum"}:
            with math_settings(math_mode(name)):
                assert getattr(matmul, FP16_ACCUMULATION_FLAG) is False
        assert getattr(matmul, FP16_ACCUMULATION_FLAG) is True
    assert getattr(matmul, FP16_ACCUMULATION_FLAG) is before
    with pytest.raises(KeyError), math_settings(math_mode("fp16_accum")):
        raise KeyError("boom")
    assert getattr(matmul, FP16_ACCUMULATION_FLAG) is before


def test_fp16_accumulation_writes_the_switch_and_puts_it_back(monkeypatch):
    fake = FakeMatmul(allow_fp16_accumulation=False)
    monkeypatch.setattr(torch.backends.cuda, "matmul", fake)
    assert not fp16_accumulation_enabled()
    with fp16_accumulation(True):
        assert fp16_accumulation_enabled()
        assert fake.writes == [(FP16_ACCUMULATION_FLAG, True)]
    assert fake.writes == [(FP16_ACCUMULATION_FLAG, True), (FP16_ACCUMULATION_FLAG, False)]
    with pytest.raises(KeyError), fp16_accumulation(True):
        raise KeyError("boom")
    assert fake.allow_fp16_accumulation is False


def test_torch_without_the_switch(monkeypatch):
    # An older torch: no allow_fp16_accumulation on torch.backends.cuda.matmul.
    fake = FakeMatmul()
    monkeypatch.setattr(torch.backends.cuda, "matmul", fake)
    reason = unavailable_reason(math_mode("fp16_accum"), torch.device("cuda"))
    assert reason == (
        f"torch {torch.__version__} has no torch.backends.cuda.matmul.allow_fp16_accumulation: "
        "fp16_accum needs fp16 GEMMs that accumulate in fp16"
    )
    assert unavailable_reason(math_mode("fp16_accum"), CPU) == reason  # the missing switch comes first
    assert not fp16_accumulation_enabled()
    with fp16_accumulation(False):  # every other mode: nothing to set, nothing written
        pass
    assert fake.writes == []
    with pytest.raises(RuntimeError, match=r"has no torch\.backends\.cuda\.matmul\.allow_fp16_accumulation"):
        with fp16_accumulation(True):
            pass


def test_fp16_accumulation_skips_without_a_cuda_gpu():
    assert unavailable_reason(math_mode("fp16_accum"), CPU) == (
        "needs a CUDA device: fp16_accum is fp16 with cuBLAS's fp16 accumulation switch on"
    )


def fake_gpu(monkeypatch, capability: tuple[int, int], hip: str | None = None):
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")


@pytest.mark.parametrize("capability", [(6, 1), (5, 2)], ids=["sm61", "sm52"])
def test_fp16_accumulation_skips_before_volta(monkeypatch, capability):
    # torch asks cuBLAS for fp16 compute only from compute capability 7.0 on and ignores the switch
    # below: the mode would time fp32 accumulation under its name.
    fake_gpu(monkeypatch, capability)
    assert unavailable_reason(math_mode("fp16_accum"), torch.device("cuda")) == (
        f"Fake GPU has compute capability {capability[0]}.{capability[1]}: torch applies "
        "allow_fp16_accumulation from 7.0 (Volta) on, so fp16_accum would accumulate in fp32 like fp16"
    )
    assert unavailable_reason(math_mode("fp16"), torch.device("cuda")) is None


@pytest.mark.parametrize("capability", [(7, 0), (8, 9), (9, 0)], ids=["sm70", "sm89", "sm90"])
def test_fp16_accumulation_runs_from_volta_on(monkeypatch, capability):
    fake_gpu(monkeypatch, capability)
    assert unavailable_reason(math_mode("fp16_accum"), torch.device("cuda")) is None


def test_fp16_accumulation_skips_on_rocm(monkeypatch):
    fake_gpu(monkeypatch, (9, 4), hip="6.4.0")
    assert unavailable_reason(math_mode("fp16_accum"), torch.device("cuda")) == (
        "ROCm build (HIP 6.4.0): torch applies allow_fp16_accumulation to cuBLAS only, so fp16_accum "
        "would accumulate in fp32 like fp16"
    )


CUBLAS_REFUSAL = (
    "CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx( handle, opa, opb, m, n, k,\n"
    "alpha_ptr, a, CUDA_R_16F, lda, b, CUDA_R_16F, ldb, beta_ptr, c, CUDA_R_16F, ldc, compute_type, "
    "CUBLAS_GEMM_DEFAULT_TENSOR_OP)`"
)


def refusing_workload(name: str, error: Exception):
    def step():
        raise error

    return SimpleNamespace(mode=math_mode(name), step=step)


def test_a_cublas_refusal_of_fp16_accumulation_becomes_the_skip_reason():
    reason = first_step_refusal(refusing_workload("fp16_accum", RuntimeError(CUBLAS_REFUSAL)))
    assert reason.startswith("cuBLAS rejected fp16_accum (allow_fp16_accumulation on): CUDA error: ")
    assert "CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx(" in reason


@pytest.mark.parametrize(
    "name, error",
    [
        ("fp16", RuntimeError(CUBLAS_REFUSAL)),  # another mode's cuBLAS error is a failure
        ("fp16_accum", RuntimeError("CUDA error: an illegal memory access was encountered")),
        ("fp16_accum", torch.OutOfMemoryError("CUDA out of memory")),
    ],
    ids=["fp16-cublas", "fp16_accum-illegal_address", "fp16_accum-oom"],
)
def test_other_first_step_errors_propagate(name, error):
    with pytest.raises(type(error)):
        first_step_refusal(refusing_workload(name, error))


def test_first_step_runs_the_step():
    workload = matmul_workload(math_mode("fp16"), N, CPU)
    workload.out.zero_()
    assert first_step_refusal(workload) is None
    torch.testing.assert_close(workload.out, workload.a @ workload.b)


@pytest.mark.parametrize("name, on", [("fp16_accum", True), ("fp16", False), ("fp32", False)])
def test_result_records_whether_fp16_accumulation_was_on(name, on, untouched_fp16_accumulation):
    if untouched_fp16_accumulation is None:
        pytest.skip(f"torch {torch.__version__} has no {FP16_ACCUMULATION_FLAG}")
    # Built on the CPU (the switch is set all the same; a CPU matmul ignores it) with random output.
    workload = matmul_workload(math_mode("fp16"), 8, CPU)
    workload.mode = math_mode(name)
    with math_settings(workload.mode):
        info = result_info(workload, 1e-3)
    assert info == {
        "suite": "matmul",
        "mode": name,
        "n": 8,
        "rel_error": 1e-3,
        "dtype": str(math_mode(name).dtype).removeprefix("torch."),
        "fp16_accumulation": on,
    }


def test_default_and_full_tiers_run_fp16_accumulation_at_8192():
    # The GPU figure (fp16_accum beside fp16 at n = 8192) comes from the default tier's run on an H100.
    assert 8192 in TIERS["default"].matmul_sizes and 8192 in TIERS["full"].matmul_sizes
    assert {"fp16", "fp16_accum"} <= MATH_MODES.keys()


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
