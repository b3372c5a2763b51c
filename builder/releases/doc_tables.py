"""The tables of a Markdown document, both shapes Ascend's notes use: pipe tables and HTML ``<table>``.

A table comes out as plain text cells with the line each row starts on (1-based, in the
document as published), and the heading it sits under, so a parser above this one can
pick a table by its heading and its column names and cite the row it read. HTML tables
are expanded into a grid (``rowspan``/``colspan`` repeat the cell), so a two-row header
such as ``TorchNPU | CANN版本 (colspan 3)`` over ``8.5.X | 9.0.X | 9.1.X`` reads as one
header per column. A cell keeps its line breaks (``<br>``) as ``\\n``; every other tag is
dropped and whitespace folded.

Example:
    >>> text = "## Versions\\n\\n|A|B|\\n|--|--|\\n|1|x<br>y|\\n"
    >>> [(t.heading, t.header, t.rows) for t in tables(text)]
    [('Versions', ('A', 'B'), ((5, ('1', 'x\\ny')),))]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Dict, List, Optional, Tuple

Row = Tuple[int, Tuple[str, ...]]  # (line the row starts on, its cells)

_BR = re.compile(r"<br\s*/?>|</?li\b[^>]*>", re.I)  # a line break, or a list item's edge
_TAG = re.compile(r"<[^>]+>")
_EMPHASIS = re.compile(r"(?<!\w)[*_]+|[*_]+(?!\w)")
# The most rows and columns one table may have: a document is a fixture or a fetched page,
# and a hostile one must not make the grid expansion allocate without bound.
MAX_ROWS, MAX_COLS = 2000, 64


@dataclass(frozen=True)
class Table:
    """One table: the heading above it, its header (one text per column), its body rows."""

    heading: str
    line: int                 # the line the table starts on
    header: Tuple[str, ...]
    rows: Tuple[Row, ...]


def clean(cell: str) -> str:
    """A cell's text: ``<br>`` as a line break, other tags and Markdown emphasis dropped, spaces folded.

    Example:
        >>> clean(" Python3.9.*x*、<term>Ascend</term> 950<br>CANN 8.5.0 ")
        'Python3.9.x、Ascend 950\\nCANN 8.5.0'
    """
    text = _BR.sub("\n", cell)
    text = _TAG.sub("", text)
    text = _EMPHASIS.sub("", text)
    text = text.replace("&nbsp;", " ").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    return "\n".join(" ".join(part.split()) for part in text.split("\n") if part.strip())


def tables(text: str) -> List[Table]:
    """Every table of ``text``, pipe tables and HTML tables, in document order."""
    found = _pipe_tables(text) + _html_tables(text)
    return sorted(found, key=lambda t: t.line)


def _headings(lines: List[str]) -> List[Tuple[int, str]]:
    """(line, heading text) of every Markdown heading, 1-based lines."""
    return [(i + 1, clean(line.lstrip("#"))) for i, line in enumerate(lines) if re.match(r"#{1,6}\s", line)]


def _heading_above(headings: List[Tuple[int, str]], line: int) -> str:
    above = [text for at, text in headings if at < line]
    return above[-1] if above else ""


def _split_pipe_row(line: str) -> Tuple[str, ...]:
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|"):
        body = body[:-1]
    return tuple(clean(c) for c in body.split("|"))


def _pipe_tables(text: str) -> List[Table]:
    lines = text.splitlines()
    headings = _headings(lines)
    found: List[Table] = []
    i = 0
    while i < len(lines) - 1:
        line, below = lines[i].strip(), lines[i + 1].strip()
        if line.startswith("|") and re.fullmatch(r"\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?", below):
            header = _split_pipe_row(line)[:MAX_COLS]
            rows: List[Row] = []
            j = i + 2
            while j < len(lines) and lines[j].strip().startswith("|") and len(rows) < MAX_ROWS:
                rows.append((j + 1, _split_pipe_row(lines[j])[:MAX_COLS]))
                j += 1
            found.append(Table(_heading_above(headings, i + 1), i + 1, header, tuple(rows)))
            i = j
        else:
            i += 1
    return found


@dataclass
class _Cell:
    text: str
    header: bool
    rowspan: int
    colspan: int


class _HtmlTables(HTMLParser):
    """Collects each ``<table>``'s rows of cells (nested tables are read as their own)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.done: List[Tuple[int, List[Tuple[int, bool, List[_Cell]]]]] = []  # (line, [(line, in thead, cells)])
        self._stack: List[Tuple[int, List[Tuple[int, bool, List[_Cell]]]]] = []
        self._cell: Optional[_Cell] = None
        self._thead = False

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        if tag == "table":
            self._stack.append((self.getpos()[0], []))
        elif not self._stack:
            return
        elif tag == "thead":
            self._thead = True
        elif tag == "tr" and len(self._stack[-1][1]) < MAX_ROWS:
            self._stack[-1][1].append((self.getpos()[0], self._thead, []))
        elif tag in ("td", "th") and self._stack[-1][1]:
            spans = dict(attrs)
            self._cell = _Cell("", tag == "th", _span(spans.get("rowspan")), _span(spans.get("colspan")))
            self._stack[-1][1][-1][2].append(self._cell)
        elif tag == "br" and self._cell is not None:
            self._cell.text += "<br>"

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._stack:
            self.done.append(self._stack.pop())
        elif tag == "thead":
            self._thead = False
        elif tag in ("td", "th"):
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.text += data


def _span(value: Optional[str]) -> int:
    try:
        return max(1, min(int(value or 1), MAX_COLS))
    except ValueError:
        return 1


def _grid(rows: List[Tuple[int, bool, List[_Cell]]]) -> List[Tuple[int, bool, List[str]]]:
    """The rows with spans expanded: a cell spanning rows or columns repeats its text there."""
    pending: Dict[Tuple[int, int], str] = {}  # (row, column) -> text carried down by a rowspan
    out: List[Tuple[int, bool, List[str]]] = []
    for r, (line, head, cells) in enumerate(rows):
        row: List[str] = []
        col = 0
        queue = list(cells)
        while (queue or (r, col) in pending) and col < MAX_COLS:
            if (r, col) in pending:
                row.append(pending.pop((r, col)))
                col += 1
                continue
            cell = queue.pop(0)
            text = clean(cell.text)
            for c in range(col, min(col + cell.colspan, MAX_COLS)):
                row.append(text)
                for down in range(1, min(cell.rowspan, MAX_ROWS)):
                    pending[(r + down, c)] = text
            col += cell.colspan
        out.append((line, head or all(c.header for c in cells), row))
    return out


def _html_tables(text: str) -> List[Table]:
    lines = text.splitlines()
    headings = _headings(lines)
    parser = _HtmlTables()
    parser.feed(text)
    parser.close()
    found: List[Table] = []
    for line, rows in parser.done:
        grid = _grid(rows)
        head = [cells for _, is_head, cells in grid if is_head]
        body = tuple((at, tuple(cells)) for at, is_head, cells in grid if not is_head)
        header = tuple(head[-1]) if head else ()
        found.append(Table(_heading_above(headings, line), line, header, body))
    return found
