"""Where results are stored and whose they are: baselines/<machine folder>/NNNN_name.json, and in which form.

One folder per processor model (the GPU model, or `cpu <model>`), so that a comparison never sets one
GPU's results against another's. Stored baselines are compact (`compact_json`, read back by
`read_result`): pytest-benchmark's document without indentation or raw rounds, each benchmark's
extra_info as a row against a table of field lists and kernel names, so that pytest-benchmark's own
FileStorage still reads it and a default-tier file stays under 1 MB; `--benchmark-json` files keep
everything. Why not gzip, and the sizes: NOTES.md (Baseline files). Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASELINES = ROOT / "baselines"
PERF = ROOT / "perf"  # the benchmarks' folder; tests/ parametrize and select themselves
CPU_RUN = "the CPU"  # how `recorded_on` names a run without a GPU: 'the CPU (<model>)'


def recorded_on(perf_info: object) -> str | None:
    """The processor a result belongs to: the GPU model, or the CPU model for CPU runs."""
    if not isinstance(perf_info, dict):
        return None
    gpu = perf_info.get("gpu")
    if isinstance(gpu, dict) and gpu.get("name"):
        return str(gpu["name"])
    return f"{CPU_RUN} ({perf_info.get('cpu_model', 'unknown model')})"


def recorded_on_cpu(machine: str) -> bool:
    """Whether `recorded_on` named a CPU: a run without a CUDA GPU."""
    return machine.startswith(f"{CPU_RUN} (")


def folder_name(processor: str) -> str:
    """The folder under baselines/ of a GPU model, or of 'cpu <model>': lower case, other runs as '-'."""
    return re.sub(r"[^a-z0-9]+", "-", processor.lower()).strip("-")


def machine_folder(perf_info: Mapping[str, Any]) -> str:
    """The baselines/ folder that results with this machine_info.perf belong in."""
    gpu = perf_info.get("gpu")
    if isinstance(gpu, dict) and gpu.get("name"):
        return folder_name(str(gpu["name"]))
    return folder_name(f"cpu {perf_info.get('cpu_model', 'unknown model')}")


def partial_name(path: Path) -> Path:
    """Where the partial results of a run given `--benchmark-json=path` go: `results.partial.json`."""
    return path.with_name(f"{path.stem}.partial.json")


def _create_temporary(path: Path) -> Path:
    """A new empty file beside `path`, created as open() creates files: mode 0666 less the umask."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.writing")
        try:
            os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return temporary
        except FileExistsError:
            continue


