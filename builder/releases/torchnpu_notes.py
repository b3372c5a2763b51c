"""TorchNPU's release notes (Ascend/pytorch ``docs/zh/release_notes*.md``), read into two kinds of row.

- **Compatibility rows** (``版本兼容性说明`` / "Version Compatibility"): one per TorchNPU
  (PTA) release, each CANN column with whether the table marks it compatible. Two shapes
  are published: a pipe table listing each PTA's compatible CANN releases in one cell
  (7.3.0 to 26.1.0-beta), and an HTML grid of PTA rows against CANN columns marked
  ``Y`` (26.1.0 on: ``/`` or an empty cell is "not compatible"). In the list shape the
  table's columns are every CANN release any of its rows names: a CANN the table names
  for one PTA and not another is excluded for the other; a CANN it names nowhere it says
  nothing about.
- **Version mapping rows** (the table with an installation-package column): branch,
  PyTorch, PTA, torch_npu, the paired CANN (commercial and community spellings), Python.

Either table missing from a document that should hold it is an error naming the
document: a release notes page whose shape changed must fail the generator, never yield
an empty table silently.

Example:
    >>> doc = read(EXAMPLE, "example")
    >>> [(r.pta, r.cann) for r in doc.compat][0]
    ('7.3.0', (('8.5.0', True), ('8.3.RC1', True), ('8.0.RC3', False)))
    >>> doc.compat[1].cann  # 8.5.0 is named for 7.3.0 only: left out for 7.2.0
    (('8.5.0', False), ('8.3.RC1', True), ('8.0.RC3', True))
    >>> [(m.torch_npu, m.pta, m.cann, m.python) for m in doc.mapping]
    [('2.9.0', '7.3.0', ('8.5.0',), ('3.10', '3.11'))]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from builder.errors import UserError
from builder.releases import doc_tables

COMPAT_HEADINGS = ("兼容性", "Compatibility")
# A CANN release as the notes write it: 8.5.0, 8.3.RC1, 9.0.X (a whole line), 9.1.0-beta.1.
_CANN = re.compile(r"\b\d+\.\d+\.(?:RC\d+|\d+|X)(?:[.-](?:alpha|beta)\.?\d+)?\b", re.I)
_PYTHON = re.compile(r"Python\s*(\d+\.\d+)")
_BRANCH = re.compile(r"v[\d.]+-(\d[\w.]*)")  # v<PyTorch>-<PTA>
_PTA = re.compile(r"^\d+\.\d+\.(?:\d+|X|RC\d+)(?:\.\d+)?$", re.I)

EXAMPLE = """## 版本配套

|CANN版本|PyTorch版本|Ascend Extension for PyTorch版本|Ascend Extension for PyTorch代码分支名称|Ascend Extension for PyTorch安装包版本|Python版本|
|--|--|--|--|--|--|
|商用版：8.5.0<br>社区版：8.5.0|2.9.0|7.3.0|v2.9.0-7.3.0|2.9.0|Python3.10.*x*、Python3.11.*x*|

## 版本兼容性说明

