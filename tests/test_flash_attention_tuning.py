"""FlashAttentionTriton's tuning: tuned keys launched without the autotuner, the stored tables, the
GPU candidates and how the autotuner times them."""

import re
from pathlib import Path

import pytest
import torch
import triton
from triton.runtime.errors import OutOfResources

from kernels import flash_attention_triton as fat
from kernels.flash_attention_triton import (
    configs,
    flash_attention_triton,
    stored,
    stored_writing,
    tuning,
)
from tests.attention_checks import (
    BF16,
    F16,
    F32,
    out_and_grads,
)
from tests.triton_attention import (
    CUDA,
    check,
    launches_run_out_of,
    pin_configuration,
    qkv,
)


@pytest.fixture(autouse=True)
def pinned_configuration(request, monkeypatch):
    pin_configuration(request, monkeypatch)


# --------------------------------------------------------------------------- tuned launches
@pytest.fixture
def autotuner_runs(monkeypatch) -> dict[str, int]:
    """Calls of each kernel's autotuner in this test, which starts as a fresh process would: no
    FLASH_TRITON_CONFIG and no key tuned yet (the autotuner's own cache is left as it is)."""
    monkeypatch.delenv(fat.CONFIG_ENV, raising=False)
    runs = dict.fromkeys(tuning.AUTOTUNED, 0)
    for name, kernel in tuning.AUTOTUNED.items():
        monkeypatch.setattr(kernel, "chosen", {})

        def counted(*args, _name=name, _run=kernel.tuned.run, **kwargs):
            runs[_name] += 1
            return _run(*args, **kwargs)

        monkeypatch.setattr(kernel.tuned, "run", counted)
    return runs


@pytest.mark.autotuned
@pytest.mark.parametrize("dtype", [F32, F16])
def test_a_tuned_key_launches_without_the_autotuner(autotuner_runs, dtype):
    """The autotuner picks a key's configuration once; later launches of that key run it directly,
    with the same results. A new key (here a longer key-length bucket) goes through the autotuner."""
    torch.manual_seed(0)
    q, k, v = qkv((1, 2), 70, 90, 32, dtype)
    grad_out = torch.randn_like(q)
    first = out_and_grads(flash_attention_triton, q, k, v, grad_out, True)
    assert autotuner_runs == {"forward": 1, "backward": 1}
    check(q, k, v, True, grad_out)
    again = out_and_grads(flash_attention_triton, q, k, v, grad_out, True)
    assert autotuner_runs == {"forward": 1, "backward": 1}
    for got, expected in zip(again, first, strict=True):  # atomics, if chosen, may add in another order
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-4)
    check(*qkv((1, 2), 70, 200, 32, dtype), True)
    assert autotuner_runs == {"forward": 2, "backward": 2}
    assert all(fat.chosen_configs().values())


@pytest.mark.autotuned
@pytest.mark.parametrize("atomic_dq", [0, 1])
def test_a_tuned_key_runs_its_own_configuration(autotuner_runs, dq_conversions, backward_buffers, atomic_dq):
    """Each key launches with its own configuration whatever the last key chose: the backward's form
    (one pass or two) decides whether the launcher converts dQ and gives the launch an fp32 dQ, so
    running another key's would be wrong."""
    torch.manual_seed(0)
    inputs = qkv((1, 2), 70, 90, 32, F16)
    check(*inputs, True)
    backward = tuning.AUTOTUNED["backward"]
    # Before tuning the buffer is there if any candidate left for these rows is one-pass (on a GPU).
    candidates = configs._prune(backward.tuned.configs, {"Q": inputs[0], "HEAD_DIM": 32})
    assert (backward_buffers[0][0] > 0) == any(c.kwargs["ATOMIC_DQ"] for c in candidates)
    (key,) = backward.chosen
    backward.chosen[key] = configs._config("backward", (16, 32, 32, 16), 4, 1, {"ATOMIC_DQ": atomic_dq})
    check(*qkv((1, 2), 70, 200, 32, F16), True)  # another key, tuned after the first
    dq_conversions.clear()
    check(*inputs, True)
    assert autotuner_runs["backward"] == 2
    assert len(dq_conversions) == atomic_dq
    assert backward_buffers[-1][0] == (inputs[0].numel() if atomic_dq else 0)
    assert f"ATOMIC_DQ: {atomic_dq}" in fat.chosen_configs()["backward"]


@pytest.fixture
def fresh_autotuner(monkeypatch, autotuner_runs):
    """autotuner_runs, with the autotuners' in-process choices cleared and nothing written to Triton's
    on-disk timings (a refused candidate times as infinite: it must not be cached for later runs)."""
    for kernel in tuning.AUTOTUNED.values():
        monkeypatch.setattr(kernel.tuned, "cache", {})
        monkeypatch.setattr(kernel.tuned, "cache_results", False)
    return autotuner_runs


