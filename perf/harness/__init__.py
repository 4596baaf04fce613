"""The measuring core: what every benchmark's numbers go through.

- `bench`: the `Bench` of the `bench` fixture (warm-up, rounds, the timed region, derived figures),
  `TimingPolicy` (rounds and iterations) and `Work` (what one call does: FLOPs, tokens, bytes).
- `timing`: the synchronized clock pytest-benchmark times rounds with, set by its dotted name
  `perf.harness.synchronized_timer`, and marks that time phases inside a step.
- `gpu_time`: GPU busy time per call, through torch.profiler, after the timed rounds.
- `ranges`: NVTX ranges for nsys; `memory_snapshot`: a CUDA allocator snapshot of one more call.
- `machine`: the device, its dense peak for MFU, the machine info results carry, the baselines folder.
- `oom`: out-of-memory errors found inside the errors that wrap them.

The names below are the ones benchmarks, workloads and the plugin import from `perf.harness`.
"""

from perf.harness.bench import Bench, TimingPolicy, Work, derived_figures
from perf.harness.cache import freeze_long_lived, release_cached_memory, thaw
from perf.harness.machine import (
    GPU_PEAK_TFLOPS,
    gpu_name,
    machine_info,
    machine_slug,
    peak_tflops,
    resolve_device,
)
from perf.harness.oom import oom_note, out_of_memory_in
from perf.harness.ranges import NVTX_AVAILABLE, TIMED_RANGE, nvtx_range
from perf.harness.timing import elapsed_ms, mark, synchronize, synchronized_timer

__all__ = [
    "GPU_PEAK_TFLOPS",
    "NVTX_AVAILABLE",
    "TIMED_RANGE",
    "Bench",
    "TimingPolicy",
    "Work",
    "derived_figures",
    "elapsed_ms",
    "freeze_long_lived",
    "gpu_name",
    "machine_info",
    "machine_slug",
    "mark",
    "nvtx_range",
    "oom_note",
    "out_of_memory_in",
    "peak_tflops",
    "release_cached_memory",
    "resolve_device",
    "synchronize",
    "synchronized_timer",
    "thaw",
]
