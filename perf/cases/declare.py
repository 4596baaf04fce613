"""How a suite declares itself, once: its axes (the values of each per tier, the option that sets them,
the ids they give), the benchmark arguments the tier computes from them, and the cells of a tier it keeps.

Each module of perf/cases/ that declares a suite exports `SUITES`; perf/tiers.py builds the tiers from
them, perf/plugin/options.py the command-line options, perf/plugin/parametrize.py the parameters and
ids. docs/adding-a-suite.md walks through one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# The tiers, in the order `--tier` lists them.
TIER_NAMES = ("cpu", "pr", "default", "full")
# How an option's value is read: comma-separated names among `choices`, integers >= `minimum`, byte
# sizes (1M, 1G), positive numbers, or one name.
READS = ("names", "ints", "sizes", "floats", "name")


class _Named:
    """No value is left out of ids (the default of `unnamed`)."""

    def __repr__(self) -> str:
        return "NAMED"


NAMED = _Named()


@dataclass(frozen=True)
class Axis:
    """One axis of the benchmark grid: its values in each tier, and what sets and names them."""

    name: str  # the tiers' name for it: tier.matmul_sizes
    values: Mapping[str, Any]  # per tier name; tiers not named take `default`
    default: Any = ()
    param: str | None = None  # the benchmark argument filled with each value; None: read from the tier
    id_prefix: str = ""  # "n" gives n8192
    unnamed: Any = NAMED  # the value left out of ids: the one every case had before the axis existed
    label: Callable[[Any], str] | None = None  # an id other than prefix and value (byte sizes as 1MiB)
    option: str | None = None  # the command-line option that replaces the tier's values, without "--"
    aliases: tuple[str, ...] = ()  # its older names, still accepted with a note that names the new one
    help: str = ""
    read: str = "names"  # one of READS
    choices: tuple = ()  # accepted names, for read "names" and "name"
    minimum: int = 1  # for read "ints"
    set_by: str | None = None  # another axis whose option sets this one too (--presets: compile_presets)

    def __post_init__(self) -> None:
        if self.read not in READS:
            raise ValueError(f"Axis {self.name}: read {self.read!r}; accepted: {', '.join(READS)}")
        unknown = set(self.values) - set(TIER_NAMES)
        if unknown:
            raise ValueError(
                f"Axis {self.name}: unknown tiers {sorted(unknown)}; accepted: {', '.join(TIER_NAMES)}"
            )

    def value(self, tier: str) -> Any:
        return self.values.get(tier, self.default)


@dataclass(frozen=True)
class Derived:
    """Values the tier computes from its axes (attention shapes from sweeps, seqs and head dims), read as
    tier.<name> and, where `param` is set, given to benchmarks like an axis's."""

    name: str
    compute: Callable[[Any], tuple]  # of the tier
    param: str | None = None
    id_prefix: str = ""
    unnamed: Any = NAMED
    label: Callable[[Any], str] | None = None


@dataclass(frozen=True)
class Flag:
    """An option without a value that sets an axis to fixed values (--allreduce-sweep)."""

    option: str
    sets: str  # the axis
    value: tuple
    help: str


@dataclass(frozen=True)
class Suite:
    """What a suite declares: its axes and computed arguments in id order, its flags, and per tier the
    node-id patterns of the cells that tier keeps (a tier no suite names keeps every cell)."""

    name: str
    axes: tuple[Axis | Derived, ...] = ()
    flags: tuple[Flag, ...] = ()
    cells: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Axes that other suites' benchmarks take too (the model's presets, precisions, ...): they come
    # first in every id, as they always have.
    shared: bool = False
