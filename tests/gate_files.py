"""Synthetic result files for the gate's tests: pytest-benchmark stats, result files with machine info,
the gate's command line, a fake pytest runner, and readers of the verdict's rows and sections."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

from perf.tools import gate
from perf.tools.reading.timings import IQR_PER_SIGMA

ROOT = Path(__file__).resolve().parent.parent
H100 = "NVIDIA H100 80GB HBM3"
NAN = float("nan")
NAMES = [
    f"perf/test_end_to_end.py::test_{mode}[naive-small-fp32-ctx{context}-warm2]"
    for mode in ("forward", "forward_backward", "train_step")
    for context in (128, 256, 512, 1024)
]


# --------------------------------------------------------------------------- synthetic result files
def stats(median: float, iqr_fraction: float = 0.02, rounds: int = 40, seed: int = 0) -> dict:
    """pytest-benchmark stats of `rounds` per-round times, normal around `median` with the given IQR."""
    sigma = median * iqr_fraction / IQR_PER_SIGMA
    if sigma > 0 and rounds > 1:
        normal = statistics.NormalDist(median, sigma)
        data = [normal.inv_cdf((i + 0.5) / rounds) for i in range(rounds)]
    else:
        data = [median] * rounds
    random.Random(seed).shuffle(data)
    q1, _, q3 = statistics.quantiles(data, n=4) if rounds > 1 else (data[0],) * 3
    return {
        "min": min(data),
        "max": max(data),
        "mean": statistics.fmean(data),
        "stddev": statistics.stdev(data) if rounds > 1 else 0.0,
        "median": statistics.median(data),
        "iqr": q3 - q1,
        "q1": q1,
        "q3": q3,
        "rounds": rounds,
        "iterations": 1,
        "data": data,
    }


def write_results(
    path: Path,
    benchmarks: dict[str, dict],
    gpu: str | None = H100,
    extra: dict[str, dict] | None = None,
    gpus: int = 1,
) -> Path:
    """A result file as `pytest --benchmark-json` writes it, with the suite's machine_info.perf;
    `extra` holds extra_info per node id, `gpus` the GPUs visible."""
    perf = {"device": "cuda" if gpu else "cpu", "cpu_model": "Intel(R) Xeon(R) Processor"}
    if gpu:
        perf["gpu"] = {"name": gpu, "count": gpus}
    entries = [
        {
            "name": name.split("::")[1],
            "fullname": name,
            "group": None,
            "stats": s,
            "extra_info": (extra or {}).get(name, {}),
        }
        for name, s in benchmarks.items()
    ]
    path.write_text(json.dumps({"machine_info": {"perf": perf}, "benchmarks": entries}))
    return path


def suite(medians: dict[str, float] | None = None, iqr_fraction: float = 0.02, seed: int = 0) -> dict:
    """Every benchmark of NAMES at 10 ms plus its index (ms), `medians` (seconds) replacing some."""
    medians = {**{name: 0.010 + i * 1e-3 for i, name in enumerate(NAMES)}, **(medians or {})}
    return {name: stats(m, iqr_fraction, seed=seed + i) for i, (name, m) in enumerate(medians.items())}


def run_gate(capsys, *argv, **kwargs) -> tuple[int, str, str]:
    """The gate's command line; a run of its own (a runner given) is on an H100 unless `machine` says."""
    if "runner" in kwargs:
        kwargs.setdefault("machine", lambda device: H100)
    code = gate.main([str(a) for a in argv], **kwargs)
    out, err = capsys.readouterr()
    return code, out, err


def compare_files(tmp_path, capsys, base: dict, current: dict) -> tuple[int, str, str]:
    """The gate on two stored runs (--baseline and --current), no measuring."""
    baseline = write_results(tmp_path / "base.json", base)
    current_file = write_results(tmp_path / "current.json", current)
    return run_gate(capsys, "--baseline", baseline, "--current", current_file)


def short(name: str) -> str:
    """How the verdict's rows show a node id of these tests: its test function and parameters, the
    shortest ending no other benchmark shares (perf/tools/reading/run_info.py's short_names)."""
    return name.split("::")[-1]


def rows_of(out: str, name: str) -> list[str]:
    """The verdict's rows of one benchmark (as shown): those ending in its name, or those under it."""
    lines = out.splitlines()
    found = []
    for i, line in enumerate(lines):
        words = line.split()
        if words and words[0] in ("gpu", "wall") and words[-1] == name:
            found.append(line)
        elif line == f"  {name}":
            for row in lines[i + 1 :]:
                if not row.startswith("    ") or row.split()[0] not in ("gpu", "wall"):
                    break
                found.append(row)
    return found


def section(out: str, title: str) -> list[str]:
    """The benchmarks listed under the section of the verdict whose title starts with `title`, as shown:
    rows ending in a benchmark's name, names heading their rows (long names), or names one per line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    inside = " " * (len(title) - len(title.lstrip()) + 2)  # a section's lines are indented deeper
    names = []
    for line in lines[start + 1 :]:
        if not line.startswith(inside):
            break
        words = line.split()
        if words[0] == "figure" or (line.startswith(inside + "  ") and words[0] in ("gpu", "wall")):
            continue  # the column header, or a row under its benchmark's name
        names.append(words[-1])
    return list(dict.fromkeys(names))  # a benchmark with two rows once


class FakeRunner:
    """Stands in for `pytest ... --benchmark-json=PATH`: writes the next prepared result file."""

    def __init__(self, *runs: dict[str, dict] | tuple[dict, dict], exit_code: int = 0):
        self.runs = list(runs)
        self.exit_code = exit_code
        self.calls: list[list[str]] = []

    def __call__(self, args, json_path: Path) -> int:
        self.calls.append(list(args))
        if self.runs:
            run = self.runs.pop(0)
            # A run is its benchmarks' stats, or (stats, extra_info per node id).
            benchmarks, extra = run if isinstance(run, tuple) else (run, None)
            write_results(json_path, benchmarks, extra=extra)
        return self.exit_code