@pytest.mark.autotuned
def test_the_autotuner_skips_a_candidate_out_of_shared_memory(monkeypatch, fresh_autotuner):
    """Unforced, a candidate Triton refuses is timed as infinite and another is chosen, as before."""
    forward = tuning.AUTOTUNED["forward"]
    big, small = (configs._config("forward", tiles, 4, 1) for tiles in ((64, 64), (32, 16)))
    monkeypatch.setattr(forward.tuned, "configs", [big, small])
    launches_run_out_of(monkeypatch, "forward", when=lambda kwargs: kwargs["BLOCK_M"] == 64)

    def do_bench(fn, warmup=0, rep=0, quantiles=None):
        fn()
        return [1.0, 1.0, 1.0] if quantiles else 1.0

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    check(*qkv((1, 2), 40, 40, 16, F32), True)
    assert fresh_autotuner["forward"] == 1
    assert forward.tuned.configs_timings[big][0] == float("inf")
    assert forward.last is small


@pytest.mark.autotuned
def test_an_unforced_launch_out_of_resources_is_left_as_triton_raised_it(monkeypatch, fresh_autotuner):
    """Without FLASH_TRITON_CONFIG no entry is to blame: Triton's OutOfResources passes unchanged, from
    the autotuner's launch and from the direct launch of a tuned key."""
    forward = tuning.AUTOTUNED["forward"]
    q, k, v = qkv((1, 2), 40, 40, 16, F32)
    for tuned in (False, True):
        with monkeypatch.context() as patched:
            launches_run_out_of(patched, "forward")
            with pytest.raises(OutOfResources):
                flash_attention_triton(q, k, v)
        assert fresh_autotuner["forward"] == 1 + tuned  # the refused call ran the autotuner, or not
        assert bool(forward.chosen) == tuned
        flash_attention_triton(q, k, v)  # refused by nothing: tunes the key, or launches it directly


# --------------------------------------------------------------------------- stored tables
GPU_NAME = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def stored_table(monkeypatch, tmp_path, autotuner_runs):
    """write(entries) stores a table for this run's GPU (on the CPU a GPU is named for the interpreter's
    launches) and points FLASH_TRITON_TUNING at it; the test starts as a fresh process would."""
    gpu = torch.cuda.get_device_name() if CUDA else GPU_NAME
    monkeypatch.setattr(stored, "gpu_name_of", lambda device: gpu)
    monkeypatch.setenv(stored.ENV, "off")  # until a table is written: the keys are tuned first
    path = tmp_path / "table.json"

    def write(entries, gpu_name=gpu):
        info = {"name": gpu_name, "capability": "9.0", "driver": "580", "cuda": "13.0", "commit": None,
                "dirty": False, "torch": torch.__version__, "triton": triton.__version__}  # fmt: skip
        stored_writing.write_table(path, info, entries, "test")
        for name in ("_NOTES", "_USED", "_VALID"):
            monkeypatch.setattr(stored, name, {})
        stored._read_stamped.cache_clear()
        monkeypatch.setenv(stored.ENV, str(path))

    return write


def _tuned_keys(q, k, v, causal):
    """The forward's and backward's tuning keys of these inputs, from one autotuned call."""
    out_and_grads(flash_attention_triton, q, k, v, torch.randn_like(q), causal)
    return {name: next(iter(kernel.chosen)) for name, kernel in tuning.AUTOTUNED.items()}


@pytest.mark.autotuned
def test_a_stored_case_launches_its_configuration_without_the_autotuner(stored_table, autotuner_runs):
    torch.manual_seed(0)
    q, k, v = qkv((1, 2), 70, 90, 32, F16)
    keys = _tuned_keys(q, k, v, True)
    chosen = {name: tuning.AUTOTUNED[name].chosen[key] for name, key in keys.items()}
    stored_table([stored_writing.case_entry(name, keys[name], chosen[name]) for name in keys])
    for kernel in tuning.AUTOTUNED.values():
        kernel.chosen.clear()
    autotuner_runs.update(forward=0, backward=0)
    check(q, k, v, True)
    assert autotuner_runs == {"forward": 0, "backward": 0}
    assert {name: tuning.AUTOTUNED[name].chosen[keys[name]] for name in keys} == chosen
    check(*qkv((1, 2), 70, 200, 32, F16), True)  # another key bucket: not stored, tuned
    assert autotuner_runs == {"forward": 1, "backward": 1}


@pytest.mark.autotuned
@pytest.mark.parametrize("fault", ["another GPU", "not a candidate"])
def test_a_stored_case_that_does_not_fit_is_tuned_with_a_note(stored_table, autotuner_runs, fault):
    torch.manual_seed(0)
    q, k, v = qkv((1, 2), 40, 40, 16, F32)
    keys = _tuned_keys(q, k, v, False)
    config = tuning.AUTOTUNED["forward"].chosen[keys["forward"]]
    if fault == "not a candidate":
        config = triton.Config({"BLOCK_M": 256, "BLOCK_N": 256}, num_warps=2, num_stages=7)
        stored_table([stored_writing.case_entry("forward", keys["forward"], config)])
    else:
        stored_table([stored_writing.case_entry("forward", keys["forward"], config)], gpu_name="NVIDIA H200")
    for kernel in tuning.AUTOTUNED.values():
        kernel.chosen.clear()
    autotuner_runs.update(forward=0, backward=0)
    with pytest.warns(stored.TuningTableWarning):
        check(q, k, v, False)
    assert autotuner_runs["forward"] == 1
    assert any("H200" in note or "1 of 1" in note or "drop" in note for note in stored.describe(GPU_NAME))


