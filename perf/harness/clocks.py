"""The GPU's clock state beside every benchmark figure: the SM clock and why it was held down.

A GPU that reaches its power cap or its thermal limit lowers its SM clock, and every kernel then runs
slower by about as much; a figure measured so reads as a regression of the code. `ClockSampler`
reads the SM clock and the clock event reasons (power cap, thermal, hardware slowdown) of one GPU from
NVML in a daemon thread while a benchmark runs, so that a slow figure says whether its GPU was held
down. `gpu_clock_state` records, once per run, the power limit and whether the clocks are locked: two
machines of the same GPU model are comparable only with the same settings.

NVML is read through NVIDIA's binding nvidia-ml-py (`pynvml`), with read-only calls only: nothing
here changes a clock or a power limit. Where NVML cannot be read (the CPU, no binding, no driver, a
device NVML does not know, a reading that fails) the entries say why instead, and the run goes on.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import torch

from perf.harness.gpu_time import failure

# Bits of nvmlClocksEventReasons (formerly ClocksThrottleReasons) that mean the clock was held down,
# by the name results use: SwPowerCap; HwSlowdown and HwPowerBrakeSlowdown; Sw and Hw thermal slowdown.
THROTTLE_REASONS: dict[str, int] = {"power_cap": 0x4, "hw_slowdown": 0x8 | 0x80, "thermal": 0x20 | 0x40}
GPU_IDLE = 0x1  # nothing runs: the clock is low by choice, not held down
APPLICATIONS_CLOCKS_SETTING = 0x2  # the clock is held at a set value (nvidia-smi -ac or -lgc)
# A sample costs tens of microseconds of a host thread; 50 a second catch a cap of a few ms.
SAMPLE_INTERVAL_S = 0.02
# How long __exit__ waits for the sampling thread: an NVML call can hang when a GPU falls off the bus.
JOIN_TIMEOUT_S = 2.0

# The outcome of nvmlInit in this process, once tried: "ok" or why it failed. A failing NVML is tried
# once; nvmlShutdown is never called, so later samplers reuse the initialised library.
_init_outcome: str | None = None


def load_nvml(nvml: Any = None) -> tuple[Any, str | None]:
    """The pynvml-like module (`nvml`, else pynvml), initialised once per process, or why there is none."""
    global _init_outcome
    if nvml is None:
        try:
            import pynvml as nvml
        except Exception as err:  # not installed, or a broken install
            return None, failure("nvidia-ml-py is not installed (pip install nvidia-ml-py)", err)
    if _init_outcome is None:
        try:
            nvml.nvmlInit()
            _init_outcome = "ok"
        except Exception as err:  # no driver, no libnvidia-ml.so, a driver/library mismatch
            _init_outcome = failure("NVML could not be initialised", err)
    return (nvml, None) if _init_outcome == "ok" else (None, _init_outcome)


def cpu_reason(device: torch.device) -> str | None:
    """Why `device` has no NVML clocks, or None for a CUDA device."""
    if device.type != "cuda":
        return f"runs on {device.type}: clocks are read through NVML for CUDA devices"
    return None


def nvml_handle(nvml: Any, device: torch.device) -> tuple[Any, str | None]:
    """NVML's handle for a torch CUDA device, or why there is none: by UUID, else by PCI bus id, else by
    index. torch numbers the devices CUDA_VISIBLE_DEVICES leaves, NVML all of them, so the index is last.
    """
    tries: list[tuple[str, Callable[[], Any]]] = []
    errors: list[str] = []
    try:
        props = torch.cuda.get_device_properties(device)
    except Exception as err:  # a torch without CUDA, or a device it cannot see
        props = None
        errors.append(failure("torch has no properties for it", err))
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        # str(props.uuid) has no prefix; NVML names GPUs "GPU-<uuid>" (and MIG instances "MIG-<uuid>").
        uuid = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
        tries.append((f"UUID {uuid}", lambda: nvml.nvmlDeviceGetHandleByUUID(uuid)))
    if props is not None and hasattr(props, "pci_bus_id"):
        bus_id = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        tries.append((f"PCI bus id {bus_id}", lambda: nvml.nvmlDeviceGetHandleByPciBusId(bus_id)))
    index, why_not = _nvml_index(device)
    if index is not None:
        tries.append((f"index {index}", lambda: nvml.nvmlDeviceGetHandleByIndex(index)))
    elif why_not:
        errors.append(why_not)
    for what, lookup in tries:
        try:
            return lookup(), None
        except Exception as err:
            errors.append(failure(f"by {what}", err))
    return None, f"no NVML device matches {device}: " + "; ".join(errors or ["nothing to look it up by"])


def _nvml_index(device: torch.device) -> tuple[int | None, str | None]:
    """NVML's index of a torch device through CUDA_VISIBLE_DEVICES (its order may still differ from
    NVML's where CUDA_DEVICE_ORDER is not PCI_BUS_ID), or why there is none."""
    try:
        index = device.index if device.index is not None else torch.cuda.current_device()
    except Exception as err:
        return None, failure("no current CUDA device", err)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return index, None
    entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
    if index >= len(entries) or not entries[index].isdigit():
        return None, f"CUDA_VISIBLE_DEVICES={visible} gives no NVML index for torch's device {index}"
    return int(entries[index]), None


