"""The end-to-end workloads: a model, a batch, and the step functions that benchmarks time.

Each step is split into NVTX phases (forward, backward, optimizer_step) so that an nsys timeline
shows where a step's time goes. A step is launched op by op ("eager") or, "cuda_graph", captured
whole into a CUDA graph once and replayed: forward, backward and a capturable AdamW, on the same
static batch (perf/workloads/capture.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from model.config import FLOP_MODES, ModelConfig, get_preset
from model.loss import cross_entropy
from model.optim import CAPTURABLE_IMPLS, build_optimizer
from model.precision import autocast, check_precision, grad_scaler
from model.reference import ReferenceLM
from model.transformer import TransformerLM
from perf.cases.model import LAUNCHES
from perf.harness import Work, nvtx_range
from perf.workloads.capture import NotCapturable, captured_step


def lm_config(preset: str, context: int) -> ModelConfig:
    """The preset with its context length set to the benchmarked one (batch from the preset)."""
    return get_preset(preset).replace(context_length=context)


# Model implementations that run only on a CUDA GPU, and why. On the CPU the Triton kernel runs in
# Triton's interpreter alone (TRITON_INTERPRET=1): correct, and far too slow to say anything as a timing.
CUDA_ONLY_IMPLS = {"flash_triton": "the Triton kernel needs a CUDA GPU"}


class ImplUnavailable(Exception):
    """A model implementation that cannot run on the benchmark's device; the message says why."""


def check_runnable(impl: str, device: torch.device) -> None:
    """ImplUnavailable, before anything is built, for an implementation this device cannot run."""
    if impl in CUDA_ONLY_IMPLS and device.type != "cuda":
        raise ImplUnavailable(f"{impl}: {CUDA_ONLY_IMPLS[impl]}; this run is on {device}")


def build_model(impl: str, config: ModelConfig, device: torch.device) -> nn.Module:
    """'naive' / 'sdpa' / 'flash_triton': the project's TransformerLM with that attention;
    'reference': plain PyTorch."""
    if impl == "reference":
        return ReferenceLM(config, device=device)  # initialized on the device: 2.7b on the CPU takes seconds
    return TransformerLM(config, attention=impl, device=device)


def random_batch(
    config: ModelConfig, device: torch.device, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cpu").manual_seed(seed)
    shape = (config.batch_size, config.context_length + 1)
    ids = torch.randint(0, config.vocab_size, shape, generator=g).to(device)
    return ids[:, :-1], ids[:, 1:]  # inputs (B, T), next-token targets (B, T)


@dataclass
class LMWorkload:
    """A model, its batch and optimizer, and the function for one benchmarked step."""

    config: ModelConfig
    step: Callable[[], None]
    work: Work
    model: nn.Module  # as built: its parameters are the ones each step trains
    # What results record of the step: preset, impl, context, batch, mode, and the optimizer of a training
    # step (None otherwise); the precision is the Work's.
    fields: dict[str, Any]


def lm_workload(
    mode: str,
    impl: str,
    preset: str,
    precision: str,
    context: int,
    device: torch.device,
    optimizer: str,
    compile_model: Callable[[nn.Module], nn.Module] | None = None,
    launch: str = "eager",
) -> LMWorkload:
    """The model, batch and step of `mode`; `compile_model` (e.g. torch.compile) wraps the model.

    fp16 training steps scale the loss with a GradScaler, as fp16 gradients underflow without it;
    for fp32 and bf16 the scaler is disabled and passes every call through. launch="cuda_graph"
    captures the step (after warm-up calls, which train the model too) and returns its replay;
    NotCapturable says why a step cannot be captured, ImplUnavailable why `impl` cannot run on `device`.
    """
    if mode not in FLOP_MODES:
        raise ValueError(f"unknown mode {mode!r}; accepted: {', '.join(FLOP_MODES)}")
    check_precision(precision)
    check_runnable(impl, device)
    graphed = launch == "cuda_graph"
    if launch not in LAUNCHES:
        raise ValueError(f"launch: unknown value {launch!r}; accepted: {', '.join(LAUNCHES)}")
    if graphed:
        check_capturable(mode, precision, optimizer, device)
    config = lm_config(preset, context)
    model = build_model(impl, config, device)
    parameters = list(model.parameters())  # before wrapping: the optimizer steps the plain module's
    if compile_model is not None:
        model = compile_model(model)
    inputs, targets = random_batch(config, device)

    def forward() -> torch.Tensor:
        with nvtx_range("forward"), autocast(precision, device.type):
            logits = model(inputs)  # (B, T, V)
            return cross_entropy(logits, targets)

    def backward(loss: torch.Tensor) -> None:
        with nvtx_range("backward"):
            loss.backward()

    if mode == "forward":

        def step() -> None:
            forward()

    elif mode == "forward_backward":

        def step() -> None:
            model.zero_grad(set_to_none=True)
            backward(forward())

    else:
        opt = build_optimizer(parameters, impl=optimizer, capturable=graphed, lr=1e-4)
        scaler = grad_scaler(precision, device.type)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            backward(scaler.scale(forward()))
            with nvtx_range("optimizer_step"):
                scaler.step(opt)  # unscales first, and skips the step if a gradient is inf or nan
                scaler.update()

    tokens = config.batch_size * config.context_length
    # The causal half of attention's score square, for every implementation: the naive attention's
    # masked half is work beyond the model's, not counted to its credit.
    flops = config.flops_per_token(context, mode, attention="causal") * tokens
    if graphed:
        step = captured_step(step, device, before_capture=lambda: model.zero_grad(set_to_none=True))
    fields = dict(preset=preset, impl=impl, context=context, batch=config.batch_size, mode=mode)
    fields["optimizer"] = optimizer if mode == "train_step" else None
    return LMWorkload(config, step, Work(flops=flops, tokens=tokens, precision=precision), model, fields)


def check_capturable(mode: str, precision: str, optimizer: str, device: torch.device) -> None:
    """NotCapturable, before anything is built, for a step that a CUDA graph cannot hold."""
    if device.type != "cuda":
        raise NotCapturable(f"CUDA graphs capture CUDA work; this step runs on {device}")
    if mode != "train_step":
        return
    if optimizer not in CAPTURABLE_IMPLS:
        raise NotCapturable(
            f"optimizer {optimizer!r} reads its step count on the host every step; a captured step "
            f"needs one of {', '.join(CAPTURABLE_IMPLS)} (--optimizer)"
        )
    if precision == "fp16":
        raise NotCapturable(
            "the fp16 step's GradScaler reads on the host whether a gradient overflowed, every step, "
            "and skips the update if one did: a graph cannot hold that decision"
        )
