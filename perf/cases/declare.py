"""How a suite declares itself, once: its axes (the values of each per tier, the option that sets them,
the ids they give), the benchmark arguments the tier computes from them, and the cells of a tier it keeps.

Each module of perf/cases/ that declares a suite exports `SUITES`; perf/tiers.py builds the tiers from
them, perf/plugin/options.py the command-line options, perf/plugin/parametrize.py the parameters and
ids. docs/adding-a-suite.md walks through one.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

# The tiers, in the order `--tier` lists them.
TIER_NAMES = ("cpu", "pr", "default", "full")
# How an option's value is read: comma-separated names among `choices`, integers >= `minimum`, byte
# sizes (1M, 1G), positive numbers, or one name.
READS = ("names", "ints", "sizes", "floats", "name")


# Byte sizes, as options read them ("sizes") and ids show them.
_BINARY_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def byte_size_label(size: int) -> str:
    """'64KiB', '1MiB', '1GiB' for whole multiples of a binary unit, else the count with 'B'."""
    for unit, scale in _BINARY_UNITS:
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


_SIZE_SUFFIXES = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_byte_size(text: str) -> int:
    """'4096', '64K', '1M', '1GiB' (binary units, any case) -> bytes; the inverse of byte_size_label."""
    body = text.strip().upper().removesuffix("IB").removesuffix("B")
    digits, suffix = (body[:-1], body[-1]) if body[-1:] in ("K", "M", "G") else (body, "")
    if not digits.isdigit() or int(digits) == 0:
        raise ValueError(f"{text!r} is not a positive byte count; give an integer, optionally with K, M or G")
    return int(digits) * _SIZE_SUFFIXES[suffix]


class _Named:
    """No value is left out of ids (the default of `unnamed`)."""

    def __repr__(self) -> str:
        return "NAMED"


NAMED = _Named()


def singular(name: str) -> str:
    """The benchmark argument of a plural axis name: its last plural word made singular (presets: preset,
    bucket_sizes_mb: bucket_size_mb, launches: launch)."""
    words = name.split("_")
    for i in reversed(range(len(words))):
        word = words[i]
        if word.endswith(("ches", "shes", "xes", "sses")):
            words[i] = word[:-2]
            return "_".join(words)
        if word.endswith("s") and not word.endswith("ss"):
            words[i] = word[:-1]
            return "_".join(words)
    raise ValueError(f"Axis {name}: name it in the plural (presets); its benchmark argument is the singular")


@dataclass(frozen=True)
class Axis:
    """One axis of the benchmark grid: its values in each tier, and what sets and names them.

    One name gives the three: the tier's values (`tier.matmul_sizes`), the benchmark argument each value
    fills (`param`, the singular: matmul_size) and the option that replaces the tier's values (`option`,
    --matmul-sizes)."""

    name: str  # plural, snake_case
    values: Mapping[str, Any] = field(default_factory=dict)  # per tier name; tiers not named take `default`
    default: Any = ()
    argument: bool = True  # False: not a benchmark argument, read from the tier (attention sweeps)
    has_option: bool = True  # False: no option of its own (an axis with `set_by` has none either)
    id_prefix: str = ""  # "n" gives n8192
    unnamed: Any = NAMED  # the value left out of ids: the one every case had before the axis existed
    label: Callable[[Any], str] | None = None  # an id other than prefix and value (byte sizes as 1MiB)
    aliases: tuple[str, ...] = ()  # the option's older names, still accepted with a note naming the new one
    help: str = ""
    read: str = "names"  # one of READS
    choices: tuple = ()  # accepted names, for read "names" and "name"
    minimum: int = 1  # for read "ints"
    set_by: str | None = None  # another axis whose option sets this one too (--presets: compile_presets)
    # A benchmark's own parametrization this axis keeps to its values (--allocators: the memory benchmark's
    # `allocator`), in place of a benchmark argument.
    filters: str | None = None
    # What a run without a GPU says of the default tier's values this tier leaves out ({values} in it).
    left_out_note: str = ""

    def __post_init__(self) -> None:
        if self.filters and self.argument:
            raise ValueError(f"Axis {self.name}: filters {self.filters!r} needs argument=False")
        if self.read not in READS:
            raise ValueError(f"Axis {self.name}: read {self.read!r}; accepted: {', '.join(READS)}")
        unknown = set(self.values) - set(TIER_NAMES)
        if unknown:
            raise ValueError(
                f"Axis {self.name}: unknown tiers {sorted(unknown)}; accepted: {', '.join(TIER_NAMES)}"
            )
        if self.argument:
            singular(self.name)

    @property
    def param(self) -> str | None:
        """The benchmark argument each value fills, or None where benchmarks read the tier."""
        return singular(self.name) if self.argument else None

    @property
    def option(self) -> str | None:
        """The option that replaces the tier's values, without "--", or None."""
        return self.name.replace("_", "-") if self.has_option and self.set_by is None else None

    def value(self, tier: str) -> Any:
        return self.values.get(tier, self.default)


