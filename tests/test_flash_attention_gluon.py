"""The Gluon forward and backward (kernels/flash_attention_triton/gluon_forward.py, gluon_backward.py): where
launch runs them, and their outputs, L and gradients against fp64 on a Hopper GPU (Gluon has no CPU
interpreter: those tests skip elsewhere)."""

import pytest
import torch

from kernels import flash_attention_triton as fat
from kernels.flash_attention_triton import gluon_backward, gluon_forward, launch
from tests.attention_checks import BF16, F16, check_against_fp64, random_qkv

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
needs_hopper = pytest.mark.skipif(
    not (HOPPER and gluon_forward.HAVE_GLUON), reason="needs a Hopper GPU (sm_90) and Triton's Gluon"
)


def on_hopper_in_each_dtype_and_mask(test):
    """A GPU test on Hopper, run in bf16 and fp16, causal and full."""
    for mark in (
        pytest.mark.parametrize("is_causal", [True, False]),
        pytest.mark.parametrize("dtype", [BF16, F16]),
        pytest.mark.gpu,
        needs_hopper,
    ):
        test = mark(test)
    return test


@pytest.fixture
def gluon_calls(monkeypatch) -> list[tuple]:
    """The shapes the Gluon forward ran in this test, with the configuration left to the launcher."""
    monkeypatch.delenv(fat.CONFIG_ENV, raising=False)
    calls = []
    run = gluon_forward.gluon_attention_forward

    def counted(q, k, v, is_causal, **options):
        calls.append(tuple(q.shape))
        return run(q, k, v, is_causal, **options)

    monkeypatch.setattr(gluon_forward, "gluon_attention_forward", counted)
    return calls


def test_the_gluon_forward_is_left_out_where_it_was_not_written_for(monkeypatch):
    q = torch.empty(2, 4, 8192, 128, dtype=BF16)
    assert launch._gluon_forward_route(q, q, q, True) is None  # on the CPU, in the interpreter
    if not HOPPER:
        return
    q = q.cuda()
    assert launch._gluon_forward_route(q, q, q, True) == "gluon"
    assert launch._gluon_forward_route(q.float(), q.float(), q.float(), True) is None
    assert launch._gluon_forward_route(q[:, :, :4096], q, q, True) is None  # other key length
    q64 = torch.empty(2, 4, 4096, 64, dtype=BF16, device="cuda")
    assert launch._gluon_forward_route(q64, q64, q64, True) is None  # routed to the Triton kernel
    assert launch._gluon_forward_route(q64, q64, q64, False) == "persistent"
    tiny = torch.empty(1, 1, 1024, 128, dtype=BF16, device="cuda")
    assert launch._gluon_forward_route(tiny, tiny, tiny, False) is None  # too little work
    for head_dim in (80, 96):  # a main and a rest chunk
        q_rest = torch.empty(2, 4, 4096, head_dim, dtype=BF16, device="cuda")
        assert launch._gluon_forward_route(q_rest, q_rest, q_rest, True) == "gluon"
    odd = torch.empty(2, 4, 4096, 72, dtype=BF16, device="cuda")
    assert launch._gluon_forward_route(odd, odd, odd, True) is None
    assert launch._gluon_forward_route(q.transpose(1, 2).contiguous().transpose(1, 2), q, q, True) is None
    monkeypatch.setattr(launch, "GLUON_FORWARD_ROUTE", "persistent")
    assert launch._gluon_forward_route(q, q, q, True) == "persistent"
    monkeypatch.setenv(fat.CONFIG_ENV, "forward:BLOCK_M=64,BLOCK_N=64")
    assert launch._gluon_forward_route(q, q, q, True) is None
    monkeypatch.delenv(fat.CONFIG_ENV)
    monkeypatch.setattr(launch, "GLUON_FORWARD", False)
    assert launch._gluon_forward_route(q, q, q, True) is None


def test_each_forward_route_table_starts_from_no_keys_and_names_a_kernel_in_rising_order():
    # On any machine: the table covers every head dim the Gluon forward takes, causal and full.
    cells = {(head_dim, causal) for head_dim in launch.GLUON_FORWARD_HEAD_DIMS for causal in (True, False)}
    assert set(launch.GLUON_FORWARD_ROUTES) == cells
    for routes in launch.GLUON_FORWARD_ROUTES.values():
        starts = [from_seq for from_seq, _ in routes]
        assert starts[0] == 0 and starts == sorted(set(starts))
        assert {kernel for _, kernel in routes} <= set(launch.FORWARD_KERNELS)


