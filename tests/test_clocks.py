"""The GPU's clock state (perf/harness/clocks.py), on any machine: NVML is a scripted fake, and the
torch CUDA device's properties are faked, so that nothing calls into a CUDA runtime."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from perf.harness import clocks
from perf.harness.clocks import ClockSampler, gpu_clock_state, nvml_handle, run_note
from perf.tools.reading.timings import gpu_timing

GPU = torch.device("cuda", 0)
UUID = "8a1f0c2e-1111-2222-3333-444455556666"


class NVMLError(Exception):
    pass


class NVMLBase:
    """A pynvml-like module with one GPU, "GPU-<UUID>" at 0000:1b:00.0, and scripted readings."""

    NVML_CLOCK_SM = 1
    NVMLError = NVMLError

    def __init__(self, mhz=(1980,), reasons=(0,), fail_after=None, init_error=None):
        self._mhz, self._reasons = itertools.cycle(mhz), itertools.cycle(reasons)
        self.fail_after, self.init_error = fail_after, init_error
        self.init_calls, self.lookups, self.readings = 0, [], []  # readings: (mhz, reasons) returned
        self.settings = {
            "enforced": 700_000,
            "default": 650_000,
            "max": 1980,
            "app": 1755,
            "default_app": 1755,
        }

    def nvmlInit(self):
        self.init_calls += 1
        if self.init_error:
            raise self.init_error

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.lookups.append(("uuid", uuid))
        if uuid != f"GPU-{UUID}":
            raise NVMLError("Not Found")
        return "handle0"

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        self.lookups.append(("pci", bus_id))
        if bus_id != "00000000:1b:00.0":
            raise NVMLError("Not Found")
        return "handle0"

    def nvmlDeviceGetHandleByIndex(self, index):
        self.lookups.append(("index", index))
        return f"handle{index}"

    def nvmlDeviceGetClockInfo(self, handle, clock):
        assert (handle, clock) == ("handle0", 1)
        if self.fail_after is not None and len(self.readings) >= self.fail_after:
            raise NVMLError("GPU is lost")
        self.readings.append((next(self._mhz), None))
        return self.readings[-1][0]

    def _current_reasons(self, handle):
        reasons = next(self._reasons)
        if self.readings and self.readings[-1][1] is None:
            self.readings[-1] = (self.readings[-1][0], reasons)
        return reasons

    def _setting(self, key):
        value = self.settings[key]
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self._setting("enforced")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle):
        return self._setting("default")

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        return self._setting("max")

    def nvmlDeviceGetApplicationsClock(self, handle, clock):
        return self._setting("app")

    def nvmlDeviceGetDefaultApplicationsClock(self, handle, clock):
        return self._setting("default_app")


class FakeNVML(NVMLBase):
    nvmlDeviceGetCurrentClocksEventReasons = NVMLBase._current_reasons


class OlderNVML(NVMLBase):
    """A binding from before the rename: only nvmlDeviceGetCurrentClocksThrottleReasons."""

    nvmlDeviceGetCurrentClocksThrottleReasons = NVMLBase._current_reasons


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """Each test as in a new process (NVML not yet initialised), with GPU 0's properties faked; no
    sampling thread outlives a test."""
    monkeypatch.setattr(clocks, "_init_outcome", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    props = SimpleNamespace(uuid=UUID, pci_domain_id=0, pci_bus_id=0x1B, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    yield props
    assert not [t for t in threading.enumerate() if t.name == "clock-sampler"]


def sampled(nvml, seconds=0.0, interval_s=10.0, device=GPU):
    """A sampler's figures over a block of `seconds`; the default interval leaves only the start and
    end samples."""
    with ClockSampler(device, interval_s=interval_s, nvml=nvml) as sampler:
        time.sleep(seconds)
    assert sampler._thread is None
    return sampler.figures()


# --------------------------------------------------------------------------- sampling
def test_start_and_end_samples_give_exact_figures():
    nvml = FakeNVML(mhz=(1000, 2000), reasons=(0x4, 0x40))
    assert sampled(nvml) == {
        "clocks": {
            "sm_mhz_mean": 1500.0,
            "sm_mhz_min": 1000.0,
            "sm_mhz_max": 2000.0,
            "samples": 2,
            "throttle": {"power_cap": 0.5, "hw_slowdown": 0.0, "thermal": 0.5},
        }
    }


def test_the_thread_samples_while_the_block_runs():
    nvml = FakeNVML(mhz=(1980, 1500, 1200, 1755), reasons=(0x4, 0x0, 0x80, 0x20 | 0x4))
    figures = sampled(nvml, seconds=0.1, interval_s=0.01)["clocks"]
    mhz = [m for m, _ in nvml.readings]
    assert figures["samples"] == len(nvml.readings) >= 5
    assert figures["sm_mhz_min"] == 1200 and figures["sm_mhz_max"] == 1980
    assert figures["sm_mhz_mean"] == pytest.approx(sum(mhz) / len(mhz))
    share = {bit: sum(1 for _, r in nvml.readings if r & bit) / len(mhz) for bit in (0x4, 0x80, 0x20)}
    assert figures["throttle"] == {
        "power_cap": share[0x4],
        "hw_slowdown": share[0x80],
        "thermal": share[0x20],
    }
    assert 0.3 < figures["throttle"]["power_cap"] < 0.7


def test_cpu_device_has_a_reason_and_no_thread():
    nvml = FakeNVML()
    with ClockSampler(torch.device("cpu"), nvml=nvml) as sampler:
        assert sampler._thread is None
    assert sampler.figures() == {
        "clocks_absent": "runs on cpu: clocks are read through NVML for CUDA devices"
    }
    assert nvml.init_calls == 0


def test_failing_init_is_a_reason_and_tried_once_per_process():
    nvml = FakeNVML(init_error=NVMLError("Driver Not Loaded"))
    first, second = sampled(nvml), sampled(nvml)
    assert first == second == {"clocks_absent": "NVML could not be initialised: NVMLError: Driver Not Loaded"}
    assert gpu_clock_state(GPU, nvml=nvml) == {"nvml_absent": first["clocks_absent"]}
    assert nvml.init_calls == 1


def test_successful_init_is_kept():
    nvml = FakeNVML()
    sampled(nvml), sampled(nvml), gpu_clock_state(GPU, nvml=nvml)
    assert nvml.init_calls == 1


def test_missing_binding_is_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    absent = sampled(None)["clocks_absent"]
    assert absent.startswith("nvidia-ml-py is not installed")
    assert gpu_clock_state(GPU)["nvml_absent"] == absent


def test_the_real_binding_without_a_driver_is_a_reason():
    pytest.importorskip("pynvml")
    if torch.cuda.is_available():
        pytest.skip("a GPU machine has a driver")
    assert sampled(None)["clocks_absent"].startswith("NVML could not be initialised: NVMLError")


def test_failure_mid_run_keeps_the_earlier_samples():
    nvml = FakeNVML(mhz=(1500,), reasons=(0x8,), fail_after=3)
    figures = sampled(nvml, seconds=0.1, interval_s=0.005)
    assert figures["clocks"]["samples"] == 3 and figures["clocks"]["throttle"]["hw_slowdown"] == 1.0
    assert figures["clocks_note"] == "NVML failed mid-run after 3 samples: NVMLError: GPU is lost"


def test_failure_at_the_first_sample_is_a_reason():
    nvml = FakeNVML(fail_after=0)
    assert sampled(nvml) == {"clocks_absent": "NVML failed mid-run after 0 samples: NVMLError: GPU is lost"}


def test_the_blocks_exception_propagates_unchanged():
    error = KeyError("mine")
    with pytest.raises(KeyError) as raised, ClockSampler(GPU, nvml=FakeNVML(), interval_s=0.005) as sampler:
        time.sleep(0.02)
        raise error
    assert raised.value is error
    assert sampler._thread is None and sampler.figures()["clocks"]["samples"] >= 2


def test_the_older_binding_reads_throttle_reasons():
    nvml = OlderNVML(mhz=(1000,), reasons=(0x4, 0x4))
    assert not hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons")
    assert sampled(nvml)["clocks"]["throttle"] == {"power_cap": 1.0, "hw_slowdown": 0.0, "thermal": 0.0}


# --------------------------------------------------------------------------- the device's handle
def test_handle_by_uuid_then_pci_bus_id_then_index(fresh_process, monkeypatch):
    nvml = FakeNVML()
    assert nvml_handle(nvml, GPU) == ("handle0", None)
    assert nvml.lookups == [("uuid", f"GPU-{UUID}")]
    fresh_process.uuid = "00000000-0000-0000-0000-000000000000"
    assert nvml_handle(nvml, GPU) == ("handle0", None)
    assert nvml.lookups[-1] == ("pci", "00000000:1b:00.0")
    fresh_process.pci_bus_id = 0x2C
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert nvml_handle(nvml, torch.device("cuda", 1)) == ("handle5", None)


def test_no_handle_is_a_reason(fresh_process, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"GPU-{UUID}")
    handle, reason = nvml_handle(FakeNVML(), GPU)
    assert handle is None and reason.startswith("no NVML device matches cuda:0: CUDA_VISIBLE_DEVICES=GPU-")


# --------------------------------------------------------------------------- settings
def test_clock_state_in_watts_and_unlocked():
    assert gpu_clock_state(GPU, nvml=FakeNVML()) == {
        "power_limit_w": 700.0,
        "default_power_limit_w": 650.0,
        "max_sm_clock_mhz": 1980,
        "clocks_locked": False,
        "clocks_locked_basis": "applications SM clock at its default, 1755 MHz",
    }


def test_clocks_locked_by_applications_clock_or_event_reason():
    nvml = FakeNVML()
    nvml.settings["app"] = 1410
    assert gpu_clock_state(GPU, nvml=nvml)["clocks_locked"] is True
    nvml = FakeNVML(reasons=(0x2,))
    nvml.settings["app"] = NVMLError("Not Supported")
    state = gpu_clock_state(GPU, nvml=nvml)
    assert state["clocks_locked"] is True and "0x2" in state["clocks_locked_basis"]
    nvml = FakeNVML(reasons=(0x1 | 0x2,))  # idle: the reasons tell nothing
    nvml.settings["default_app"] = NVMLError("Not Supported")
    assert gpu_clock_state(GPU, nvml=nvml)["clocks_locked"] is None


def test_one_failing_reading_leaves_only_its_key_out():
    nvml = FakeNVML()
    nvml.settings["enforced"] = NVMLError("No Permission")
    state = gpu_clock_state(GPU, nvml=nvml)
    assert state["power_limit_w"] is None
    assert state["default_power_limit_w"] == 650.0 and state["max_sm_clock_mhz"] == 1980
    assert state["clocks_locked"] is False


def test_clock_state_on_the_cpu():
    assert gpu_clock_state(torch.device("cpu"), nvml=FakeNVML()) == {
        "nvml_absent": "runs on cpu: clocks are read through NVML for CUDA devices"
    }


# --------------------------------------------------------------------------- notes
def test_run_note_counts_throttled_benchmarks_and_reasons():
    def clock(mean, **throttle):
        shares = {"power_cap": 0.0, "thermal": 0.0, "hw_slowdown": 0.0} | throttle
        return {"clocks": {"sm_mhz_mean": mean, "throttle": shares}}

    infos = [
        clock(1980.0),
        clock(1612.4, power_cap=0.25),
        clock(1700.0, power_cap=1.0, thermal=0.1),
        {**clock(1900.0), "clocks_note": "NVML failed mid-run after 4 samples: NVMLError: GPU is lost"},
        {"clocks_absent": "runs on cpu: clocks are read through NVML for CUDA devices"},
        {"clocks_absent": "runs on cpu: clocks are read through NVML for CUDA devices"},
        {"gpu_ms": 1.0},
    ]
    assert run_note(infos) == [
        "GPU clocks: 2 of 4 sampled benchmark(s) had a throttle reason in their samples "
        "(power_cap 2, thermal 1); lowest mean SM clock 1612 MHz",
        "GPU clocks: NVML failed mid-run in 1 benchmark(s); their samples stop there",
        "no GPU clocks for 2 benchmark(s): runs on cpu: clocks are read through NVML for CUDA devices",
    ]
    assert run_note([]) == []


def test_the_profiled_calls_clock_is_reported_apart():
    nvml = FakeNVML(mhz=(1980, 1400, 1400), reasons=(0x0, 0x4, 0x4))
    with ClockSampler(GPU, interval_s=10.0, nvml=nvml) as sampler:
        sampler.mark()  # a sample at the mark: the profiled calls start here
    figures = sampler.figures()["clocks"]
    assert figures["sm_mhz_mean"] == pytest.approx((1980 + 1400 + 1400) / 3) and figures["samples"] == 3
    assert figures["profiled"] == {
        "sm_mhz_mean": 1400.0,
        "sm_mhz_min": 1400.0,
        "sm_mhz_max": 1400.0,
        "samples": 2,
    }
    assert figures["rounds"] == {
        "sm_mhz_mean": 1980.0,
        "sm_mhz_min": 1980.0,
        "sm_mhz_max": 1980.0,
        "samples": 1,
    }
    # The gate compares the clock the GPU time was measured at: the profiled calls', or the rounds'.
    assert gpu_timing({"gpu_ms": 5.0, "clocks": figures}).sm_mhz == 1400.0
    assert gpu_timing({"gpu_ms": 5.0, "gpu_method": "rounds", "clocks": figures}).sm_mhz == 1980.0
    assert gpu_timing({"gpu_ms": 5.0, "clocks": {"sm_mhz_mean": 1700.0}}).sm_mhz == 1700.0
