"""A runner's noise file as the gate and the report read it: each benchmark's GPU-time and wall-time
threshold, and whether its runs showed it host-bound (perf/tools/noise.py writes the file,
from perf/tools/judging/noise_spread.py).

A threshold is max(floor, k x the benchmark's run-to-run spread), k and the floor per figure. Where the
file does not know a benchmark, or measured its GPU time by another method than the baseline's, the
figure is judged at --threshold and a note says how many were.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

from perf.storage import BASELINES, ROOT, machine_folder, recorded_on_cpu
from perf.tools.judging.regression_rule import Threshold
from perf.tools.reading.errors import GateError
from perf.tools.reading.results import ISOLATED, Results
from perf.tools.reading.timings import GPU, WALL

NOISE_FILE = "noise.json"
FORMAT = "perf-noise/1"


def _number(value: object) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else None


# The chance of any false regression in one gate against a stored baseline, over its benchmarks' figures:
# a threshold is at least z x sd x sqrt(2) (one run against one run), z from this chance (Bonferroni).
FALSE_RATE = 0.01


def family_z(tests: int, false_rate: float = FALSE_RATE) -> float:
    """The standard deviations one of `tests` one-sided tests must clear for any false alarm among them to
    have at most `false_rate` chance (Bonferroni)."""
    return NormalDist().inv_cdf(1 - false_rate / max(1, tests))


@dataclass(frozen=True)
class FigureNoise:
    """One figure's thresholds: k, the floor and each benchmark's spread; where the file records each
    benchmark's run-to-run sd, at least z_sd x sd x sqrt(2), the bound of one run against one run."""

    k: float
    floor: float
    spread: dict[str, float]
    sd: dict[str, float] = field(default_factory=dict)
    z_sd: float = 0.0
    sd_factor: float = math.sqrt(2)  # one run against one run; against a window's median, sqrt(1 + 1/n)

    def threshold(self, name: str) -> Threshold | None:
        if name not in self.spread and name not in self.sd:
            return None
        noise = self.k * self.spread.get(name, 0.0)
        by_sd = self.z_sd * self.sd.get(name, 0.0) * self.sd_factor
        if max(noise, by_sd) <= self.floor:
            return Threshold(self.floor, "floor")
        if by_sd > noise:
            return Threshold(by_sd, f"noise {self.z_sd * self.sd_factor:.2f} x {self.sd[name]:.2%} sd")
        return Threshold(noise, f"noise {self.k:g} x {self.spread[name]:.2%}")


@dataclass(frozen=True)
class Noise:
    """A noise file as the gate uses it. `wall` is None in files written before wall time was judged
    by its noise."""

    path: Path
    gpu: str
    runs: int
    figures: dict[str, FigureNoise]  # GPU, and WALL where the file has it
    gpu_methods: dict[str, str] = field(default_factory=dict)  # the method of each GPU spread
    host_bound: dict[str, bool] = field(default_factory=dict)  # as its runs showed it
    created: str = ""
    # The noise profile, where the file has one (3 runs or more): per figure, each benchmark's sd of its log
    # medians; per benchmark, each large kernel's sd of its log share and of its log time per call.
    sd: dict[str, dict[str, float]] = field(default_factory=dict)
    kernel_sd: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def figure_sd(self, name: str, figure: str) -> float | None:
        """The benchmark's run-to-run sd of `figure` (log), or None where the file has none."""
        return self.sd.get(figure, {}).get(name)

    def share_sd(self, name: str, kernel: str, what: str = "share_sd") -> float | None:
        """A kernel's run-to-run sd of its log share ('share_sd') or time per call ('us_sd'), or None."""
        return self.kernel_sd.get(name, {}).get(kernel, {}).get(what)

    @property
    def gpu_spread(self) -> dict[str, float]:
        return self.figures[GPU].spread

    @property
    def k(self) -> float:
        return self.figures[GPU].k

    @property
    def floor(self) -> float:
        return self.figures[GPU].floor

    def threshold(self, name: str, figure: str = GPU) -> Threshold | None:
        """The benchmark's threshold of `figure`, or None where the file does not know it."""
        known = self.figures.get(figure)
        return known.threshold(name) if known is not None else None


