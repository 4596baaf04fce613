"""How the model's naive attention scales: time and memory against sequence length and head dim.

Batch 8 of one head, causal (perf/cases/attention.py, sweep `naive_scaling`), eager beside
torch.compile. The timed step is forward+backward; extra_info adds the forward and the backward
timed apart, and the memory in use between them: what the forward keeps for the backward, which
for this attention is dominated by (seq x seq) score-sized tensors.

An out-of-memory skips the one benchmark, with the bytes of one score matrix in the reason, and
the sweep goes on (the end of the run lists them, perf/plugin/summary.py).
"""

from __future__ import annotations

import pytest
import torch

from model.precision import parse_dtype
from perf.cases.attention import SCALING_SUITE, AttentionShape
from perf.harness import oom_note, synchronize
from perf.workloads.attention import WARMUP_STEPS, attention_workload, open_provider, score_matrix_note

# Forward and backward timed apart, this many times each (medians), after the timed rounds.
PHASE_REPEATS = 10


@pytest.mark.parametrize("provider", ["naive", "naive_compiled"])
def test_naive_attention_scaling(
    bench, device: torch.device, scaling_precision: str, scaling_shape: AttentionShape, provider: str
):
    shape, precision = scaling_shape, scaling_precision
    dtype = parse_dtype(precision)
    bench.benchmark.group = f"naive attention {shape} {precision}"
    with oom_note(score_matrix_note(provider, shape, dtype)):
        with open_provider(provider, shape, dtype, device, needs_grad=True) as attention:
            workload = attention_workload(attention, "forward_backward", shape, precision, device)
            first_call_s = bench.first_call(workload.step)  # compiles the forward and the backward
            resident, before_backward = _memory_around_forward(workload, device)
            info = bench.run(
                workload,
                warmup_steps=WARMUP_STEPS,
                suite=SCALING_SUITE,
                provider=provider,
                **shape.as_extra_info(dtype),
                compile_s=first_call_s,
                score_matrix_bytes=shape.score_bytes(dtype.itemsize),
                memory_before_backward_bytes=before_backward,
                saved_for_backward_bytes=None if before_backward is None else before_backward - resident,
            )
            phases = bench.time_phases(
                [("forward", lambda _: workload.forward()), ("backward", workload.backward)], PHASE_REPEATS
            )
            info.update(forward_ms=phases["forward"], backward_ms=phases["backward"])


def _memory_around_forward(workload, device: torch.device) -> tuple[int | None, int | None]:
    """Bytes allocated before one forward (inputs) and after it (inputs plus what backward needs)."""
    if device.type != "cuda":
        return None, None  # the CPU allocator keeps no count
    synchronize()
    resident = torch.cuda.memory_allocated(device)
    out = workload.forward()
    synchronize()
    before_backward = torch.cuda.memory_allocated(device)
    workload.backward(out)
    return resident, before_backward
