"""The report as a list of blocks (headings, paragraphs, tables, images, preformatted text), and the
two ways it is written: Markdown and a self-contained HTML page.

Building the report once as blocks keeps report.md and report.html saying the same thing; only the
escaping differs. Every text is plain text here: the renderers escape it for their format.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field


class Code(str):
    """Text shown as code (a benchmark's node id, a file): `code` in Markdown, <code> in HTML."""

    __slots__ = ()


@dataclass(frozen=True)
class Heading:
    level: int  # 1 to 3
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Table:
    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    # Columns aligned right (numbers); the others left.
    numeric: frozenset[int] = frozenset()
    # Per row, a word the HTML page colours it by ('slower', 'faster'); '' for none.
    marks: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True)
class Image:
    file: str  # relative to the report's folder
    alt: str


@dataclass(frozen=True)
class Preformatted:
    lines: Sequence[str]


@dataclass(frozen=True)
class Link:
    """A paragraph of `before` followed by a link: 'The report: [text](url)'."""

    before: str
    text: str
    url: str


Block = Heading | Paragraph | Table | Image | Preformatted | Link


# --------------------------------------------------------------------------- Markdown
# An underscore inside a word (node_ids, forward_backward) starts no emphasis: left as it is, readable.
_MD_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def _md_text(text: str) -> str:
    """Plain text in Markdown: characters that would start markup are escaped."""
    for char in "\\`*[]<>|#&":
        text = text.replace(char, "\\" + char)
    return _MD_UNDERSCORE.sub(r"\\_", text)


def _md_code(text: str) -> str:
    # A backtick run longer than any inside keeps the span closed; spaces keep a leading backtick apart.
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _md_cell(text: str) -> str:
    if isinstance(text, Code):
        # A pipe ends a cell even inside a code span (GitHub's tables) unless escaped.
        return _md_code(text).replace("|", "\\|")
    return _md_text(text).replace("\n", " ")


def _md_table(table: Table) -> list[str]:
    align = ["---:" if i in table.numeric else "---" for i in range(len(table.header))]
    lines = [
        "| " + " | ".join(map(_md_cell, table.header)) + " |",
        "| " + " | ".join(align) + " |",
    ]
    lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in table.rows]
    return lines


def _md_fence(lines: Sequence[str]) -> list[str]:
    # A fence longer than any run of backticks inside keeps the block closed where it should be.
    longest = max((len(run) for line in lines for run in line.split("`")[1:]), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, *lines, fence]


def markdown(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        match block:
            case Heading(level, text):
                out.append("#" * level + " " + _md_text(text))
            case Paragraph(text):
                out.append(_md_text(text))
            case Table():
                out += _md_table(block)
            case Image(file, alt):
                # Angle brackets let a file name hold spaces or parentheses; plain names need none.
                target = file if re.fullmatch(r"[\w.-]+", file) else f"<{file}>"
                out.append(f"![{_md_text(alt)}]({target})")
            case Preformatted(lines):
                out += _md_fence(lines)
            case Link(before, text, url):
                # Angle brackets keep a URL with parentheses or spaces whole; brackets inside are escaped.
                target = url.replace("<", "%3C").replace(">", "%3E")
                out.append(f"{_md_text(before)}[{_md_text(text)}](<{target}>)")
        out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------- HTML
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.slower td { background: #fde2e1; }
tr.faster td { background: #e1f5e1; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0 1.5em; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
"""


def _html_cell(text: str) -> str:
    return f"<code>{html.escape(text)}</code>" if isinstance(text, Code) else html.escape(text)


def _html_table(table: Table) -> list[str]:
    esc = html.escape
    lines = ["<table>", "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in table.header) + "</tr>"]
    for i, row in enumerate(table.rows):
        mark = table.marks[i] if i < len(table.marks) else ""
        cells = "".join(
            (f'<td class="num">{_html_cell(c)}</td>' if j in table.numeric else f"<td>{_html_cell(c)}</td>")
            for j, c in enumerate(row)
        )
        lines.append((f'<tr class="{esc(mark)}">' if mark else "<tr>") + cells + "</tr>")
    return [*lines, "</table>"]


def html_page(title: str, blocks: Sequence[Block]) -> str:
    esc = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{esc(title)}</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
    ]
    for block in blocks:
        match block:
            case Heading(level, text):
                out.append(f"<h{level}>{esc(text)}</h{level}>")
            case Paragraph(text):
                out.append(f"<p>{esc(text)}</p>")
            case Table():
                out += _html_table(block)
            case Image(file, alt):
                out.append(f'<img src="{esc(file, quote=True)}" alt="{esc(alt, quote=True)}">')
            case Preformatted(lines):
                out.append("<pre>" + esc("\n".join(lines)) + "</pre>")
            case Link(before, text, url):
                out.append(f'<p>{esc(before)}<a href="{esc(url, quote=True)}">{esc(text)}</a></p>')
    return "\n".join([*out, "</body>", "</html>", ""])
