"""The CUDA graph workloads: the inference forward, its capture, and replays of new inputs; the whole
training step captured, and the steps that cannot be.

Replays are checked against the eager forward with torch.testing.assert_close's tolerances for
the output dtype: a replay runs the captured kernels, the eager call picks them afresh.
"""

import gc
import re

import pytest
import torch

from model.optim import build_optimizer
from perf.workloads.capture import CAPTURE_WARMUP_CALLS, NotCapturable, capture
from perf.workloads.graphs import capture_forward, forward_workload, inference_forward, inference_model
from perf.workloads.lm import check_capturable, lm_workload, random_batch

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
CPU = torch.device("cpu")
CUDA = torch.device("cuda")  # named, never touched on a machine without one


def test_inference_model_is_frozen_and_in_eval_mode():
    _, model = inference_model("tiny", 32, CPU)
    assert not model.training
    assert not any(p.requires_grad for p in model.parameters())


def test_inference_forward_gives_logits_without_autograd():
    config, model = inference_model("tiny", 32, CPU)
    forward = inference_forward(model, "fp32", CPU)
    inputs, _ = random_batch(config, CPU)  # (B, T)
    logits = forward(inputs)
    assert logits.shape == (config.batch_size, 32, config.vocab_size)
    assert logits.grad_fn is None
    torch.testing.assert_close(logits, model(inputs))


def test_eager_workload_counts_the_forward_flops_of_its_batch():
    workload = forward_workload("eager", "tiny", "fp32", 32, CPU)
    config = workload.config
    tokens = config.batch_size * 32
    assert workload.work.tokens == tokens
    # Causal attention counts half of the score square, as the causal kernels compute it.
    assert workload.work.flops == config.flops_per_token(32, "forward", attention="causal") * tokens
    assert workload.work.flops < config.flops_per_token(32, "forward", attention="full") * tokens
    assert workload.step().shape == (config.batch_size, 32, config.vocab_size)


def test_unknown_variant_and_precision_are_rejected():
    with pytest.raises(ValueError, match="variant: unknown value 'jit'; accepted: eager, cuda_graph"):
        forward_workload("jit", "tiny", "fp32", 32, CPU)
    _, model = inference_model("tiny", 32, CPU)
    with pytest.raises(ValueError, match="unknown precision 'tf32'"):
        inference_forward(model, "tf32", CPU)


def test_capture_needs_a_cuda_tensor():
    config, model = inference_model("tiny", 32, CPU)
    inputs, _ = random_batch(config, CPU)
    with pytest.raises(ValueError, match="example_input: CUDA graphs capture CUDA work; got a tensor on cpu"):
        capture_forward(inference_forward(model, "fp32", CPU), inputs)


@pytest.mark.gpu
@cuda_only
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_replay_of_a_new_input_gives_its_eager_output(precision):
    device = torch.device("cuda")
    config, model = inference_model("tiny", 64, device)
    forward = inference_forward(model, precision, device)
    captured_input, _ = random_batch(config, device, seed=0)  # (B, T)
    new_input, _ = random_batch(config, device, seed=1)  # (B, T)
    captured = capture_forward(forward, captured_input)

    replayed = captured(new_input).clone()  # (B, T, V)
    expected = forward(new_input)
    torch.testing.assert_close(replayed, expected)
    # The replay read the new input, not the one it was captured with.
    assert not torch.allclose(replayed, forward(captured_input))
    torch.testing.assert_close(captured(captured_input), forward(captured_input))


# --------------------------------------------------------------------------- the graphed training step
@pytest.mark.parametrize(
    ("mode", "precision", "optimizer", "device", "reason"),
    [
        ("train_step", "fp32", "torch_fused", CPU, "CUDA graphs capture CUDA work; this step runs on cpu"),
        ("train_step", "bf16", "own", CUDA, "optimizer 'own' reads its step count on the host"),
        ("train_step", "fp16", "torch_fused", CUDA, "the fp16 step's GradScaler reads"),
    ],
)
def test_steps_that_cannot_be_captured_say_why_before_building(mode, precision, optimizer, device, reason):
    with pytest.raises(NotCapturable, match=re.escape(reason)):
        lm_workload(mode, "sdpa", "tiny", precision, 32, device, optimizer, launch="cuda_graph")