def _publish(path: Path, data: bytes, place: Callable[[Path, Path], None]) -> None:
    """Write `data` to a temporary file beside `path` and `place` it there; the temporary file is gone
    afterwards, whatever happened (an interrupt included)."""
    temporary = _create_temporary(path)
    try:
        with open(temporary, "wb") as f:
            f.write(data)
        place(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_whole(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in its folder, renamed into place when complete:
    a result file is whole or not there, never half-written. A new file takes the user's umask, an
    existing one keeps its mode, as open() would."""

    def replace(temporary: Path, target: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temporary, stat.S_IMODE(target.stat().st_mode))
        os.replace(temporary, target)

    _publish(path, data, replace)


def write_new(path: Path, data: bytes) -> None:
    """`write_whole` for a file that must not exist yet (a numbered baseline): FileExistsError if it
    does, whoever created it meanwhile; never an overwrite."""

    def link(temporary: Path, target: Path) -> None:
        try:
            os.link(temporary, target)  # fails where the name exists: the check and the write are one
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links: check, then rename
            if target.exists():
                raise FileExistsError(
                    errno.EEXIST, "a stored result is never overwritten", str(target)
                ) from None
            os.replace(temporary, target)

    _publish(path, data, link)


# --------------------------------------------------------------------------- destinations
# Where a run or a command writes at its end, checked before anything runs: a link loop or a broken link, a
# folder where a file is wanted (or the other way round), a folder that cannot be made or take a new file.
# The check leaves nothing behind: a folder that exists takes a file made and removed, one still to be made
# needs its nearest existing folder writable.
FILE, FOLDER = "file", "folder"


def _dangling(path: Path) -> bool:
    """A link that leads nowhere: to itself, round a loop, or to nothing."""
    return os.path.islink(path) and not os.path.exists(path)


def cannot_write(path: Path, kind: str = FILE) -> str | None:
    """Why `path` cannot take a `kind` (FILE or FOLDER) written there, in a few words; None where it can."""
    for part in (path, *path.parents):
        if _dangling(part):
            return f"{part} is a link loop or a broken link"
    if kind == FILE and path.is_dir():
        return f"{path} is a folder; give a file path"
    if kind == FOLDER and path.exists() and not path.is_dir():
        return f"{path} is a file; give a folder"
    folder = path if kind == FOLDER else path.parent
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent  # the folders the write would make: made then, not now
    if not existing.is_dir():
        return f"cannot write into {folder} ({existing} is not a folder)"
    try:
        if existing == folder:  # a file made and removed: what the write needs, tried
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".perf-check-"):
                pass
        elif not os.access(existing, os.W_OK | os.X_OK):
            return f"cannot write into {folder} ({existing} is not writable)"
    except OSError as err:
        return f"cannot write into {folder} ({err.strerror or err})"
    return None


# --------------------------------------------------------------------------- the compact form
COMPACT = "perf_compact"  # the tables of a compact file, and the sign that it is one
COMPACT_FORMAT = 1
KERNEL_ROWS = "kernel rows"  # a field whose value is a kernel table as rows
KERNEL_FIELDS = ("kernel", "launches", "us")  # a kernel table's row (perf/harness/kernel_table.py)
SELECTED_BEYOND = "benchmarks and"  # perf.selected as {this: the node ids beyond the benchmarks' own}
ABOUT = (
    "written by perf/storage.py (compact_json); read it with perf.storage.read_result, which gives back the "
    "document as written less stats.data. Each benchmark's extra_info is [n, values...] in the order of "
    "fields[n]: a field [key, m] holds a dict as [values...] in the order of fields[m], a field "
    f'[key, "{KERNEL_ROWS}"] a kernel table as [kernels[i], launches, us] rows; options is options[i]; '
    f'perf.selected {{"{SELECTED_BEYOND}": ids}} is the benchmarks\' fullnames and ids, sorted.'
)


def _is_kernel_table(value: object) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(row, dict) and tuple(row) == KERNEL_FIELDS and isinstance(row["kernel"], str)
            for row in value
        )
    )


class _Tables:
    """The tables of one compact document: field lists, kernel names and options, each entry once."""

    def __init__(self, tables: dict[str, Any] | None = None) -> None:
        tables = tables or {}
        self.fields: list[Any] = list(tables.get("fields", []))
        self.kernels: list[Any] = list(tables.get("kernels", []))
        self.options: list[Any] = list(tables.get("options", []))
        self._index: dict[tuple[str, str], int] = {}

    def _add(self, table: list[Any], name: str, value: Any) -> int:
        key = (name, json.dumps(value))
        if key not in self._index:
            self._index[key] = len(table)
            table.append(value)
        return self._index[key]

    def as_json(self) -> dict[str, Any]:
        return {
            "format": COMPACT_FORMAT,
            "about": ABOUT,
            "fields": self.fields,
            "kernels": self.kernels,
            "options": self.options,
        }

    # writing
    def dict_row(self, value: dict[str, Any]) -> tuple[int, list[Any]]:
        """`value` as (its field list's index, its values); nested dicts and kernel tables likewise."""
        fields: list[Any] = []
        row: list[Any] = []
        for key, inner in value.items():
            if isinstance(inner, dict):
                index, inner_row = self.dict_row(inner)
                fields.append([key, index])
                row.append(inner_row)
            elif _is_kernel_table(inner):
                fields.append([key, KERNEL_ROWS])
                row.append(
                    [[self._add(self.kernels, "kernel", r["kernel"]), r["launches"], r["us"]] for r in inner]
                )
            else:
                fields.append(key)
                row.append(inner)
        return self._add(self.fields, "fields", fields), row

    def option(self, value: dict[str, Any]) -> int:
        return self._add(self.options, "options", value)

    # reading
    def dict_from(self, index: int, row: list[Any]) -> dict[str, Any]:
        fields = self.fields[_index(index)]
        if not isinstance(row, list) or len(row) != len(fields):
            raise ValueError(
                f"a row of {len(row) if isinstance(row, list) else 'no'} values for fields[{index}]"
            )
        value: dict[str, Any] = {}
        for field, inner in zip(fields, row, strict=True):
            if isinstance(field, str):
                value[field] = inner
            elif field[1] == KERNEL_ROWS:
                value[field[0]] = [
                    dict(zip(KERNEL_FIELDS, (self.kernels[_index(k)], launches, us), strict=True))
                    for k, launches, us in inner
                ]
            else:
                value[field[0]] = self.dict_from(field[1], inner)
        return value


def _index(value: object) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{value!r} is not a table index")
    return value


def _without_rounds(entry: Any) -> Any:
    """A benchmark without its raw rounds (stats.data)."""
    if isinstance(entry, dict) and isinstance(entry.get("stats"), dict) and "data" in entry["stats"]:
        stats = {key: value for key, value in entry["stats"].items() if key != "data"}
        return {**entry, "stats": stats}
    return entry


def compact_document(document: dict[str, Any]) -> dict[str, Any]:
    """A pytest-benchmark document (plain JSON values) in the compact form; `expand_document` gives it
    back less its raw rounds. Where that would not give it back exactly, the document less its raw rounds."""
    if not isinstance(document.get("benchmarks"), list):
        return document
    plain = {**document, "benchmarks": [_without_rounds(b) for b in document["benchmarks"]]}
    tables = _Tables()
    benchmarks = []
    for entry in plain["benchmarks"]:
        entry = dict(entry)
        if isinstance(entry.get("extra_info"), dict):
            index, row = tables.dict_row(entry["extra_info"])
            entry["extra_info"] = [index, *row]
        if isinstance(entry.get("options"), dict):
            entry["options"] = tables.option(entry["options"])
        benchmarks.append(entry)
    compact: dict[str, Any] = {}
    for key, value in plain.items():
        if key == "benchmarks":
            compact[COMPACT] = tables.as_json()
            value = benchmarks
        elif key == "perf" and isinstance(value, dict) and isinstance(value.get("selected"), list):
            value = {**value, "selected": _selected_beyond(value["selected"], benchmarks)}
        compact[key] = value
    try:
        same = expand_document(compact) == plain
    except ValueError:
        same = False
    return compact if same else plain


def _selected_beyond(selected: list[Any], benchmarks: list[Any]) -> Any:
    names = {entry.get("fullname") for entry in benchmarks if isinstance(entry, dict)}
    if not all(isinstance(name, str) for name in selected):
        return selected
    if selected != sorted(set(selected)) or not names <= set(selected):
        return selected  # not what expand_document would make of it: kept as it is
    return {SELECTED_BEYOND: [name for name in selected if name not in names]}


def expand_document(document: Any) -> Any:
    """A result document as it was written: a compact one expanded (less its raw rounds), any other as it
    is. ValueError where a compact document's tables do not fit its benchmarks."""
    if not isinstance(document, dict) or COMPACT not in document:
        return document
    tables_json = document[COMPACT]
    if not isinstance(tables_json, dict) or tables_json.get("format") != COMPACT_FORMAT:
        found = tables_json.get("format") if isinstance(tables_json, dict) else tables_json
        raise ValueError(
            f"a compact result file of format {found!r}; this checkout reads format {COMPACT_FORMAT}"
        )
    try:
        tables = _Tables(tables_json)
        benchmarks = []
        for entry in document.get("benchmarks") or []:
            if isinstance(entry, dict):
                entry = dict(entry)
                info = entry.get("extra_info")
                if isinstance(info, list):
                    entry["extra_info"] = tables.dict_from(info[0], info[1:])
                if type(entry.get("options")) is int:
                    entry["options"] = tables.options[_index(entry["options"])]
            benchmarks.append(entry)
        expanded = {}
        for key, value in document.items():
            if key == COMPACT:
                continue
            if key == "benchmarks":
                value = benchmarks
            elif key == "perf" and isinstance(value, dict) and isinstance(value.get("selected"), dict):
                names = {entry.get("fullname") for entry in benchmarks if isinstance(entry, dict)}
                value = {**value, "selected": sorted(names | set(value["selected"][SELECTED_BEYOND]))}
            expanded[key] = value
    except (IndexError, KeyError, TypeError, ValueError) as err:
        raise ValueError(f"a compact result file whose tables do not fit its benchmarks ({err})") from None
    return expanded


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


def compact_json(document: dict[str, Any]) -> bytes:
    """A stored baseline's bytes: `compact_document` of `document` (plain JSON values), a line a benchmark."""
    lines = []
    for key, value in compact_document(document).items():
        if key == "benchmarks" and isinstance(value, list) and value:
            text = "[\n" + ",\n".join(_dumps(entry) for entry in value) + "\n]"
        elif key == COMPACT:
            text = "{\n" + ",\n".join(f"{_dumps(k)}: {_dumps(v)}" for k, v in value.items()) + "\n}"
        else:
            text = _dumps(value)
        lines.append(f"{_dumps(key)}: {text}")
    return ("{\n" + ",\n".join(lines) + "\n}\n").encode()


def read_result(path: Path) -> Any:
    """A result file's document as written (`expand_document`): compact or as pytest-benchmark writes it.
    OSError, UnicodeDecodeError and ValueError (json.JSONDecodeError among them) as reading raises them."""
    return expand_document(json.loads(path.read_text(encoding="utf-8")))
