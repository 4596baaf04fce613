"""FlashAttentionTriton's backward under torch.use_deterministic_algorithms(True): two passes only.

The one-pass form adds each key tile's share of dQ with atomics, in whatever order the programs run;
deterministic mode keeps to the two-pass form, where every output has one writer. On a GPU when there
is one, else in Triton's CPU interpreter (fp16, small sizes)."""

import pytest
import torch

from kernels import flash_attention_triton as fat
from kernels.flash_attention_triton import configs, stored, tuning
from tests.attention_checks import F16, check_against_fp64, out_and_grads, random_qkv

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ONE_PASS = configs._config("backward", (16, 32, 32, 16), 4, 1, {"ATOMIC_DQ": 1})


@pytest.fixture
def deterministic():
    """Switches deterministic algorithms on for the test (warn_only: cuBLAS in the fp64 check on a GPU
    would otherwise need CUBLAS_WORKSPACE_CONFIG) and restores what was in force."""
    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    yield
    torch.use_deterministic_algorithms(before, warn_only=warn_only)


@pytest.fixture
def fresh_backward(monkeypatch) -> None:
    """Both backward kernels as in a fresh process, with no forced configuration."""
    monkeypatch.delenv(fat.CONFIG_ENV, raising=False)
    for kernel in (tuning.AUTOTUNED["backward"], tuning.DETERMINISTIC_BACKWARD):
        monkeypatch.setattr(kernel, "chosen", {})
        monkeypatch.setattr(kernel, "last", None)


@pytest.mark.autotuned
def test_deterministic_mode_runs_two_passes_where_the_default_runs_one(
    fresh_backward, dq_conversions, request
):
    """Kept launches stay with their mode: switching it back runs the default's one pass again."""
    torch.manual_seed(0)
    q, k, v = random_qkv((1, 2), 70, 90, 32, F16, device=DEVICE)
    grad_out = torch.randn_like(q)
    out_and_grads(fat.flash_attention_triton, q, k, v, grad_out, True)  # tunes the default's key
    default = tuning.AUTOTUNED["backward"]
    (key,) = default.chosen
    default.chosen[key] = ONE_PASS  # as if the autotuner had found the one pass faster
    dq_conversions.clear()
    out_and_grads(fat.flash_attention_triton, q, k, v, grad_out, True)
    assert len(dq_conversions) == 1  # the one pass ran

    request.getfixturevalue("deterministic")
    dq_conversions.clear()
    first = out_and_grads(fat.flash_attention_triton, q, k, v, grad_out, True)
    again = out_and_grads(fat.flash_attention_triton, q, k, v, grad_out, True)  # the kept launch
    assert dq_conversions == []  # two passes, both times
    assert tuning.DETERMINISTIC_BACKWARD.last.kwargs["ATOMIC_DQ"] == 0
    assert "ATOMIC_DQ: 0" in fat.chosen_configs()["backward (deterministic)"]
    for got, expected in zip(again, first, strict=True):
        assert torch.equal(got, expected)  # the same bits
    check_against_fp64(fat.FlashAttentionTriton, q, k, v, True, grad_out=grad_out)

    torch.use_deterministic_algorithms(False)
    out_and_grads(fat.flash_attention_triton, q, k, v, grad_out, True)
    assert len(dq_conversions) == 1  # the default mode's kept one-pass launch, not the deterministic one


def test_a_stored_one_pass_choice_is_not_taken_in_deterministic_mode(monkeypatch, fresh_backward):
    monkeypatch.setattr(stored, "lookup", lambda *args: ONE_PASS)
    key = (128, 128, False, 32, True, torch.float16, torch.device(DEVICE))
    assert tuning.AUTOTUNED["backward"].known(key) is ONE_PASS
    assert tuning.DETERMINISTIC_BACKWARD.known(key) is None  # tuned among the two-pass candidates


def test_the_deterministic_candidates_are_the_two_pass_ones(monkeypatch):
    monkeypatch.setattr(configs, "interpreting", lambda: False)  # the GPU's candidates
    every = tuning._tuned("backward", tuning._backward_fixed).configs
    two_pass = tuning._tuned("backward", tuning._backward_fixed, two_pass_only=True).configs
    assert any(c.kwargs["ATOMIC_DQ"] for c in every)
    assert two_pass == [c for c in every if not c.kwargs["ATOMIC_DQ"]]


def test_a_forced_one_pass_is_refused_in_deterministic_mode(monkeypatch, deterministic):
    monkeypatch.setenv(fat.CONFIG_ENV, "backward:BLOCK_M1=16,BLOCK_N1=32,BLOCK_M2=32,BLOCK_N2=16,ATOMIC_DQ=1")
    q, k, v = (t.requires_grad_() for t in random_qkv((1, 2), 40, 40, 32, F16, device=DEVICE))
    out = fat.FlashAttentionTriton.apply(q, k, v, True)
    with pytest.raises(ValueError, match=r"ATOMIC_DQ=1.*use_deterministic_algorithms\(True\)"):
        out.backward(torch.randn_like(out))