def test_forward_modes_need_no_capturable_optimizer():
    check_capturable("forward_backward", "fp16", "own", CUDA)  # no optimizer, no scaler


def test_unknown_launch_is_rejected():
    with pytest.raises(ValueError, match="launch: unknown value 'jit'; accepted: eager, cuda_graph"):
        lm_workload("forward", "sdpa", "tiny", "fp32", 32, CPU, "torch", launch="jit")


def test_own_adamw_cannot_be_built_capturable():
    with pytest.raises(ValueError, match="capturable ones: torch, torch_fused"):
        build_optimizer([torch.nn.Parameter(torch.ones(2))], impl="own", capturable=True)


def _parameters(workload) -> list[torch.Tensor]:
    return [p.detach().clone() for p in workload.model.parameters()]


@pytest.mark.gpu
@cuda_only
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_replayed_training_step_trains_as_the_eager_one(precision):
    """Same initial weights, same batch: after the graph's 3 warm-up steps and 2 replays, the weights
    are those of 5 eager steps (torch's AdamW with capturable=True is the same update)."""
    device = CUDA
    workloads = {}
    for launch in ("eager", "cuda_graph"):
        torch.manual_seed(0)
        workloads[launch] = lm_workload(
            "train_step", "sdpa", "tiny", precision, 64, device, "torch_fused", launch=launch
        )
    eager, graphed = workloads["eager"], workloads["cuda_graph"]
    for _ in range(CAPTURE_WARMUP_CALLS):  # the graph's warm-up calls trained it already
        eager.step()
    before = _parameters(graphed)
    for _ in range(2):
        eager.step()
        graphed.step()
    torch.cuda.synchronize()
    after = _parameters(graphed)
    assert all(not torch.equal(b, a) for b, a in zip(before, after, strict=True))  # replays train
    for expected, got in zip(_parameters(eager), after, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@cuda_only
@pytest.mark.parametrize("mode", ["forward", "forward_backward"])
def test_forward_modes_capture_and_replay(mode):
    workload = lm_workload(mode, "naive", "tiny", "bf16", 64, CUDA, "torch", launch="cuda_graph")
    workload.step()
    torch.cuda.synchronize()
    if mode == "forward_backward":  # the replay wrote the gradients the captured backward allocated
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in workload.model.parameters())


@pytest.mark.gpu
@cuda_only
def test_a_graphed_step_keeps_alive_what_its_graph_reads():
    """The batch and AdamW's state live only in the step's closure; the graph holds their addresses.
    Freed, later allocations would take their memory: here int64 ids far beyond the vocabulary,
    which the embedding's gather refuses with a device-side assert."""
    workload = lm_workload("train_step", "sdpa", "tiny", "fp32", 64, CUDA, "torch_fused", launch="cuda_graph")
    gc.collect()
    junk = [torch.full((2**16 * (i + 1),), 2**40, dtype=torch.int64, device=CUDA) for i in range(64)]
    before = _parameters(workload)
    workload.step()
    torch.cuda.synchronize()
    del junk
    assert all(torch.isfinite(p).all() for p in workload.model.parameters())
    assert any(not torch.equal(b, p) for b, p in zip(before, workload.model.parameters(), strict=True))


@pytest.mark.gpu
@cuda_only
def test_a_step_that_waits_on_the_host_cannot_be_captured_and_says_why():
    """.item() synchronizes with the host, which a capturing stream refuses: a skip reason, not a crash."""
    x = torch.ones(4, device=CUDA)
    with pytest.raises(NotCapturable, match=r"^capture failed: \w+Error: "):
        capture(lambda: x.sum().item(), CUDA)
    torch.testing.assert_close(x.sum(), torch.tensor(4.0, device=CUDA))  # the device works on
    # and so does its random-number generator, which a failed capture leaves in capture mode
    assert torch.randn(8, device=CUDA).isfinite().all()