def test_a_forced_forward_route_the_launcher_lacks_is_refused_naming_those_it_takes(monkeypatch):
    monkeypatch.setattr(launch, "GLUON_FORWARD_ROUTE", "fastest")
    q = torch.empty(1, 1, 8, 64)
    accepted = "accepted: None, 'triton', 'gluon', 'persistent'$"
    with pytest.raises(ValueError, match=r"GLUON_FORWARD_ROUTE is 'fastest'; " + accepted):
        launch._gluon_forward_route(q, q, q, True)


@on_hopper_in_each_dtype_and_mask
@pytest.mark.parametrize(
    ("batch_heads", "seq", "head_dim"),
    [
        ((2, 4), 4096, 128),
        ((4, 2), 3000, 128),
        ((1, 2), 8192, 64),
        ((1, 3), 8200, 64),
        ((2, 4), 4096, 80),
        ((4, 3), 3000, 80),
        ((2, 4), 4096, 96),
        ((4, 3), 3000, 96),
    ],  # work >= 2^33
    ids=["d128", "d128-ragged", "d64", "d64-ragged", "d80", "d80-ragged", "d96", "d96-ragged"],
)
def test_the_gluon_forward_matches_fp64(
    monkeypatch, gluon_calls, dtype, is_causal, batch_heads, seq, head_dim
):
    monkeypatch.setattr(launch, "GLUON_FORWARD_ROUTE", "gluon")  # a program per query tile
    torch.manual_seed(0)
    q, k, v = random_qkv(batch_heads, seq, seq, head_dim, dtype, device="cuda")
    check_against_fp64(fat.FlashAttentionTriton, q, k, v, is_causal)  # its L feeds the Triton backward
    assert gluon_calls and gluon_calls[0] == q.shape


@on_hopper_in_each_dtype_and_mask
@pytest.mark.parametrize("head_dim", [64, 80, 96, 128])
@pytest.mark.parametrize(
    ("batch_heads", "seq"),
    [((4, 16), 1024), ((4, 13), 1000), ((8, 40), 200)],
    ids=["whole", "ragged", "short"],  # 512, 416 and 640 tiles: each program takes several
)
def test_the_persistent_gluon_forward_matches_fp64(
    monkeypatch, gluon_calls, dtype, is_causal, batch_heads, seq, head_dim
):
    monkeypatch.setattr(launch, "GLUON_FORWARD_ROUTE", "persistent")
    monkeypatch.setattr(launch, "GLUON_MIN_WORK", 0)
    torch.manual_seed(0)
    q, k, v = random_qkv(batch_heads, seq, seq, head_dim, dtype, device="cuda")
    check_against_fp64(fat.FlashAttentionTriton, q, k, v, is_causal)
    assert gluon_calls and gluon_calls[0] == q.shape


@pytest.mark.skipif(not gluon_forward.HAVE_GLUON, reason="needs Triton's Gluon")
def test_a_head_dim_the_gluon_kernels_lack_is_refused_naming_those_they_take():
    q = torch.empty(1, 1, 8, 72, dtype=BF16)
    with pytest.raises(ValueError, match=r"^head_dim 64, 80, 96 or 128 expected, got 72$"):
        gluon_forward.gluon_attention_forward(q, q, q, True)
    with pytest.raises(ValueError, match=r"^head_dim 64 or 128 expected, got 80$"):
        gluon_forward.check_inputs(*[torch.empty(1, 1, 8, 80, dtype=BF16)] * 4)


@pytest.mark.parametrize(
    ("head_dim", "split"), [(64, (64, 0)), (80, (64, 16)), (96, (64, 32)), (128, (128, 0))]
)
def test_each_head_dim_is_a_power_of_two_main_chunk_and_a_rest(head_dim, split):
    assert gluon_forward.head_split(head_dim) == split