def _reasons_reader(nvml: Any, handle: Any) -> tuple[Callable[[Any], int], int]:
    """The binding's reader of the current clock event reasons, and a first reading: the newer name
    where the binding and the driver have it, else the older one. Raises the last reader's error."""
    names = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
    readers = [getattr(nvml, name) for name in names if hasattr(nvml, name)]
    for reader in readers[:-1]:
        try:
            return reader, int(reader(handle))
        except Exception:  # NVMLError_FunctionNotFound: a driver older than the newer name
            pass
    if not readers:
        raise AttributeError(f"the NVML binding has neither {' nor '.join(names)}")
    return readers[-1], int(readers[-1](handle))


# --------------------------------------------------------------------------- sampling
class ClockSampler:
    """Samples the SM clock and the throttle reasons of one GPU in a daemon thread while a `with` block
    runs, plus one sample at its start and one at its end in the calling thread. Never raises for
    NVML's sake, and never suppresses the block's exception."""

    def __init__(self, device: torch.device, interval_s: float = SAMPLE_INTERVAL_S, nvml: Any = None):
        if not interval_s > 0:
            raise ValueError(f"interval_s: a number > 0 is accepted; got {interval_s!r}")
        self.device, self.interval_s, self._module = device, interval_s, nvml
        self._nvml: Any = None  # the initialised module, and the device's handle in it
        self._handle: Any = None
        self._reasons: Callable[[Any], int] | None = None  # the reader of clock event reasons, once chosen
        self._samples: list[tuple[float, int]] = []  # (SM clock in MHz, event reason bits)
        self._marked: int | None = None  # the first sample of the profiled calls (`mark`)
        self._absent: str | None = "not sampled: the sampler's block has not run"
        self._note: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ClockSampler:
        self._samples, self._note, self._absent, self._reasons = [], None, None, None
        self._marked = None
        self._stop.clear()
        try:
            self._absent = cpu_reason(self.device)
            if self._absent is None:
                self._nvml, self._absent = load_nvml(self._module)
            if self._absent is None:
                self._handle, self._absent = nvml_handle(self._nvml, self.device)
            if self._absent is None and self._take():
                self._thread = threading.Thread(target=self._run, name="clock-sampler", daemon=True)
                self._thread.start()
        except Exception as err:  # whatever went wrong, the benchmark runs without clocks
            self._absent = failure("clock sampling did not start", err)
        return self

    def __exit__(self, *exc: object) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(JOIN_TIMEOUT_S)
            if thread.is_alive():  # a hung NVML call: leave the daemon thread, keep what it sampled
                self._note = self._note or f"NVML did not answer within {JOIN_TIMEOUT_S} s; sampling stopped"
                return
        if self._absent is None and self._note is None:
            self._take()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s) and self._take():
            pass

    def _take(self) -> bool:
        """One sample; False, with the note, once NVML fails: sampling stops there."""
        try:
            mhz = float(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
            if self._reasons is None:
                self._reasons, reasons = _reasons_reader(self._nvml, self._handle)
            else:
                reasons = int(self._reasons(self._handle))
        except Exception as err:
            self._note = failure(f"NVML failed mid-run after {len(self._samples)} samples", err)
            return False
        self._samples.append((mhz, reasons))
        return True

    def figures(self) -> dict[str, Any]:
        """extra_info entries: `clocks` (SM clock statistics, share of samples per throttle reason) and
        `clocks_note` if NVML failed mid-run, or `clocks_absent` with the reason there are none."""
        samples = list(self._samples)
        if self._absent is not None:
            return {"clocks_absent": self._absent}
        if not samples:
            return {"clocks_absent": self._note or "no clock samples were taken"}
        clocks = _statistics(samples)
        if self._marked is not None and samples[self._marked :]:
            # The profiled calls alone: what the GPU time was measured at.
            profiled = _statistics(samples[self._marked :])
            clocks["profiled"] = {k: v for k, v in profiled.items() if k != "throttle"}
            if samples[: self._marked]:  # the timed rounds alone: what their figure was measured at
                rounds = _statistics(samples[: self._marked])
                clocks["rounds"] = {k: v for k, v in rounds.items() if k != "throttle"}
        return {"clocks": clocks} | ({"clocks_note": self._note} if self._note else {})

    def mark(self) -> None:
        """From here on the block measures GPU time: figures() reports the clock since then apart too."""
        if self._absent is None and self._note is None and self._thread is not None:
            self._take()
            self._marked = len(self._samples) - 1


def _statistics(samples: list[tuple[float, int]]) -> dict[str, Any]:
    """SM clock mean, least and largest over the samples in which the GPU was busy (all of them where
    none was), the number of samples, and the share of samples in which each reason held it down."""
    busy = [sample for sample in samples if not sample[1] & GPU_IDLE] or samples
    mhz, count = [sample[0] for sample in busy], len(samples)
    throttle = {
        name: sum(1 for _, r in samples if r & bits) / count for name, bits in THROTTLE_REASONS.items()
    }
    return {
        "sm_mhz_mean": sum(mhz) / len(mhz),
        "sm_mhz_min": min(mhz),
        "sm_mhz_max": max(mhz),
        "samples": count,
        "throttle": throttle,
    }


# --------------------------------------------------------------------------- settings and notes
def gpu_clock_state(device: torch.device, nvml: Any = None) -> dict[str, Any]:
    """Machine info entries for the GPU's power and clock settings, read once at start; a reading that
    fails is None. `nvml_absent` with the reason where NVML cannot be read at all."""
    reason = cpu_reason(device)
    if reason is None:
        nvml, reason = load_nvml(nvml)
    handle, reason = nvml_handle(nvml, device) if reason is None else (None, reason)
    if reason is not None:
        return {"nvml_absent": reason}

    def read(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception:  # unsupported on this GPU or driver, or not permitted
            return None

    sm = nvml.NVML_CLOCK_SM
    enforced = read(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
    default = read(lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle))
    app_mhz = read(lambda: nvml.nvmlDeviceGetApplicationsClock(handle, sm))
    default_app_mhz = read(lambda: nvml.nvmlDeviceGetDefaultApplicationsClock(handle, sm))
    reasons = read(lambda: _reasons_reader(nvml, handle)[1])
    locked, basis = _clocks_locked(app_mhz, default_app_mhz, reasons)
    return {
        "power_limit_w": enforced / 1000 if enforced is not None else None,  # NVML gives milliwatts
        "default_power_limit_w": default / 1000 if default is not None else None,
        "max_sm_clock_mhz": read(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, sm)),
        "clocks_locked": locked,
        "clocks_locked_basis": basis,
    }


def _clocks_locked(app: int | None, default: int | None, reasons: int | None) -> tuple[bool | None, str]:
    """Whether the SM clock is held at a set value, and what that was decided from."""
    if app is not None and default is not None and app != default:
        return True, f"applications SM clock {app} MHz, its default {default} MHz"
    busy = reasons is not None and not reasons & GPU_IDLE
    if busy and reasons & APPLICATIONS_CLOCKS_SETTING:
        return True, f"clock event reasons {reasons:#x} include the applications clocks setting (0x2)"
    if app is not None and default is not None:
        return False, f"applications SM clock at its default, {default} MHz"
    if busy:
        return False, f"clock event reasons {reasons:#x} hold no applications clocks setting (0x2)"
    return None, "the applications clocks could not be read, and the clock event reasons could not tell"


def run_note(infos: Iterable[dict[str, Any]]) -> list[str]:
    """For the end of a run: how many benchmarks had a throttle reason in their samples, the lowest mean
    SM clock, and why benchmarks have no clocks, by reason."""
    infos = list(infos)
    sampled = [x["clocks"] for x in infos if isinstance(x.get("clocks"), dict)]
    notes = []
    if sampled:
        held = Counter(name for c in sampled for name, share in (c.get("throttle") or {}).items() if share)
        throttled = sum(1 for c in sampled if any((c.get("throttle") or {}).values()))
        by_reason = ", ".join(f"{name} {count}" for name, count in held.items())
        lowest = min(c["sm_mhz_mean"] for c in sampled)
        notes.append(
            f"GPU clocks: {throttled} of {len(sampled)} sampled benchmark(s) had a throttle reason in their "
            f"samples{f' ({by_reason})' if by_reason else ''}; lowest mean SM clock {lowest:.0f} MHz"
        )
    failed = sum(1 for x in infos if x.get("clocks_note"))
    if failed:
        notes.append(f"GPU clocks: NVML failed mid-run in {failed} benchmark(s); their samples stop there")
    absent = Counter(x["clocks_absent"] for x in infos if x.get("clocks_absent"))
    notes += [f"no GPU clocks for {count} benchmark(s): {reason}" for reason, count in absent.items()]
    return notes