@dataclass(frozen=True)
class Derived:
    """Values the tier computes from its axes (attention shapes from sweeps, seqs and head dims), read as
    tier.<name> and, where `argument`, given to benchmarks like an axis's (the singular of the name)."""

    name: str
    compute: Callable[[Any], tuple]  # of the tier
    argument: bool = True
    id_prefix: str = ""
    unnamed: Any = NAMED
    label: Callable[[Any], str] | None = None

    @property
    def param(self) -> str | None:
        return singular(self.name) if self.argument else None


@dataclass(frozen=True)
class Flag:
    """An option without a value that sets an axis to fixed values (--allreduce-sweep)."""

    option: str
    sets: str  # the axis
    value: tuple
    help: str


# The figures every measured result records (perf/harness/bench.py), which a table may show beside the
# fields a suite records itself (`Suite.records`).
RUN_FIGURES = (
    "median_ms", "gpu_ms", "host_ms", "tflops", "mfu", "gb_per_s", "tokens_per_s", "peak_memory_bytes",
    "precision",
)  # fmt: skip
# Where a suite's tables go among all tables at the end of a run and in reports: lower first. The built-in
# suites use 10 (end-to-end) to 75 (norms); a table without an order comes last.
LAST_TABLE = 1000


@dataclass(frozen=True)
class Key:
    """A column of a table's rows: a field of the results, shown by `label` (str by default)."""

    field: str
    title: str = ""  # the field's name where empty
    label: Callable[[Any], str] = str


@dataclass(frozen=True)
class Figure:
    """A column of figures: a field of the results, formatted by `spec` (".3f") with `suffix` after it."""

    field: str
    title: str
    spec: str = ".3f"
    suffix: str = ""


@dataclass(frozen=True)
class Table:
    """An end-of-run table of a suite's results, rendered by perf/tables/declared.py: a row per value of
    the `keys`, and the `figures` in a column each; with `across` (a field and its values) the figures once
    per value, and `ratios` ((numerator, denominator) values of `across`) of the first figure after them."""

    title: str
    keys: tuple[Key, ...]
    figures: tuple[Figure, ...]
    across: tuple[str, tuple[Any, ...]] | None = None
    ratios: tuple[tuple[Any, Any], ...] = ()
    order: int = LAST_TABLE
    suite: str = ""  # the results' `suite` field: the declaring suite's name where empty


@dataclass(frozen=True)
class Cell:
    """Cells of one benchmark that a tier keeps: those whose arguments take the values `where` names (a
    value, a tuple of values, or a test of the value); arguments it does not name take any value."""

    benchmark: str  # "test_matmul.py::test_matmul": its file under perf/ and its function
    where: Mapping[str, Any] = field(default_factory=dict)

    def keeps(self, node_id: str, params: Mapping[str, Any]) -> bool:
        """Whether this is a cell of the benchmark at `node_id` ('perf/test_x.py::test_y[ids]') whose
        arguments `params` are as named."""
        if node_id.removeprefix("perf/").split("[")[0] != self.benchmark:
            return False
        return all(name in params and _matches(params[name], wanted) for name, wanted in self.where.items())

    def __str__(self) -> str:
        named = ", ".join(f"{name}={getattr(v, '__name__', v)!s}" for name, v in self.where.items())
        return f"{self.benchmark}[{named or 'every cell'}]"


def cell(benchmark: str, **where: Any) -> Cell:
    """A Cell with its arguments' values as keywords: cell("test_x.py::test_y", precision="bf16")."""
    return Cell(benchmark, where)


def _matches(value: Any, wanted: Any) -> bool:
    if callable(wanted):
        return bool(wanted(value))
    return value in wanted if isinstance(wanted, tuple) else value == wanted


class DeclarationError(ValueError):
    """A suite declaration that cannot work: names the suite and the field."""