@needs_hopper
@pytest.mark.gpu
def test_non_contiguous_inputs_take_the_triton_forward(gluon_calls):
    torch.manual_seed(0)
    q, k, v = (
        t.transpose(1, 2).contiguous().transpose(1, 2)
        for t in random_qkv((2, 4), 4096, 4096, 128, BF16, device="cuda")
    )
    check_against_fp64(fat.FlashAttentionTriton, q, k, v, True)
    assert gluon_calls == []


@pytest.fixture
def gluon_backward_calls(monkeypatch) -> list[tuple]:
    """The shapes the Gluon backward ran in this test, with its thresholds lowered so that small shapes
    take it."""
    monkeypatch.delenv(fat.CONFIG_ENV, raising=False)
    monkeypatch.setattr(launch, "GLUON_BACKWARD_MIN_WORK", 0)
    monkeypatch.setattr(launch, "GLUON_BACKWARD_HEAD_DIM_64_MIN_SEQ", 0)
    calls = []
    run = gluon_backward.gluon_attention_backward_into

    def counted(q, *args, **kwargs):
        calls.append(tuple(q.shape))
        return run(q, *args, **kwargs)

    monkeypatch.setattr(gluon_backward, "gluon_attention_backward_into", counted)
    return calls


def test_the_gluon_backward_is_left_out_where_it_was_not_written_for(monkeypatch):
    q = torch.empty(4, 4, 4096, 128, dtype=BF16)
    assert not launch._gluon_backward_applies(q, q, q, q)  # on the CPU, in the interpreter
    if not HOPPER:
        return
    q = q.cuda()
    assert launch._gluon_backward_applies(q, q, q, q)
    strided = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert launch._gluon_backward_applies(q, q, q, strided)  # dO is copied
    assert not launch._gluon_backward_applies(q.half(), q, q, q)  # mixed dtypes
    assert not launch._gluon_backward_applies(q[:, :, :2048], q, q, q)  # other key length
    assert not launch._gluon_backward_applies(*[torch.empty(4, 32, 4096, 64, dtype=BF16, device="cuda")] * 4)
    assert not launch._gluon_backward_applies(*[torch.empty(1, 1, 1024, 128, dtype=BF16, device="cuda")] * 4)
    for head_dim in (80, 96):  # a main and a rest chunk
        assert launch._gluon_backward_applies(
            *[torch.empty(4, 4, 4096, head_dim, dtype=BF16, device="cuda")] * 4
        )
    assert not launch._gluon_backward_applies(strided, q, q, q)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        assert not launch._gluon_backward_applies(q, q, q, q)
    finally:
        torch.use_deterministic_algorithms(False)
    monkeypatch.setenv(fat.CONFIG_ENV, "backward:BLOCK_M1=64,BLOCK_N1=64,BLOCK_M2=64,BLOCK_N2=64")
    assert not launch._gluon_backward_applies(q, q, q, q)
    monkeypatch.delenv(fat.CONFIG_ENV)
    monkeypatch.setattr(launch, "GLUON_BACKWARD", False)
    assert not launch._gluon_backward_applies(q, q, q, q)


@on_hopper_in_each_dtype_and_mask
@pytest.mark.parametrize(
    ("batch_heads", "seq", "head_dim"),
    [
        ((2, 2), 2048, 128),
        ((2, 3), 1000, 128),
        ((1, 2), 130, 128),
        ((2, 2), 2048, 64),
        ((1, 3), 777, 64),
        ((2, 2), 2048, 80),
        ((2, 3), 1000, 80),
        ((2, 2), 2048, 96),
        ((1, 3), 777, 96),
    ],
    ids=["d128", "d128-ragged", "d128-short", "d64", "d64-ragged", "d80", "d80-ragged", "d96", "d96-ragged"],
)
def test_the_gluon_backward_matches_fp64(gluon_backward_calls, dtype, is_causal, batch_heads, seq, head_dim):
    torch.manual_seed(0)
    q, k, v = random_qkv(batch_heads, seq, seq, head_dim, dtype, device="cuda")
    check_against_fp64(fat.FlashAttentionTriton, q, k, v, is_causal)
    assert gluon_backward_calls == [q.shape]


