import warnings

import pytest
import torch

from model import precision
from model.optim import AdamW
from model.precision import (
    PRECISIONS,
    autocast,
    check_precision,
    grad_scaler,
    parse_dtype,
    tf32,
    tf32_enabled,
)

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

LOW_PRECISION = {"bf16": torch.bfloat16, "fp16": torch.float16}


def test_check_precision():
    for name in PRECISIONS:
        assert check_precision(name) == name
    with pytest.raises(ValueError, match="unknown precision 'fp8'; accepted: fp32, bf16, fp16"):
        check_precision("fp8")


@pytest.mark.parametrize(
    "value, expected",
    [
        ("fp32", torch.float32),
        ("float32", torch.float32),
        ("float", torch.float32),
        ("bf16", torch.bfloat16),
        ("BFloat16", torch.bfloat16),
        ("fp16", torch.float16),
        ("float16", torch.float16),
        ("half", torch.float16),
        ("fp64", torch.float64),
        ("float64", torch.float64),
        ("double", torch.float64),
        (torch.bfloat16, torch.bfloat16),
    ],
)
def test_parse_dtype_accepts(value, expected):
    assert parse_dtype(value) is expected


@pytest.mark.parametrize("value", ["fp8", "int8", "", "f32", 16, None])
def test_parse_dtype_rejects(value):
    with pytest.raises(ValueError) as err:
        parse_dtype(value)
    assert repr(value) in str(err.value) and "accepted: fp32, float32, float, bf16" in str(err.value)


@pytest.mark.parametrize("device_type", ["cpu", torch.device("cpu")], ids=["str", "torch.device"])
def test_autocast_fp32_is_a_no_op(device_type):
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with autocast("fp32", device_type):
        assert not torch.is_autocast_enabled("cpu")
        assert (a @ b).dtype == torch.float32


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_autocast_cpu_lowers_matmul(precision):
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with autocast(precision, "cpu"):
        assert (a @ b).dtype == LOW_PRECISION[precision]
    assert (a @ b).dtype == torch.float32


def test_autocast_rejects_unknown_precision():
    with pytest.raises(ValueError, match="unknown precision 'tf32'; accepted: fp32, bf16, fp16"):
        autocast("tf32", "cpu")


@pytest.mark.gpu
@cuda_only
@pytest.mark.parametrize("precision", PRECISIONS)
def test_autocast_cuda_matmul_dtype(precision):
    a, b = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    with autocast(precision, "cuda"):
        assert (a @ b).dtype == LOW_PRECISION.get(precision, torch.float32)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_grad_scaler_enabled_only_for_fp16(precision):
    scaler = grad_scaler(precision, "cpu")
    assert isinstance(scaler, torch.amp.GradScaler)
    assert scaler.is_enabled() == (precision == "fp16")


@pytest.mark.parametrize("precision", PRECISIONS)
def test_grad_scaler_drives_own_adamw(precision):
    # The loop a benchmark runs for every precision: scale, backward, step, update.
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(8, 4))
    x = torch.randn(16, 8)
    opt = AdamW([w], lr=1e-1)
    scaler = grad_scaler(precision, "cpu")
    losses = []
    for _ in range(5):
        opt.zero_grad(set_to_none=True)
        with autocast(precision, "cpu"):
            loss = (x @ w).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    # The step used unscaled gradients: the grad left on w is d loss / d w, not 65536 times it.
    assert w.grad.abs().max() < 10.0


def test_enabled_grad_scaler_skips_own_adamw_step_on_inf():
    w = torch.nn.Parameter(torch.ones(3))
    opt = AdamW([w])
    scaler = grad_scaler("fp16", "cpu")
    scale = scaler.get_scale()
    scaler.scale(w.sum()).backward()
    w.grad[0] = float("inf")
    scaler.step(opt)
    scaler.update()
    torch.testing.assert_close(w.detach(), torch.ones(3), rtol=0, atol=0)
    assert w not in opt.state
    assert scaler.get_scale() == scale / 2


def tf32_flags():
    # The flags tf32() sets, read directly, so the test sees exactly what it must put back.
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        return torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


@pytest.mark.parametrize("outer, inner", [(True, False), (False, True)], ids=["on-then-off", "off-then-on"])
def test_tf32_restores_prior_state(outer, inner):
    untouched = tf32_flags()
    with tf32(outer):
        assert tf32_enabled() is outer
        prior = tf32_flags()
        with tf32(inner):
            assert tf32_enabled() is inner
            assert tf32_flags() != prior
        assert tf32_flags() == prior
        assert tf32_enabled() is outer
    assert tf32_flags() == untouched


@pytest.mark.parametrize("enabled", [True, False])
def test_tf32_restores_after_exception(enabled):
    untouched, was_enabled = tf32_flags(), tf32_enabled()
    with pytest.raises(KeyError):
        with tf32(enabled):
            assert tf32_enabled() is enabled
            raise KeyError("boom")
    assert tf32_flags() == untouched
    assert tf32_enabled() is was_enabled


def test_tf32_legacy_flags_path(monkeypatch):
    # The branch for torch without fp32_precision; 2.11 and 2.13 still accept the old flags.
    monkeypatch.setattr(precision, "_HAS_FP32_PRECISION", False)
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    before = matmul.allow_tf32, cudnn.allow_tf32
    with tf32(not before[0]):
        assert matmul.allow_tf32 is cudnn.allow_tf32 is tf32_enabled() is (not before[0])
    assert (matmul.allow_tf32, cudnn.allow_tf32) == before


def test_tf32_switch_emits_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tf32(True):
            tf32_enabled()
        with tf32(False):
            tf32_enabled()
        tf32_enabled()


@pytest.mark.gpu
@cuda_only
def test_tf32_changes_cuda_matmul_precision():
    # TF32 keeps 10 mantissa bits: its error on a K=4096 product is about a thousand times fp32's.
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(512, 4096, device="cuda", generator=gen)
    b = torch.randn(4096, 512, device="cuda", generator=gen)
    exact = a.double() @ b.double()
    with tf32(False):
        err_ieee = ((a @ b).double() - exact).abs().max().item()
    with tf32(True):
        err_tf32 = ((a @ b).double() - exact).abs().max().item()
    assert err_tf32 > 50 * err_ieee
