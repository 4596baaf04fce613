"""Stored autotuning choices of the FlashAttention Triton kernels: one table per GPU model.

A new tuning key costs the kernels 15 to 24 s of autotuning on its first call on a fresh machine.
`kernels/tuned/<gpu>.json` (the GPU's name as baselines/ folders are named) holds the configuration
a real tuning run on that GPU model chose per case; scripts/tune_flash_triton.py writes it, nothing
else does. A stored case then launches its configuration on its first call; a case not stored
autotunes as before.

A case is one kernel ("forward" or "backward") at one tuning key: the query and key length
buckets, whether the launch qualifies for TMA descriptors, the head dim, causal, and the inputs'
dtype. The file:

    {"format_version": 1,
     "machine_info": {"gpu": {"name": ..., "capability": ...}, "torch": ..., "triton": ...,
                      "parts": [{"date", "command", "commit", "dirty", "driver", "cuda", "torch",
                                 "triton", "cases"}, ...]},
     "cases": [{"kernel", "seq_q_bucket", "seq_k_bucket", "with_descriptors", "head_dim", "causal",
                "dtype", "config": {"kwargs": {...}, "num_warps", "num_stages"},
                optional: "ms" (the autotuner's median), "shape" (what was run), "part"}, ...]}

A table is used only on the GPU it names and only for configurations the kernel could choose now
(the caller's `valid`); anything else is left out with a note (TuningTableWarning, once per process,
and in `describe`), and those cases autotune: a table never fails a launch.

FLASH_TRITON_TUNING picks the table, read at every lookup: unset, the repository's table of the GPU;
"off", none (each case autotunes, as a tuning run needs); otherwise the path of a table file.
"""

from __future__ import annotations

import functools
import json
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import triton

from kernels.attention_inputs import DTYPES, HEAD_DIMS

FORMAT_VERSION = 1
ENV = "FLASH_TRITON_TUNING"
ROOT = Path(__file__).resolve().parents[2]
TUNED_DIR = ROOT / "kernels" / "tuned"
KERNELS = ("forward", "backward")
DTYPE_NAMES = tuple(str(d).removeprefix("torch.") for d in DTYPES)
# The identity of a case, in the order of the kernel's tuning key; entries are sorted by it.
CASE_FIELDS = ("kernel", "seq_q_bucket", "seq_k_bucket", "with_descriptors", "head_dim", "causal", "dtype")
# What every part of a table records about the run that wrote it.
GPU_INFO_FIELDS = ("name", "capability", "driver", "cuda", "torch", "triton", "commit", "dirty")

Case = tuple  # (kernel, seq_q_bucket, seq_k_bucket, with_descriptors, head_dim, causal, dtype name)
# valid(kernel, key, config): whether the kernel could choose `config` for `key` (the kernel's key
# tuple with the device None); tuning supplies it, so this module needs nothing of the kernels.
Validity = Callable[[str, tuple, triton.Config], bool]


class TuningTableWarning(UserWarning):
    """A stored table, or some of its entries, not used: those cases autotune."""


class TuningTableError(ValueError):
    """A table that cannot be read, or a write or merge refused; the message says why."""


def folder_name(gpu_name: str) -> str:
    """A GPU model's file stem, as its baselines/ folder is named: lower case, other runs as '-'."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")


def table_path(gpu_name: str) -> Path:
    """The repository's table of a GPU model (it need not exist)."""
    return TUNED_DIR / f"{folder_name(gpu_name)}.json"