@needs_hopper
@pytest.mark.gpu
def test_deterministic_algorithms_take_the_triton_backward(gluon_backward_calls):
    torch.manual_seed(0)
    q, k, v = random_qkv((1, 2), 1000, 1000, 128, BF16, device="cuda")
    torch.use_deterministic_algorithms(True, warn_only=True)  # warn_only: the references' cuBLAS calls
    try:
        check_against_fp64(fat.FlashAttentionTriton, q, k, v, True)
    finally:
        torch.use_deterministic_algorithms(False)
    assert gluon_backward_calls == []


def _roles(names: tuple[str, ...], **tensors) -> tuple:
    """The tensor each per-call argument takes, by its name's first part (q_desc, q_rest_desc: q)."""
    return tuple(tensors[name.split("_")[0]] for name in names)


def test_kept_gluon_launches_get_each_calls_tensors_in_the_kernels_order(monkeypatch):
    # On the CPU: the launcher's wiring, with the kernels' launches replaced by what keeps a fake launch.
    monkeypatch.setattr(launch, "GLUON_KEPT", True)
    given = []

    def keeping(q, k, v, is_causal, keep, persistent):
        kept, signature = keep
        kept[signature] = lambda *tensors: given.append(tensors)
        return torch.empty_like(q), torch.empty(q.shape[:3])

    monkeypatch.setattr(gluon_forward, "gluon_attention_forward", keeping)
    q, k, v = (torch.randn(1, 2, 8, 80) for _ in range(3))
    launch._gluon_forward(q, k, v, True, persistent=False)  # kept
    out, lse = launch._gluon_forward(q, k, v, True, persistent=False)  # through the kept launch
    assert len(given) == 1 and all(a is b for a, b in zip(given[0], _roles(
        gluon_forward.PER_CALL, q=q, k=k, v=v, o=out, out=out, lse=lse), strict=True))  # fmt: skip

    def keeping_backward(q, k, v, do, lse, delta, dq_acc, dk, dv, is_causal, keep):
        kept, signature = keep
        kept[signature] = lambda *tensors: given.append(tensors)

    monkeypatch.setattr(gluon_backward, "gluon_attention_backward_into", keeping_backward)
    monkeypatch.setattr(launch, "_row_dot", lambda *args: None)
    monkeypatch.setattr(launch.tuning, "convert_dq", lambda dq_acc, scale, dq: dq.copy_(dq_acc))
    grad_out = torch.randn(1, 2, 8, 80)
    launch._gluon_backward(q, k, v, out, lse, grad_out, True)
    _dq, dk, dv = launch._gluon_backward(q, k, v, out, lse, grad_out, True)
    tensors = given[-1]
    assert len(given) == 2 and len(tensors) == len(gluon_backward.PER_CALL)
    by_name = dict(zip(gluon_backward.PER_CALL, tensors, strict=True))
    assert by_name["q_desc"] is q and by_name["do_desc"] is grad_out and by_name["dk_ptr"] is dk
    assert by_name["dv_ptr"] is dv and by_name["lse_ptr"] is lse and by_name["k_rest_desc"] is k
    assert by_name["dq_desc"] is by_name["dq_rest_desc"] and by_name["dq_desc"].dtype == torch.float32


@on_hopper_in_each_dtype_and_mask
@pytest.mark.parametrize("persistent", [False, True], ids=["per-tile", "persistent"])
@pytest.mark.parametrize("head_dim", [64, 80, 128])
def test_kept_gluon_launches_give_the_first_calls_results(
    monkeypatch, dtype, is_causal, head_dim, persistent
):
    monkeypatch.setattr(launch, "GLUON_KEPT", True)
    monkeypatch.setattr(launch, "GLUON_FORWARD_ROUTE", "persistent" if persistent else "gluon")
    monkeypatch.setattr(launch, "GLUON_BACKWARD_MIN_WORK", 0)
    monkeypatch.setattr(launch, "GLUON_BACKWARD_HEAD_DIM_64_MIN_SEQ", 0)
    monkeypatch.setattr(launch, "GLUON_MIN_WORK", 0)
    torch.manual_seed(0)
    q, k, v = random_qkv((2, 3), 1000, 1000, head_dim, dtype, device="cuda")
    for _ in range(2):  # kept by the first call, launched directly by the second
        check_against_fp64(fat.FlashAttentionTriton, q, k, v, is_causal)
    assert launch._gluon_forwards and launch._gluon_backwards