def load_noise(path: Path) -> Noise:
    """Read a noise file; GateError naming it and what is wrong where it cannot be used."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise GateError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GateError(f"{path}: cannot be read as JSON ({err})") from None
    return noise_of(data, path)


def noise_of(data: object, path: Path) -> Noise:
    """A noise file's content (perf/tools/judging/noise_spread.py's noise_document) as the gate uses it;
    GateError naming `path` where it cannot be used."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GateError(f"{path}: not a noise file of this suite (format {FORMAT!r} expected)")
    k, floor, benchmarks = _number(data.get("k")), _number(data.get("floor")), data.get("benchmarks")
    if not k or not floor or not isinstance(benchmarks, dict) or not isinstance(data.get("gpu"), str):
        raise GateError(f"{path}: damaged (k, floor, gpu or benchmarks missing or not valid)")
    entries = {name: entry for name, entry in benchmarks.items() if isinstance(entry, dict)}
    sd = {figure: _spreads(entries, f"{figure}_sd") for figure in (GPU, WALL)}
    z_sd = family_z(len(sd[GPU]) + len(sd[WALL]))
    figures = {GPU: FigureNoise(k, floor, _spreads(entries, "gpu_spread"), sd[GPU], z_sd)}
    k_wall, wall_floor = _number(data.get("k_wall")), _number(data.get("wall_floor"))
    if k_wall and wall_floor:
        figures[WALL] = FigureNoise(k_wall, wall_floor, _spreads(entries, "wall_spread"), sd[WALL], z_sd)
    methods = {
        name: str(entry.get("gpu_method") or ISOLATED)
        for name, entry in entries.items()
        if "gpu_spread" in entry
    }
    host_bound = {
        name: e["host_bound"] for name, e in entries.items() if isinstance(e.get("host_bound"), bool)
    }
    runs = data.get("runs")
    count = len(runs) if isinstance(runs, list) else 0
    kernel_sd = {
        name: _kernel_sds(e["kernels"]) for name, e in entries.items() if isinstance(e.get("kernels"), dict)
    }
    created = str(data.get("created", ""))
    return Noise(path, data["gpu"], count, figures, methods, host_bound, created, sd, kernel_sd)


def _kernel_sds(kernels: Mapping[str, object]) -> dict[str, dict[str, float]]:
    found = {}
    for kernel, entry in kernels.items():
        if isinstance(entry, dict):
            numbers = {key: _number(entry.get(key)) for key in ("share_sd", "us_sd")}
            found[kernel] = {key: value for key, value in numbers.items() if value is not None}
    return found


def _spreads(entries: Mapping[str, dict], key: str) -> dict[str, float]:
    found = {name: _number(entry.get(key)) for name, entry in entries.items()}
    return {name: value for name, value in found.items() if value is not None}


def noise_path(results: Results, baselines_dir: Path = BASELINES) -> Path:
    """Where the noise file of the GPU that `results` ran on is kept: beside its baselines."""
    info = results.document.get("machine_info", {})
    perf = info.get("perf") if isinstance(info, dict) else None
    return baselines_dir / machine_folder(perf if isinstance(perf, dict) else {}) / NOISE_FILE