# --------------------------------------------------------------------------- GPU candidates
@pytest.mark.parametrize("kernel", sorted(fat.BLOCK_NAMES))
def test_gpu_candidates_survive_the_autotuning_cache(monkeypatch, kernel):
    """The autotuner's on-disk cache stores each timed config as its __dict__ and rebuilds it with
    Config(**fields): a config carrying anything else would fail on the second run of a shape."""
    monkeypatch.setattr(configs, "interpreting", lambda: False)
    candidates = configs._candidates(kernel)
    assert len(candidates) == sum(len(rows) for (k, _), rows in configs._CANDIDATES.items() if k == kernel)
    for config in candidates:
        rebuilt = triton.Config(**config.__dict__)
        assert str(rebuilt) == str(config)
        assert rebuilt.all_kwargs() == config.all_kwargs()


@pytest.mark.parametrize(
    "head_dim, dtype, widths",
    [
        (64, BF16, ["narrow"]),
        (80, BF16, ["mid"]),
        (96, F16, ["mid"]),
        (128, BF16, ["wide"]),
        (32, F32, ["narrow"]),
        (64, F32, ["wide"]),
        (80, F32, ["wide"]),
        (128, F32, ["widest"]),
        (192, BF16, ["deep"]),
        (256, F32, ["deepest"]),
    ],
)
def test_candidates_are_pruned_to_the_row_width(monkeypatch, head_dim, dtype, widths):
    """... and fp32 keeps only the two-pass backward."""
    monkeypatch.setattr(configs, "interpreting", lambda: False)
    q = torch.empty(1, dtype=dtype)
    for kernel in fat.BLOCK_NAMES:
        kept = configs._prune(configs._candidates(kernel), {"Q": q}, HEAD_DIM=head_dim)
        rows = [row for width in widths for row in configs._CANDIDATES[kernel, width]]
        if dtype == F32:
            rows = [row for row in rows if len(row) == 3]
        expected = [configs._config(kernel, *row) for row in rows]
        assert not (dtype == F32 and any(c.kwargs.get("ATOMIC_DQ") for c in kept))
        assert [str(c) for c in kept] == [str(c) for c in expected]


def test_tuning_counts_the_one_pass_dq_conversion():
    """The autotuner times each backward candidate with this post-hook: the one-pass form's timing
    then includes converting its fp32 dQ, the two-pass form's nothing more."""
    assert tuning.AUTOTUNED["backward"].tuned.post_hook is tuning._convert_dq_while_tuning
    dq, dq_acc = torch.zeros(4, 8, dtype=F16), torch.full((4, 8), 0.5)
    args = {"DQ": dq, "DQ_ACC": dq_acc, "sm_scale": 0.25}
    tuning._convert_dq_while_tuning(args | {"ATOMIC_DQ": 0})
    assert dq.abs().sum() == 0
    tuning._convert_dq_while_tuning(args | {"ATOMIC_DQ": 1}, exception=RuntimeError())
    assert dq.abs().sum() == 0
    tuning._convert_dq_while_tuning(args | {"ATOMIC_DQ": 1})
    assert torch.equal(dq, torch.full((4, 8), 0.125, dtype=F16))  # the shares are summed unscaled


@pytest.mark.parametrize("call_ms", [0.5, 2.5, 7.0])
def test_tuning_times_long_candidates_over_more_calls(monkeypatch, call_ms):
    """A candidate is timed over TUNING_MS; one whose calls take longer than a tenth of that is timed
    again over enough time for TUNING_MIN_CALLS calls, and that second timing is the one used."""
    asked = []
    timings = [[call_ms, 0.9 * call_ms, 1.1 * call_ms], [1.01 * call_ms, call_ms, 1.02 * call_ms]]

    def do_bench(fn, warmup, rep, quantiles):
        asked.append(rep)
        return timings[len(asked) - 1]

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    timing = tuning._tuning_bench(lambda: None, quantiles=(0.5, 0.2, 0.8))
    if call_ms * tuning.TUNING_MIN_CALLS > tuning.TUNING_MS:
        assert asked[0] == tuning.TUNING_MS and asked[1] >= call_ms * tuning.TUNING_MIN_CALLS
        assert timing == timings[1]
    else:
        assert asked == [tuning.TUNING_MS] and timing == timings[0]


def test_configuration_examples_in_the_docs_parse():
    """docs/attention-kernel.md shows how to force configurations; each example must be accepted."""
    docs = Path(__file__).resolve().parents[1] / "docs" / "attention-kernel.md"
    examples = re.findall(r'FLASH_TRITON_CONFIG="([^"]+)"', docs.read_text())
    assert len(examples) >= 2
    for raw in examples:
        assert set(configs._parse_forced(raw)) <= set(fat.BLOCK_NAMES)
