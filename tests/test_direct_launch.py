"""Launches kept per call signature (kernels/flash_attention_triton/direct.py, launch._signature and
tuning._Kernel.kept): on the CPU against a fake compiled kernel, on a GPU against Triton's own."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from kernels.flash_attention_triton import direct, launch, tuning
from tests.attention_checks import out_and_grads

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover
    TensorDescriptor = None


class _FakeCompiled:
    """What a jit launch returns, as far as DirectLaunch reads it; `run` records each launch."""

    def __init__(self):
        self.launches: list[tuple] = []
        self.function = "function"
        self.packed_metadata = "metadata"

    def run(self, *launch):
        self.launches.append(launch)

    def launch_metadata(self, grid, stream, *args):
        return ("metadata of", grid)


def _prepared(
    monkeypatch, bound: dict, per_call: tuple[str, ...]
) -> tuple[direct.DirectLaunch, _FakeCompiled]:
    compiled = _FakeCompiled()
    made = direct.prepare(compiled, (4, 2), bound, per_call, device=0)
    monkeypatch.setattr(made, "current_stream", lambda device: f"stream of {device}")
    return made, compiled


def test_each_call_puts_its_tensors_in_place_and_keeps_every_other_argument(monkeypatch):
    first = [torch.zeros(2), torch.zeros(3)]
    bound = {"A": first[0], "n": 7, "B": first[1], "desc": None, "BLOCK": 64}
    made, compiled = _prepared(monkeypatch, bound, ("A", "B", "desc"))
    # The preparing call's tensors are not held: they would stay alive with the launch.
    assert made.args == [None, 7, None, None, 64]
    a, b = torch.ones(2), torch.ones(3)
    made(a, b, torch.ones(1))  # the descriptor was not made: its place keeps None
    grid_x, grid_y, grid_z, stream, function, metadata, launch_metadata, _enter, _exit, *args = (
        compiled.launches[0]
    )
    assert (grid_x, grid_y, grid_z, stream, function, metadata) == (
        4,
        2,
        1,
        "stream of 0",
        "function",
        "metadata",
    )
    assert launch_metadata == ("metadata of", (4, 2, 1))
    assert args[0] is a and args[2] is b and (args[1], args[3], args[4]) == (7, None, 64)
    assert made.value("BLOCK") == 64 and made.value("n") == 7
    with pytest.raises(ValueError):
        made(a)  # one tensor for three places: refused, not launched with stale ones
    assert len(compiled.launches) == 1


@pytest.mark.skipif(TensorDescriptor is None, reason="this Triton has no host TMA descriptors")
def test_a_descriptor_is_rebuilt_around_each_calls_tensor_with_the_prepared_tiles(monkeypatch):
    first = torch.zeros(1, 2, 32, 16)
    descriptor = TensorDescriptor(first, list(first.shape), list(first.stride()), [1, 1, 16, 16])
    made, compiled = _prepared(monkeypatch, {"Q": first, "desc_q": descriptor}, ("Q", "desc_q"))
    for _ in range(2):
        q = torch.randn(1, 2, 32, 16)
        made(q, q)
        passed = compiled.launches[-1][-1]
        assert passed.base is q and passed.base is not first
        assert (passed.shape, passed.strides, passed.block_shape) == (
            [1, 2, 32, 16],
            [1024, 512, 16, 1],
            [1, 1, 16, 16],
        )
        assert passed.padding == "zero"
        # Every field of this release's descriptor, which its launcher may read (3.7 on: round_f32_to_tf32).
        assert passed._fields == tuple(field.name for field in dataclasses.fields(descriptor))


@pytest.mark.skipif(direct.GluonTensorDescriptor is None, reason="needs Triton's Gluon")
def test_a_gluon_descriptor_is_rebuilt_the_same_way_with_its_layout(monkeypatch):
    from kernels.flash_attention_triton import gluon_forward

    first = torch.zeros(2 * 128, 64, dtype=torch.bfloat16)
    layout = gluon_forward.shared_layout([64, 64], torch.bfloat16)
    descriptor = direct.GluonTensorDescriptor(first, [256, 64], [64, 1], [64, 64], layout)
    made, compiled = _prepared(monkeypatch, {"q_desc": descriptor, "HEAD": 64}, ("q_desc",))
    q = torch.zeros(2 * 128, 64, dtype=torch.bfloat16)
    made(q)
    passed = compiled.launches[-1][-2]
    assert passed.base is q and passed.layout is layout
    assert (passed.shape, passed.strides, passed.block_shape, passed.padding) == (
        [256, 64],
        [64, 1],
        [64, 64],
        "zero",
    )


def test_launch_hooks_are_passed_on_as_triton_passes_them(monkeypatch):
    knobs = pytest.importorskip("triton.knobs")
    made, compiled = _prepared(monkeypatch, {"A": torch.zeros(1)}, ("A",))

    def enter(metadata):
        pass

    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", enter)
    made(torch.zeros(1))
    assert compiled.launches[0][6:8] == (("metadata of", (4, 2, 1)), enter)


def test_no_direct_launch_without_a_compiled_kernel():
    # The interpreter's jit functions return no compiled kernel: calls keep the jit path.
    assert direct.prepare(None, (1,), {"A": 1}, ("A",), 0) is None
    assert direct.prepare(object(), (1,), {"A": 1}, ("A",), 0) is None


def test_a_launch_is_prepared_and_kept_only_when_asked_to_be():
    compiled = _FakeCompiled()

    class Kernel:  # a jit function as far as launch_keeping reads it
        def __init__(self):
            self.arg_names, self.launched = ["A", "BLOCK"], []

        def __getitem__(self, grid):
            return lambda **named: self.launched.append(named) or compiled

    kernel, kept, named = Kernel(), direct.Kept(), {"A": torch.zeros(2), "BLOCK": 64, "num_warps": 4}
    direct.launch_keeping(kernel, (1,), named, ("A",), 0, None)
    direct.launch_keeping(kernel, (1,), named, ("A",), 0, (kept, "signature"))
    assert kernel.launched == [named, named] and list(kept) == ["signature"]
    assert kept["signature"].value("BLOCK") == 64


def test_kept_drops_the_oldest_signature_beyond_its_limit():
    kept = direct.Kept(limit=2)
    kept["a"], kept["b"] = 1, 2
    kept["a"] = 3  # replacing one makes no room
    kept["c"] = 4
    assert list(kept) == ["b", "c"] and kept["c"] == 4


# --------------------------------------------------------------------------- signatures
def _signature(*tensors, causal=True):
    return launch._signature(causal, *tensors)


def test_the_signature_follows_shape_stride_dtype_device_alignment_causal_and_settings(monkeypatch):
    q = torch.zeros(1, 2, 64, 32)
    same = _signature(q)
    assert _signature(torch.ones(1, 2, 64, 32)) == same
    assert _signature(torch.zeros(1, 2, 65, 32)) != same  # shape
    assert _signature(torch.zeros(1, 64, 2, 32).transpose(1, 2)) != same  # strides
    assert _signature(q.half()) != same  # dtype
    assert _signature(torch.zeros(1, 2, 64, 32, device="meta")) != same  # device
    unaligned = torch.zeros(1 * 2 * 64 * 32 + 2)[2:].view(1, 2, 64, 32)  # starts 8 bytes in
    assert _signature(unaligned) != same
    assert _signature(q, causal=False) != same
    monkeypatch.setenv("FLASH_TRITON_CONFIG", "forward:BLOCK_M=16,BLOCK_N=16")
    assert _signature(q) != same
    monkeypatch.delenv("FLASH_TRITON_CONFIG")
    for switch, value in (
        ("TMA_MIN_WORK", 1),
        ("TMA_MIN_WORK_FP32", 1),
        ("COLUMN_MAJOR_TF32_OPERANDS", False),
    ):
        with monkeypatch.context() as patched:
            patched.setattr(launch, switch, value)
            assert _signature(q) != same, switch
    assert _signature(q) == same


def test_a_kept_launch_lapses_when_its_key_chooses_another_configuration(monkeypatch):
    kernel = tuning.AUTOTUNED["forward"]
    config, other = (tuning.triton.Config({"BLOCK_M": m}) for m in (16, 32))
    monkeypatch.setattr(kernel, "chosen", {"key": config})
    monkeypatch.setattr(kernel, "prepared", direct.Kept())
    made = object()
    kernel.prepared["signature"] = (config, "key", made)
    kernel.prepared["forced"] = (None, None, made)  # forced: the signature holds FLASH_TRITON_CONFIG
    assert kernel.kept("signature") is made and kernel.last is config
    assert kernel.kept("forced") is made and kernel.kept("unknown") is None
    kernel.chosen["key"] = other  # a tuning run or a test chose again
    assert kernel.kept("signature") is None
    kernel.chosen.clear()
    assert kernel.kept("signature") is None


# --------------------------------------------------------------------------- on a GPU
cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1", reason="needs a CUDA GPU"
)


def _jit_runs(monkeypatch) -> list[str]:
    """Names of the kernels launched through a jit function from now on."""
    from triton.runtime.jit import JITFunction

    seen: list[str] = []
    run = JITFunction.run

    def counted(self, *args, **kwargs):
        seen.append(self.fn.__name__)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(JITFunction, "run", counted)
    return seen


def _inputs(shape, dtype, device="cuda", seed=0):
    generator = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(shape, generator=generator, device=device, dtype=dtype) for _ in range(4)]


def _expected(q, k, v, grad, causal):
    """Output and gradients in fp32 through SDPA."""

    def attention(q, k, v, is_causal):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)

    return out_and_grads(attention, *(t.float() for t in (q, k, v, grad)), causal)


def _gradients(q, k, v, grad, causal):
    from kernels.flash_attention_triton import FlashAttentionTriton

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = FlashAttentionTriton.apply(q, k, v, causal)
    out.backward(grad)
    return out.detach(), q.grad, k.grad, v.grad


# Forced configurations keep these tests from autotuning every key (tens of seconds each on a fresh
# machine); one case goes through the autotuner, whose choice a kept launch must follow.
FORWARD = "forward:BLOCK_M=64,BLOCK_N=32"
TWO_PASS = "backward:BLOCK_M1=32,BLOCK_N1=64,BLOCK_M2=64,BLOCK_N2=32"
ONE_PASS = TWO_PASS + ",ATOMIC_DQ=1"


def _case(backward: str | None, tma: bool, head_dim: int):
    """A forced configuration (None: tuned), TMA or not, a head dim; causal at 64, full at 80."""
    form = "tuned" if backward is None else ("one-pass" if "ATOMIC_DQ" in backward else "two-pass")
    forced = None if backward is None else f"{FORWARD};{backward}"
    loads = "tma" if tma else "pointers"
    return pytest.param(forced, tma, head_dim, head_dim == 64, id=f"{form}-{loads}-d{head_dim}")


@cuda
@pytest.mark.parametrize(
    ("forced", "tma", "head_dim", "causal"),
    [
        _case(None, False, 64),
        *(_case(b, tma, d) for b in (TWO_PASS, ONE_PASS) for tma in (False, True) for d in (64, 80)),
    ],
)
def test_direct_launches_give_the_jit_launches_results(monkeypatch, head_dim, causal, forced, tma):
    if forced:
        monkeypatch.setenv("FLASH_TRITON_CONFIG", forced)
    if tma:
        monkeypatch.setattr(launch, "TMA_MIN_WORK", 0)
    q, k, v, grad = _inputs((2, 3, 200, head_dim), torch.bfloat16)
    first = _gradients(q, k, v, grad, causal)  # tunes, where tuning is not forced
    second = _gradients(q, k, v, grad, causal)  # launched through the jit functions, then kept
    runs = _jit_runs(monkeypatch)
    third = _gradients(q, k, v, grad, causal)
    assert runs == [], "a kept signature launched through the jit function"
    for name, a, b, c in zip(("out", "dq", "dk", "dv"), first, second, third, strict=True):
        if name == "dq":  # the one-pass form adds dQ up atomically, in no fixed order
            torch.testing.assert_close(b, c, atol=1e-2, rtol=1e-2)
            torch.testing.assert_close(a, c, atol=1e-2, rtol=1e-2)
        else:
            assert torch.equal(a, b) and torch.equal(b, c), name


@cuda
@pytest.mark.parametrize("tma", [False, True], ids=["pointers", "tma"])
def test_a_changed_shape_stride_dtype_or_alignment_never_launches_a_kept_launch(monkeypatch, tma):
    monkeypatch.setenv("FLASH_TRITON_CONFIG", f"{FORWARD};{TWO_PASS}")
    if tma:
        monkeypatch.setattr(launch, "TMA_MIN_WORK", 0)
    base = (2, 3, 256, 64)
    cases = {
        "first": _inputs(base, torch.bfloat16),
        "longer": _inputs((2, 3, 320, 64), torch.bfloat16, seed=1),
        "transposed": [
            t.transpose(1, 2).contiguous().transpose(1, 2) for t in _inputs(base, torch.bfloat16, seed=2)
        ],
        "fp16": _inputs(base, torch.float16, seed=3),
        "offset": [
            torch.randn(2 * 3 * 256 * 64 + 4, device="cuda", dtype=torch.bfloat16)[4:].view(base)
            for _ in range(4)
        ],
        "first again": _inputs(base, torch.bfloat16, seed=4),
    }
    for name, (q, k, v, grad) in cases.items():
        for _ in range(2):  # launched through the jit functions and kept, then launched directly
            got = _gradients(q, k, v, grad, True)
        expected = _expected(q, k, v, grad, True)
        for label, a, b in zip(("out", "dq", "dk", "dv"), got, expected, strict=True):
            torch.testing.assert_close(a.float(), b.float(), atol=3e-2, rtol=3e-2, msg=f"{name}: {label}")


@cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_another_device_gets_its_own_launch(monkeypatch):
    for device in ("cuda:0", "cuda:1", "cuda:0", "cuda:1"):
        q, k, v, grad = _inputs((1, 2, 256, 64), torch.bfloat16, device=device)
        for _ in range(3):
            got = _gradients(q, k, v, grad, True)
        assert all(t.device == torch.device(device) for t in got)
        expected = _expected(q, k, v, grad, True)
        for a, b in zip(got, expected, strict=True):
            torch.testing.assert_close(a.float(), b.float(), atol=3e-2, rtol=3e-2)