@functools.cache
def gpu_name_of(device: torch.device) -> str | None:
    """The GPU model a key's device is, as torch names it; None off CUDA (the interpreter included)."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def same_config(a: triton.Config, b: triton.Config) -> bool:
    """Equal launch values, whatever the order of the kwargs (triton.Config's == compares in order)."""
    return a.all_kwargs() == b.all_kwargs() and a.pre_hook is b.pre_hook


def case_of(kernel: str, key: tuple) -> Case:
    """The case of a kernel's tuning key (SEQ_Q_BUCKET, SEQ_K_BUCKET, WITH_DESCRIPTORS, HEAD_DIM,
    IS_CAUSAL, dtype, device); the device does not enter it."""
    seq_q, seq_k, with_descriptors, head_dim, causal, dtype = key[:6]
    dtype_name = str(dtype).removeprefix("torch.")
    return (kernel, int(seq_q), int(seq_k), bool(with_descriptors), int(head_dim), bool(causal), dtype_name)


def case_text(case: Case) -> str:
    kernel, seq_q, seq_k, tma, head_dim, causal, dtype = case
    return f"{kernel} q{seq_q}/k{seq_k} d{head_dim} {'causal' if causal else 'full'} {dtype}{' tma' * tma}"


def config_text(config: triton.Config) -> str:
    values = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    return ",".join(f"{k}={v}" for k, v in values.items())


# --------------------------------------------------------------------------- reading
def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field(obj: dict, name: str, where: str, check: Callable[[Any], bool], expected: str) -> Any:
    where = f"{where}: " if where else ""
    if name not in obj:
        raise TuningTableError(f"{where}{name} missing")
    value = obj[name]
    if not check(value):
        raise TuningTableError(f"{where}{name} must be {expected}; got {value!r}")
    return value


def _positive_int(value: object) -> bool:
    return _is_int(value) and value > 0


def _power_of_two(value: object) -> bool:
    return _positive_int(value) and value & (value - 1) == 0


def _integers_by_name(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and _is_int(v) for k, v in value.items())


def _check_case(entry: object, where: str) -> tuple[Case, triton.Config]:
    """An entry's case and configuration; TuningTableError naming the field at fault."""
    if not isinstance(entry, dict):
        raise TuningTableError(f"{where} must be an object; got {type(entry).__name__}")
    case = (
        _field(entry, "kernel", where, lambda v: v in KERNELS, f"one of {', '.join(KERNELS)}"),
        _field(entry, "seq_q_bucket", where, _power_of_two, "a power of two"),
        _field(entry, "seq_k_bucket", where, _power_of_two, "a power of two"),
        _field(entry, "with_descriptors", where, lambda v: isinstance(v, bool), "true or false"),
        _field(entry, "head_dim", where, lambda v: _is_int(v) and v in HEAD_DIMS, f"one of {HEAD_DIMS}"),
        _field(entry, "causal", where, lambda v: isinstance(v, bool), "true or false"),
        _field(entry, "dtype", where, lambda v: v in DTYPE_NAMES, f"one of {', '.join(DTYPE_NAMES)}"),
    )
    if entry.get("ms") is not None:
        _field(
            entry, "ms", where, lambda v: (_is_int(v) or isinstance(v, float)) and v > 0, "positive or null"
        )
    config = _field(entry, "config", where, lambda v: isinstance(v, dict), "an object")
    where = f"{where}.config"
    kwargs = _field(config, "kwargs", where, _integers_by_name, "an object of integers by name")
    warps = _field(config, "num_warps", where, _positive_int, "a positive integer")
    stages = _field(config, "num_stages", where, _positive_int, "a positive integer")
    return case, triton.Config(dict(kwargs), num_warps=warps, num_stages=stages)


def _check_document(data: object) -> tuple[str, dict[Case, tuple[triton.Config, dict]]]:
    """The GPU name and the cases of a table document; TuningTableError saying what is wrong."""
    if not isinstance(data, dict):
        raise TuningTableError(f"not a JSON object but a {type(data).__name__}")
    if "format_version" not in data:
        raise TuningTableError("no format_version: not a tuning table")
    if data["format_version"] != FORMAT_VERSION:
        raise TuningTableError(f"format_version {data['format_version']!r}; this code reads {FORMAT_VERSION}")
    info = _field(data, "machine_info", "", lambda v: isinstance(v, dict), "an object")
    gpu = _field(info, "gpu", "machine_info", lambda v: isinstance(v, dict), "an object")
    name = _field(gpu, "name", "machine_info.gpu", lambda v: isinstance(v, str) and v, "the GPU's name")
    for version in ("torch", "triton"):
        _field(info, version, "machine_info", lambda v: isinstance(v, str), "a version string")
    _field(info, "parts", "machine_info", lambda v: isinstance(v, list), "a list")
    entries = _field(data, "cases", "", lambda v: isinstance(v, list), "a list")
    cases: dict[Case, tuple[triton.Config, dict]] = {}
    first_at: dict[Case, int] = {}
    for i, entry in enumerate(entries):
        case, config = _check_case(entry, f"cases[{i}]")
        if case in cases:
            raise TuningTableError(
                f"cases[{i}] repeats the case of cases[{first_at[case]}] ({case_text(case)})"
            )
        cases[case], first_at[case] = (config, entry), i
    return name, cases


def shown(path: Path) -> str:
    """A path as notes show it: relative to the repository where it lies inside."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _read(path: Path) -> tuple[dict, str, dict[Case, tuple[triton.Config, dict]]]:
    """A table file's document, GPU name and cases; TuningTableError naming the file and the problem."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise TuningTableError(f"{shown(path)}: no such file") from None
    except OSError as err:
        raise TuningTableError(f"{shown(path)}: cannot be read ({err.strerror or err})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TuningTableError(f"{shown(path)}: not valid JSON ({err})") from None
    try:
        return data, *_check_document(data)
    except TuningTableError as err:
        raise TuningTableError(f"{shown(path)}: {err}") from None


def read_table(path: Path) -> dict:
    """A table file's document, checked; TuningTableError naming the file and the problem."""
    return _read(Path(path))[0]


@dataclass
class _Table:
    """A table read and checked, before the caller's validity check."""

    path: Path
    gpu: str
    document: dict
    cases: dict[Case, tuple[triton.Config, dict]]
    # Per validity predicate: the configurations kept, and the note on those dropped (or None).
    kept: dict[Validity | None, tuple[dict[Case, triton.Config], str | None]] = field(default_factory=dict)


@functools.lru_cache(maxsize=32)
def _read_stamped(path: Path, mtime_ns: int, size: int) -> _Table | TuningTableError:
    """A table file read once per process and version of the file (its mtime and size)."""
    try:
        document, gpu, cases = _read(path)
    except TuningTableError as err:
        return err
    return _Table(path, gpu, document, cases)


def _kept(table: _Table, valid: Validity | None) -> tuple[dict[Case, triton.Config], str | None]:
    """The table's configurations the kernel could choose, and a note on those it could not."""
    if valid not in table.kept:
        kept: dict[Case, triton.Config] = {}
        dropped: list[tuple[Case, triton.Config, str]] = []
        for case, (config, _entry) in table.cases.items():
            key, why = (*case[1:6], getattr(torch, case[6]), None), ""
            try:
                ok = valid is None or bool(valid(case[0], key, config))
            except Exception as err:  # a broken check must not fail a launch: the entry is left out
                ok, why = False, f" (the check raised {type(err).__name__}: {err})"
            if ok:
                kept[case] = config
            else:
                dropped.append((case, config, why))
        note = None
        if dropped:
            case, config, why = dropped[0]
            note = (
                f"{shown(table.path)}: {len(dropped)} of {len(table.cases)} stored configurations left out, "
                f"not among the kernel's candidates for their case now (first: {case_text(case)}: "
                f"{config_text(config)}{why}); those cases autotune"
            )
        table.kept[valid] = (kept, note)
    return table.kept[valid]


# --------------------------------------------------------------------------- lookups and notes
_NOTES: dict[str, str] = {}  # the notes warned about in this process, in order, with their GPU's name
_USED: dict[str, dict[str, set[Case]]] = {}  # by GPU name: cases launched from the table, cases tuned
_VALID: dict[str, Validity | None] = {}  # by GPU name: the predicate its lookups passed


def _note(gpu_name: str, text: str) -> None:
    if text not in _NOTES:
        _NOTES[text] = gpu_name
        warnings.warn(text, TuningTableWarning, stacklevel=3)


@dataclass
class _Resolved:
    path: Path | None  # None: FLASH_TRITON_TUNING=off
    table: _Table | None = None  # None: no table, or one not used (the notes say why)
    configs: dict[Case, triton.Config] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _resolve(gpu_name: str, valid: Validity | None) -> _Resolved:
    """The table FLASH_TRITON_TUNING and the GPU select, checked, with the notes about it."""
    raw = os.environ.get(ENV, "").strip()
    if raw.lower() == "off":
        return _Resolved(None)
    path = Path(raw).expanduser() if raw else table_path(gpu_name)
    try:
        stat = path.stat()
    except OSError as err:
        if not raw and isinstance(err, FileNotFoundError):
            return _Resolved(path)  # no table for this GPU: said only by describe
        why = "no such file" if isinstance(err, FileNotFoundError) else f"cannot be read ({err.strerror})"
        return _Resolved(path, notes=[f"{ENV}={raw}: {why}; each case autotunes"])
    table = _read_stamped(path, stat.st_mtime_ns, stat.st_size)
    if isinstance(table, TuningTableError):
        return _Resolved(path, notes=[f"{table}; not used, each case autotunes"])
    if table.gpu != gpu_name:
        note = f"{shown(path)}: tuned on {table.gpu}, not on this GPU ({gpu_name}); not used"
        return _Resolved(path, notes=[f"{note}, each case autotunes"])
    configs, note = _kept(table, valid)
    return _Resolved(path, table, configs, [note] if note else [])


def lookup(
    kernel: str, key: tuple, gpu_name: str | None, valid: Validity | None = None
) -> triton.Config | None:
    """The stored configuration of `kernel` at its tuning key `key` on GPU `gpu_name`, or None (the
    caller autotunes). `key` is the kernel's (SEQ_Q_BUCKET, SEQ_K_BUCKET, WITH_DESCRIPTORS, HEAD_DIM,
    IS_CAUSAL, dtype, device). Problems with the table are notes, never exceptions."""
    if not gpu_name:
        return None
    _VALID[gpu_name] = valid
    resolved = _resolve(gpu_name, valid)
    for text in resolved.notes:
        _note(gpu_name, text)
    case = case_of(kernel, key)
    config = resolved.configs.get(case)
    if resolved.table is not None:  # what describe reports of the table's use
        used = _USED.setdefault(gpu_name, {"stored": set(), "tuned": set()})
        used["stored" if config is not None else "tuned"].add(case)
    return config


def describe(gpu_name: str | None = None) -> list[str]:
    """Lines for the end of a run: the table used for the GPU (all GPUs looked up in this process if
    None), how many cases it holds and this process launched from it, and every note issued."""
    lines: list[str] = []
    for name in [gpu_name] if gpu_name else list(dict.fromkeys([*_VALID, *_NOTES.values()])):
        resolved = _resolve(name, _VALID.get(name))
        if resolved.path is None:
            lines.append(f"{ENV}=off: no stored configurations for {name}; each case autotunes")
        elif resolved.table is None and not resolved.notes:
            lines.append(f"no stored table for {name} ({shown(resolved.path)}); each case autotunes")
        elif resolved.table is not None:
            lines.append(_summary(name, resolved))
            used = _USED.get(name, {"stored": set(), "tuned": set()})
            if used["stored"] or used["tuned"]:
                line = f"this process launched {len(used['stored'])} stored configurations"
                if used["tuned"]:
                    first = case_text(min(used["tuned"]))
                    line += f" and autotuned {len(used['tuned'])} cases not stored (first: {first})"
                lines.append(line)
        notes = [text for text, gpu in _NOTES.items() if gpu == name] + resolved.notes
        lines.extend(dict.fromkeys(text for text in notes if text not in lines))
    return lines


def _summary(gpu_name: str, resolved: _Resolved) -> str:
    info = resolved.table.document["machine_info"]
    parts = [p for p in info["parts"] if isinstance(p, dict)]
    kernels = [case[0] for case in resolved.configs]
    counts = ", ".join(f"{kernels.count(k)} {k}" for k in KERNELS)
    line = f"stored configurations for {gpu_name}: {shown(resolved.path)}, {len(kernels)} cases ({counts})"
    if parts:
        last = parts[-1]
        commit = str(last["commit"])[:12] if last.get("commit") else "an unknown commit"
        commit += " (dirty)" if last.get("dirty") else ""
        line += f", tuned at {commit} on {str(last.get('date', '?'))[:10]}"
        if len(parts) > 1:
            line += f" (the last of {len(parts)} parts)"
    here = {"torch": torch.__version__, "triton": triton.__version__}
    differ = [f"{k} {info[k]} (here {v})" for k, v in here.items() if info.get(k) != v]
    if differ:
        line += f"; tuned with {', '.join(differ)}: the stored choices may no longer be the fastest"
    return line
