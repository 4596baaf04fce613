"""The device and the machine a run measures on: which device, its dense peak, what results record.

`machine_info` is what a stored result must carry to be compared like with like (the GPU model, its
driver, CUDA, torch, triton, NCCL); `machine_slug` is the folder under baselines/ those results go in,
one per GPU model (or CPU model), so that a comparison never mixes two processors.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
from typing import Any

import torch

from perf.harness.clocks import gpu_clock_state
from perf.storage import folder_name


def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda when a GPU is visible, else cpu. Errors name what is accepted."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if re.fullmatch(r"cuda(:\d+)?", name):
        if not torch.cuda.is_available():
            raise ValueError(f"--device {name}: no CUDA GPU is visible to torch {torch.__version__}")
        device = torch.device(name)
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"--device {name}: only {torch.cuda.device_count()} GPU(s) visible")
        if device.index is not None:
            # The current device is what synchronized_timer waits for and where bare allocations go.
            torch.cuda.set_device(device.index)
        return device
    raise ValueError(f"--device {name}: unknown device; accepted: auto, cpu, cuda, cuda:N")


# --------------------------------------------------------------------------- peaks and machine info
# Dense (no sparsity) peak throughput in TFLOP/s from the vendors' datasheets, by precision of the
# matrix math: bf16/fp16 tensor cores, tf32 tensor cores, plain fp32 FMA. Matched against
# torch.cuda.get_device_name() in order; the first pattern that matches wins.
GPU_PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    (r"H200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    (r"H100.*(PCIe|PCI)", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2}),
    (r"H100.*NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    (r"H100|GH200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    (r"A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    (r"L40S", {"bf16": 362.1, "fp16": 362.1, "tf32": 183.0, "fp32": 91.6}),
    (r"A10G?\b", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    (r"L4\b", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    (r"V100", {"fp16": 125.0, "fp32": 15.7}),
)


def peak_tflops(gpu_name: str | None, math_precision: str) -> float | None:
    """Dense peak for the GPU and math precision ('bf16', 'fp16', 'tf32', 'fp32'); None if unknown."""
    if not gpu_name:
        return None
    for pattern, peaks in GPU_PEAK_TFLOPS:
        if re.search(pattern, gpu_name):
            return peaks.get(math_precision)
    return None


def gpu_name(device: torch.device) -> str | None:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


@functools.cache
def _nvidia_driver() -> str | None:
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:  # "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
        with open("/proc/driver/nvidia/version") as f:
            match = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", f.read())
            return match.group(1) if match else None
    except OSError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:  # a broken optional install must not stop the suite from reporting
        return None


def machine_info(device: torch.device) -> dict[str, Any]:
    """What a stored result must carry to be compared like with like."""
    info: dict[str, Any] = {
        "device": device.type,
        "torch": torch.__version__,
        "triton": _version("triton"),
        "cuda": torch.version.cuda,
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = {
            "name": props.name,
            "count": torch.cuda.device_count(),
            "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count,
            "driver": _nvidia_driver(),
            # The power limit and whether clocks are locked: same-model GPUs compare only alike set.
            **gpu_clock_state(device),
        }
        # What decides collective bandwidth beside the GPUs: NCCL's version and the NCCL_* variables
        # set (NCCL_NVLS_ENABLE, NCCL_IB_HCA, NCCL_SOCKET_IFNAME, ...), which change its transports.
        info["nccl"] = _nccl_version()
        info["nccl_env"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}
    return info


def _nccl_version() -> str | None:
    try:
        return ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # a torch built without NCCL
        return None


def machine_slug(device: torch.device) -> str:
    """Folder name under baselines/: one per GPU model (or CPU model), never mixed."""
    return folder_name(gpu_name(device) or f"cpu {_cpu_model()}")