|Ascend Extension for PyTorch版本|CANN版本|网上相关产品版本兼容性|
|--|--|--|
|7.3.0|CANN 8.5.0<br>CANN 8.3.RC1|-|
|7.2.0|CANN 8.3.RC1<br>CANN 8.0.RC3|-|
"""


@dataclass(frozen=True)
class CompatRow:
    """One PTA row of a compatibility table: each CANN column with True (compatible) or False."""

    document: str
    line: int
    pta: str                                  # as written: 7.3.0, 26.1.X
    cann: Tuple[Tuple[str, bool], ...]        # (column as written, compatible?)


@dataclass(frozen=True)
class MappingRow:
    """One row of a version mapping table: the torch_npu package a PTA release ships per PyTorch."""

    document: str
    line: int
    branch: str
    pytorch: str
    pta: str
    torch_npu: str
    cann: Tuple[str, ...]      # the paired CANN, once per spelling (商用版 and 社区版 are the same release)
    python: Tuple[str, ...]


@dataclass(frozen=True)
class Notes:
    document: str
    compat: Tuple[CompatRow, ...]
    mapping: Tuple[MappingRow, ...]


def read(text: str, document: str, need_compat: bool = True) -> Notes:
    """Both kinds of row from one page; ``document`` names it in every row. A release notes page
    must hold both tables; the compatibility page (COMPATIBILITY.md, ``need_compat=False``) holds
    the version mapping alone, its PTA release read from the branch name (``v2.9.0-26.1.0``)."""
    found = doc_tables.tables(text)
    compat = [row for t in found if _is_compat(t) for row in _compat_rows(t, document)]
    mapping = [row for t in found if _mapping_columns(t) for row in _mapping_rows(t, document)]
    missing = [what for what, rows in (("a compatibility table", compat), ("a version mapping table", mapping))
               if not rows and (need_compat or what != "a compatibility table")]
    if missing:
        raise UserError(f"{document}: no {' and no '.join(missing)} found (TorchNPU release notes)",
                        fix="the page's shape changed: teach builder/releases/torchnpu_notes.py the new shape, "
                            "or drop the document from the fixtures", exit_code=1)
    return Notes(document, tuple(compat), tuple(mapping))


def _is_compat(table: doc_tables.Table) -> bool:
    first = table.header[0] if table.header else ""
    return (any(h in table.heading for h in COMPAT_HEADINGS)
            and ("PyTorch" in first or "TorchNPU" in first) and len(table.header) >= 2)


def _compat_rows(table: doc_tables.Table, document: str) -> List[CompatRow]:
    columns = [c for c in table.header[1:] if _CANN.fullmatch(c)]
    if columns:  # the grid shape: one column per CANN release or line
        return [CompatRow(document, line, cells[0], tuple((col, cell.strip().upper() == "Y")
                                                          for col, cell in zip(table.header[1:], cells[1:])
                                                          if _CANN.fullmatch(col)))
                for line, cells in table.rows if _pta(cells[0], document, line)]
    # the list shape: the CANN releases each PTA is compatible with, in one cell
    listed = [(line, cells[0], _releases(cells[1])) for line, cells in table.rows
              if len(cells) > 1 and _pta(cells[0], document, line)]
    every: List[str] = []
    for _, _, releases in listed:
        every += [r for r in releases if r not in every]
    return [CompatRow(document, line, pta, tuple((c, c in releases) for c in every)) for line, pta, releases in listed]


def _pta(label: str, document: str, line: int) -> bool:
    if _PTA.match(label):
        return True
    raise UserError(f"{document}:{line}: {label[:40]!r} is no TorchNPU release in a compatibility table",
                    fix="teach builder/releases/torchnpu_notes.py the label's form", exit_code=1)


def _releases(cell: str) -> List[str]:
    """The CANN releases one cell names, each once, in the cell's order."""
    out: List[str] = []
    for match in _CANN.findall(cell):
        if match not in out:
            out.append(match)
    return out


_MAPPING_KEYS = (  # column -> the header texts that name it (after cleaning, in lower case)
    ("branch", ("代码分支名称", "branch name", "gitcode branch")),
    ("pytorch", ("pytorch版本", "pytorch version")),
    ("torch_npu", ("安装包版本", "installation package version")),
    ("cann", ("cann版本", "cann version")),
    ("python", ("python版本", "python version")),
    ("pta", ("版本", "version")),
)
_EXACT = ("pytorch", "cann", "python")  # "Ascend Extension for PyTorch版本" is the PTA, not PyTorch


def _mapping_columns(table: doc_tables.Table) -> Optional[Dict[str, int]]:
    """Which column holds what in a version mapping table; None when the table is not one."""
    columns: Dict[str, int] = {}
    for i, head in enumerate(h.lower() for h in table.header):
        for key, endings in _MAPPING_KEYS:
            if key not in columns and any(head == e if key in _EXACT else head.endswith(e) for e in endings):
                columns[key] = i
                break
    wanted = {"branch", "pytorch", "torch_npu", "cann"}
    return columns if wanted <= set(columns) else None


def _mapping_rows(table: doc_tables.Table, document: str) -> List[MappingRow]:
    columns = _mapping_columns(table) or {}
    rows = []
    for line, cells in table.rows:
        if len(cells) < len(table.header):
            raise UserError(f"{document}:{line}: a version mapping row has {len(cells)} cells, the header "
                            f"{len(table.header)}", fix="check the row in the document", exit_code=1)
        cell = {key: cells[i] for key, i in columns.items()}.get
        python = tuple(dict.fromkeys(_PYTHON.findall(cell("python", ""))))
        branch = _BRANCH.fullmatch(cell("branch", ""))
        pta = cell("pta", "") or (branch.group(1) if branch else "")
        torch_npu = cell("torch_npu", "").replace("(beta)", "").strip()  # "1.11.0.rc2 (beta)"
        rows.append(MappingRow(document, line, cell("branch", ""), cell("pytorch", ""), pta, torch_npu,
                               tuple(_releases(cell("cann", ""))), python))
    return rows
