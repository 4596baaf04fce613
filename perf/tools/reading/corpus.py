"""A same-code corpus: runs of one commit on one GPU model by one method, kept to measure how often the
gate's rules call unchanged code slower (`python -m perf.tools.calibrate`, docs/gate.md).

On disk: baselines/<gpu>/same-code/<set>/NN.json, compact result files as `--benchmark-save` stores them. A
set is runs made back to back in one sitting on one GPU; the sets of a corpus are other sittings or other
GPUs of the model. Every run of a corpus must be of one commit (a clean tree), one GPU model and one method
(tier, --gpu-time and selection): one that is not is refused in one line naming it and what differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perf.storage import BASELINES
from perf.tools.reading.errors import GateError
from perf.tools.reading.results import Results, load_results
from perf.tools.reading.run_info import SHORT

FOLDER = "same-code"  # under baselines/<gpu>/
RUN_GLOB = "[0-9][0-9].json"
# GPU-time methods a run's benchmarks name, and the --gpu-time that chose them (perf/harness/gpu_time.py).
STEADY_SIGNS = ("rounds",)


@dataclass(frozen=True)
class CorpusSet:
    """Runs of one sitting, oldest first."""

    name: str
    runs: tuple[Results, ...]


@dataclass(frozen=True)
class Corpus:
    """The sets of one GPU model, all of one commit and method."""

    path: Path
    gpu: str
    commit: str
    method: str
    sets: tuple[CorpusSet, ...]

    @property
    def runs(self) -> int:
        return sum(len(s.runs) for s in self.sets)

    def describe(self) -> str:
        sizes = " + ".join(f"{len(s.runs)} ({s.name})" for s in self.sets)
        return f"{self.gpu}: {self.runs} runs of {self.commit[:SHORT]} by {self.method}: {sizes}"


def commit_of(results: Results) -> tuple[str, bool]:
    """(commit id, dirty) as the run recorded them; ('', True) where it recorded none."""
    info = results.document.get("commit_info")
    if not isinstance(info, dict) or not isinstance(info.get("id"), str):
        return "", True
    return info["id"], bool(info.get("dirty"))


def method_of(results: Results) -> str:
    """How the run measured: its tier, its --gpu-time (recorded, or read off its benchmarks' methods), and
    how many benchmarks it selected."""
    perf = results.document.get("perf")
    perf = perf if isinstance(perf, dict) else {}
    gpu_time = perf.get("gpu_time")
    if not isinstance(gpu_time, str):
        used = set(results.gpu_methods.values())
        gpu_time = "steady" if used & set(STEADY_SIGNS) else "/".join(sorted(used)) or "no GPU time"
    selected = perf.get("selected")
    count = len(selected) if isinstance(selected, list) else len(results.timings)
    return f"tier {perf.get('tier', '?')}, --gpu-time {gpu_time}, {count} selected"


def _runs_of(folder: Path) -> list[Results]:
    paths = sorted(folder.glob(RUN_GLOB))
    runs = [load_results(path, f"corpus run {path}") for path in paths]
    return sorted(runs, key=lambda r: str(r.document.get("datetime", "")))


def set_folders(path: Path) -> list[Path]:
    """The set folders of a corpus folder, or the folder itself where it holds runs."""
    if not path.is_dir():
        raise GateError(f"corpus {path}: no such folder")
    if list(path.glob(RUN_GLOB)):
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and list(p.glob(RUN_GLOB)))


def check_alike(runs: Sequence[Results], where: str) -> tuple[str, str, str]:
    """(GPU, commit, method) shared by every run; GateError naming the first run that differs."""
    first = runs[0]
    commit, dirty = commit_of(first)
    wanted = (first.machine, commit, method_of(first))
    for run in runs:
        commit, dirty = commit_of(run)
        if dirty or not commit:
            state = "no recorded commit" if not commit else f"{commit[:SHORT]} with uncommitted changes"
            raise GateError(f"{where}: run {run.path} is of {state}; a corpus holds runs of one clean commit")
        found = (run.machine, commit, method_of(run))
        for what, want, got in zip(("GPU", "commit", "method"), wanted, found, strict=True):
            if got != want:
                shown = (got[:SHORT], want[:SHORT]) if what == "commit" else (got, want)
                raise GateError(
                    f"{where}: run {run.path} differs in its {what} ({shown[0]}, the others {shown[1]}); "
                    f"a corpus holds one commit, one GPU model and one method"
                )
    return wanted


def load_corpus(path: Path) -> Corpus:
    """The corpus in `path` (a folder of sets, or one set's folder); GateError where it holds no run or mixes
    commits, GPUs or methods."""
    folders = set_folders(path)
    if not folders:
        raise GateError(f"corpus {path}: no runs in it (expected <set>/NN.json result files)")
    sets = tuple(CorpusSet(folder.name, tuple(_runs_of(folder))) for folder in folders)
    gpu, commit, method = check_alike([r for s in sets for r in s.runs], f"corpus {path}")
    return Corpus(path, gpu, commit, method, sets)


def corpus_folders(baselines: Path = BASELINES) -> list[Path]:
    """Every GPU's corpus folder under `baselines`."""
    return sorted(p for p in baselines.glob(f"*/{FOLDER}") if p.is_dir())
