"""What the end-of-run tables share: how a missing figure reads, the order of names, tables under titles."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

Info = Mapping[str, Any]  # one benchmark's extra_info
Table = Callable[[Iterable[Info]], list[str]]


def fmt(value: float | None, spec: str, suffix: str = "") -> str:
    """The value formatted, or '-' where a figure is missing (an untimed run, a CPU run)."""
    return "-" if value is None else format(value, spec) + suffix


def registry_order(value: str, names: Iterable[str]) -> tuple[int, str]:
    """Sort key: a registry's names (presets, precisions) in its order, others after them, by name."""
    names = list(names)
    return (names.index(value), "") if value in names else (len(names), value)


def titled(tables: Iterable[tuple[str, Table]], infos: Iterable[Info]) -> list[str]:
    """Every non-empty table under its title, indented; none if no table has rows."""
    infos = list(infos)
    lines: list[str] = []
    for title, make in tables:
        rows = make(infos)
        if rows:
            lines += [title, *(f"  {row}" for row in rows)]
    return lines


def gib(value: float | None) -> str:
    """Bytes as GiB with two decimals; '-' where the figure is missing (CPU runs)."""
    return fmt(None if value is None else value / 2**30, ".2f")


def of_suite(infos: Iterable[Info], suite: str, required: Iterable[str] = ()) -> list[Info]:
    """The results of one suite (extra_info "suite") that carry every required key."""
    required = tuple(required)
    return [x for x in infos if x.get("suite") == suite and all(key in x for key in required)]