@dataclass
class NoiseThresholds:
    """Each benchmark's thresholds: from the noise file where it knows the benchmark (and, for GPU time,
    measured it by the baseline's method), else the fallback (--threshold); notes say which file was
    used, or why none was. Called with a name, the GPU-time threshold."""

    fallback: float
    noise: Noise | None = None
    baseline_methods: Mapping[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    unknown: dict[str, list[str]] = field(default_factory=lambda: {GPU: [], WALL: []})
    other_method: list[str] = field(default_factory=list)  # GPU spread of another method than the baseline's
    # Why a benchmark has no threshold of its own, for the summary line.
    unknown_reason: str = "not in the noise file (new since it was measured, or without {what} there)"

    def __call__(self, name: str) -> Threshold:
        return self.gpu(name)

    def gpu(self, name: str) -> Threshold:
        if self.noise is not None and name in self.noise.gpu_methods:
            if self.noise.gpu_methods[name] != self.baseline_methods.get(name, ISOLATED):
                if name not in self.other_method:
                    self.other_method.append(name)
                return Threshold(self.fallback, "--threshold")
        return self._of(name, GPU)

    def wall(self, name: str) -> Threshold:
        return self._of(name, WALL)

    def host_bound(self, name: str) -> bool | None:
        return self.noise.host_bound.get(name) if self.noise is not None else None

    def _of(self, name: str, figure: str) -> Threshold:
        found = self.noise.threshold(name, figure) if self.noise is not None else None
        if found is not None:
            return found
        if self.noise is not None and figure in self.noise.figures and name not in self.unknown[figure]:
            self.unknown[figure].append(name)
        return Threshold(self.fallback, "--threshold")

    def summary(self) -> list[str]:
        lines = list(self.notes)
        for figure, what in ((GPU, "GPU time"), (WALL, "wall time")):
            if self.unknown[figure]:
                lines.append(
                    f"{len(self.unknown[figure])} benchmark(s) {self.unknown_reason.format(what=what)}: "
                    f"{what} judged at --threshold {self.fallback:.0%}"
                )
        if self.other_method:
            lines.append(
                f"{len(self.other_method)} benchmark(s) whose GPU-time noise was measured by another method "
                f"than the baseline's: GPU time judged at --threshold {self.fallback:.0%}"
            )
        return lines


def noise_thresholds(
    option: str | None, baseline: Results, fallback: float, baselines_dir: Path = BASELINES
) -> NoiseThresholds:
    """The thresholds of --noise: 'off', a file, or (None) the noise file beside the baseline's GPU's
    baselines. A missing, damaged or other GPU's file is a note and the fallback, never a failure."""
    fall_back = f"GPU and wall time judged at --threshold {fallback:.0%}"
    path = Path(option) if option and option != "off" else noise_path(baseline, baselines_dir)
    shown = path.relative_to(ROOT) if path.is_absolute() and path.is_relative_to(ROOT) else path
    methods = baseline.gpu_methods
    if option == "off":
        return NoiseThresholds(fallback, None, methods, [f"noise: off (--noise off); {fall_back}"])
    if option is None and not path.is_file():
        # A CPU run has no GPU-time spread to measure: `make noise` refuses there, so it is not advised.
        advice = "" if recorded_on_cpu(baseline.machine) else " (`make noise` measures it)"
        return NoiseThresholds(fallback, None, methods, [f"noise: no {shown}: {fall_back}{advice}"])
    try:
        noise = load_noise(path)
    except GateError as err:
        return NoiseThresholds(fallback, None, methods, [f"noise: not used, {err}; {fall_back}"])
    if noise.gpu != baseline.machine:
        note = (
            f"noise: not used, {shown} was measured on {noise.gpu}, the baseline on {baseline.machine}; "
            f"{fall_back}"
        )
        return NoiseThresholds(fallback, None, methods, [note])
    if not noise.gpu_spread:  # written before such files were refused: it sets no threshold
        note = f"noise: not used, {shown} has no benchmark with GPU time; {fall_back}"
        return NoiseThresholds(fallback, None, methods, [note])
    gpu = noise.figures[GPU]
    judged = f"GPU time at max({gpu.floor:.1%}, {gpu.k:g} x its run-to-run spread)"
    wall = noise.figures.get(WALL)
    if wall is None:
        judged += f", wall time at --threshold {fallback:.0%} (the file has no wall-time noise)"
    else:
        judged += f", wall time at max({wall.floor:.1%}, {wall.k:g} x its spread)"
    note = f"noise: {shown} ({noise.runs} runs, {noise.created or 'undated'}): {judged}"
    return NoiseThresholds(fallback, noise, methods, [note])


def noise_profile(
    option: str | None, run: Results, baselines_dir: Path = BASELINES, spread: float = 1.0
) -> tuple[Noise | None, str]:
    """The A/B's noise profile for the GPU `run` is on, from --noise ('off', a file, or None: the file beside
    that GPU's baselines), and a line saying which was used or why none; never an error. `spread`: how much
    larger the rule takes the profile's sds, said in the line."""
    alone = "standard errors from the runs alone, each kernel's share at Student's t"
    if option == "off":
        return None, f"noise profile: off (--noise off); {alone}"
    path = Path(option) if option else noise_path(run, baselines_dir)
    shown = path.relative_to(ROOT) if path.is_absolute() and path.is_relative_to(ROOT) else path
    if option is None and not path.is_file():
        advice = "" if recorded_on_cpu(run.machine) else " (`make noise` measures one)"
        return None, f"noise profile: no {shown}; {alone}{advice}"
    try:
        noise = load_noise(path)
    except GateError as err:
        return None, f"noise profile: not used, {err}; {alone}"
    if noise.gpu != run.machine:
        return (
            None,
            f"noise profile: not used, {shown} is of {noise.gpu}, this A/B ran on {run.machine}; {alone}",
        )
    if not noise.sd.get(GPU):
        return None, f"noise profile: not used, {shown} records no run-to-run sd (an older file); {alone}"
    widened = f"; its run-to-run sds taken {spread:g}x, for another sitting's spread" if spread != 1 else ""
    return noise, f"noise profile: {shown} ({noise.runs} runs, {noise.created or 'undated'}{widened})"
