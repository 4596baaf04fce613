"""What the end-of-run tables share: how a missing figure reads, the order of names, tables under titles."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
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


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None where either is missing (or the denominator is 0)."""
    return numerator / denominator if numerator is not None and denominator else None


def gib(value: float | None) -> str:
    """Bytes as GiB with two decimals; '-' where the figure is missing (CPU runs)."""
    return fmt(None if value is None else value / 2**30, ".2f")


def of_suite(infos: Iterable[Info], suite: str, required: Iterable[str] = ()) -> list[Info]:
    """The results of one suite (extra_info "suite") that carry every required key."""
    required = tuple(required)
    return [x for x in infos if x.get("suite") == suite and all(key in x for key in required)]


@dataclass(frozen=True)
class Column:
    """One column of a table: its title, its width and its alignment ('>' numbers, '<' names)."""

    title: str
    width: int
    align: str = ">"


def grid(titles: Sequence[str], rows: Iterable[Sequence[str] | str]) -> list[str]:
    """A header and the rows, each column as wide as its title and its widest cell, one space apart. A
    title "<name" aligns its column left (names), others right (numbers); a row given as a string is a line
    of its own (a group's heading, a note). None where there are no rows."""
    rows = list(rows)
    if not rows:
        return []
    columns = [Column(t[1:], len(t) - 1, "<") if t.startswith("<") else Column(t, len(t)) for t in titles]
    for row in rows:
        if not isinstance(row, str):
            if len(row) != len(columns):
                raise ValueError(f"{len(row)} cells for {len(columns)} columns")
            columns = [
                Column(c.title, max(c.width, len(cell)), c.align)
                for c, cell in zip(columns, row, strict=True)
            ]
    return [header(columns), *(row if isinstance(row, str) else line(columns, row) for row in rows)]


def header(columns: Sequence[Column]) -> str:
    """The columns' titles, each at its width, one space apart."""
    return line(columns, [c.title for c in columns])


def line(columns: Sequence[Column], cells: Sequence[str]) -> str:
    """One row: each cell (already formatted) at its column's width and alignment, one space apart."""
    if len(cells) != len(columns):
        raise ValueError(f"{len(cells)} cells for {len(columns)} columns")
    return " ".join(f"{cell:{c.align}{c.width}}" for c, cell in zip(columns, cells, strict=True))


# The widest line a table writes where it can: a name longer than the room left goes on a line of its own.
WIDTH = 120


def display_names(names: Sequence[str]) -> list[str]:
    """Benchmark names without their common `test_` prefix, unless that would make two of them alike."""
    shown = [name.removeprefix("test_") for name in names]
    return shown if len(set(shown)) == len(set(names)) else list(names)


def named_table(
    rows: Sequence[tuple[str, Sequence[str]]], columns: Sequence[Column], width: int = WIDTH
) -> list[str]:
    """A header and one row per (name, cells): the name whole, in a column as wide as the longest name where
    the row then fits in `width`, else each name too long for the room on its own line with its cells under
    it. A name is never cut, so two that differ only at their end stay two."""
    names = display_names([name for name, _ in rows])
    room = width - len(header(columns)) - 1
    name_width = max(len("benchmark"), min(room, max((len(n) for n in names), default=0)))
    lines = [f"{'benchmark':<{name_width}} {header(columns)}"]
    for name, (_, cells) in zip(names, rows, strict=True):
        if len(name) > name_width:
            lines.append(name)
            name = ""
        lines.append(f"{name:<{name_width}} {line(columns, cells)}")
    return lines