@dataclass(frozen=True)
class Suite:
    """What a suite declares: its axes and computed arguments in id order, its flags, per tier the cells
    that tier keeps (`Cell`s; a tier no suite names keeps every cell), the fields its
    benchmarks record beside the run's figures (`records`: bench.run's keywords; empty: not checked) and
    its tables. Benchmarks of perf/test_<name>.py record `suite` <name> unless they name another."""

    name: str
    axes: tuple[Axis | Derived, ...] = ()
    flags: tuple[Flag, ...] = ()
    cells: Mapping[str, tuple[Cell, ...]] = field(default_factory=dict)
    # Axes that other suites' benchmarks take too (the model's presets, precisions, ...): they come
    # first in every id, as they always have.
    shared: bool = False
    records: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()
    # What the run asks of the suite, each given the tier: a line about its cases said after collection
    # when its benchmarks were collected; a usage problem of the options given (axis names), or None; the
    # axis values the tier leaves to the device, from its memory in bytes (0 without a GPU).
    header: Callable[[Any], str] | None = None
    check: Callable[[Any, set[str]], str | None] | None = None
    fit: Callable[[Any, int], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        names = {a.name for a in self.axes}
        for flag in self.flags:
            if flag.sets not in names:
                raise DeclarationError(
                    f"suite {self.name!r}: flag --{flag.option} sets unknown axis {flag.sets!r}"
                )
        for tier, cells in self.cells.items():
            if tier not in TIER_NAMES:
                raise DeclarationError(
                    f"suite {self.name!r}: cells of unknown tier {tier!r}; accepted: {', '.join(TIER_NAMES)}"
                )
            for one in cells:
                if not isinstance(one, Cell) or "::" not in one.benchmark:
                    raise DeclarationError(
                        f"suite {self.name!r}: cells of tier {tier!r} take cell('test_x.py::test_y', "
                        f"argument=value, ...), not {one!r}"
                    )
        for table in self.tables:
            shown = [k.field for k in table.keys] + [f.field for f in table.figures]
            shown += [table.across[0]] if table.across else []
            unknown = [f for f in shown if self.records and f not in self.records and f not in RUN_FIGURES]
            if unknown:
                raise DeclarationError(
                    f"suite {self.name!r}: table {table.title!r} shows {', '.join(unknown)}, which the suite "
                    f"never records; it records {', '.join(self.records)} and {', '.join(RUN_FIGURES)}"
                )
            values = table.across[1] if table.across else ()
            for pair in table.ratios:
                if not set(pair) <= set(values):
                    raise DeclarationError(
                        f"suite {self.name!r}: table {table.title!r} ratio {pair[0]}/{pair[1]} names values "
                        f"not in its across values {', '.join(map(str, values))}"
                    )

    def tables_of(self) -> tuple[Table, ...]:
        """Its tables, each with the suite's name where it names none."""
        return tuple(t if t.suite else replace(t, suite=self.name) for t in self.tables)


def declared_suites() -> tuple[Suite, ...]:
    """Every suite perf/cases/ declares (`SUITES` of each module), the shared ones (the model's axes)
    first: their axes come first in every id. Two suites of one name are an error."""
    import perf.cases

    found: list[Suite] = []
    for module in pkgutil.iter_modules(perf.cases.__path__):
        found += getattr(importlib.import_module(f"perf.cases.{module.name}"), "SUITES", ())
    return checked(found)


def checked(found: list[Suite]) -> tuple[Suite, ...]:
    """The suites in id order (shared ones first), after the checks that span suites: names once, axes
    declared once, `set_by` naming a declared axis."""
    seen: dict[str, Suite] = {}
    for suite in found:
        if suite.name in seen:
            raise DeclarationError(f"suite {suite.name!r}: declared twice (two SUITES entries of that name)")
        seen[suite.name] = suite
    axes = [a.name for s in found for a in s.axes]
    for suite in found:
        for axis in suite.axes:
            if isinstance(axis, Axis) and axis.set_by and axis.set_by not in axes:
                raise DeclarationError(
                    f"suite {suite.name!r}: axis {axis.name} set_by unknown axis {axis.set_by!r}"
                )
    twice = sorted({name for name in axes if axes.count(name) > 1})
    if twice:
        raise DeclarationError(f"axes declared by more than one suite: {', '.join(twice)}")
    return tuple(sorted(found, key=lambda suite: not suite.shared))
