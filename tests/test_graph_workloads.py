"""The CUDA graph workload: the inference forward, its capture, and replays of new inputs.

Replays are checked against the eager forward with torch.testing.assert_close's tolerances for
the output dtype: a replay runs the captured kernels, the eager call picks them afresh.
"""

import pytest
import torch

from perf.graph_workloads import capture_forward, forward_workload, inference_forward, inference_model
from perf.workloads import random_batch

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
CPU = torch.device("cpu")


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
    assert workload.work.flops == config.flops_per_token(32, "forward") * tokens
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
