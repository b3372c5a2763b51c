"""TorchNPU's published tables, as the generator read them (``builder/data/torchnpu-tables.yaml``).

The file is made by ``make knowledge`` from the release notes kept under
``tests/fixtures/documents/``; nothing in it is typed. This part answers three questions
for `Releases` (builder/knowledge/pairings.py), each with the document and row it rests on:

- which PTA (TorchNPU) release ships a torch_npu package (the version mapping rows);
- which tables mark a CANN release compatible with a PTA release, and which cover that
  PTA's line but leave the CANN out (the compatibility rows);
- every row that mentions a PTA line, for ``kb torch-npu``.

Matching, as the tables write it: a row ``7.3.X`` is every PTA release of line 7.3, a row
``7.3.0`` that release alone; a column ``8.5.X`` is every release of CANN line 8.5 (not
its alphas and betas, which come before the line's first release), a column ``8.5.0``
that release (``versions.cann`` equality).

Example:
    >>> from builder.knowledge import load
    >>> tables = load().releases.tables
    >>> tables.pta_of("2.9.0.post2").pta, tables.pta_of("2.9.0.post2").where
    ('26.0.0', 'Ascend/pytorch@master:COMPATIBILITY.en.md, line 25')
    >>> [r.where for r in tables.listing("7.3.0", "9.0.0")]
    ['Ascend/pytorch@v26.2.0-beta.1-pytorch2.13.0:docs/zh/release_notes.md, line 75']
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from builder import versions


@dataclass(frozen=True)
class TableRow:
    """One compatibility row of one document: a PTA label and its CANN columns."""

    document: str
    line: int
    pta: str
    cann: Tuple[Tuple[str, bool], ...]

    @property
    def where(self) -> str:
        return f"{self.document}, line {self.line}"

    @property
    def compatible(self) -> Tuple[str, ...]:
        """The CANN columns the row marks compatible, as written."""
        return tuple(c for c, ok in self.cann if ok)

    def column(self, cann: str) -> Optional[bool]:
        """True/False where one of the row's columns is that CANN release; None where none is."""
        answers = [ok for label, ok in self.cann if column_matches(label, cann)]
        return any(answers) if answers else None


@dataclass(frozen=True)
class MappingRow:
    """A version mapping row: the torch_npu package of a PTA release, its paired CANN and Python."""

    document: str
    line: int
    pta: str
    torch_npu: str
    cann: Tuple[str, ...]
    python: Tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.document}, line {self.line}"


def pta_matches(label: str, pta: str) -> bool:
    """Whether a row label (``7.3.X`` or ``7.3.0``) names PTA release ``pta``.

    Example:
        >>> pta_matches("7.3.X", "7.3.1"), pta_matches("7.3.0", "7.3.1"), pta_matches("26.1.X", "26.0.0")
        (True, False, False)
    """
    label, pta = label.lower(), pta.lower()
    if label.endswith(".x"):
        return pta.startswith(label[:-1])
    return label == pta


def column_matches(label: str, cann: str) -> bool:
    """Whether a CANN column (``8.5.X`` or ``8.5.0``) is release ``cann``.

    Example:
        >>> [column_matches("8.5.X", c) for c in ("8.5.1", "8.5.0.alpha001", "9.0.0")]
        [True, False, False]
        >>> column_matches("8.3.RC1", "8.3.rc1"), column_matches("8.3.RC1", "8.3.RC2")
        (True, False)
    """
    wanted = versions.lenient("cann", cann)
    if wanted is None:
        return False
    if label.upper().endswith(".X"):
        line = tuple(int(p) for p in re.findall(r"\d+", label)[:2])
        return wanted.release == line and wanted.key[4] == 2  # a release of the line, not an alpha or beta
    return versions.lenient("cann", label) == wanted


class CompatTables:
    """The generated tables, indexed once (see the module docstring)."""

    def __init__(self, doc: Optional[Mapping[str, Any]]) -> None:
        doc = doc or {}
        self.documents: Tuple[str, ...] = tuple(str(d["id"]) for d in doc.get("documents") or ())
        self.rows = tuple(TableRow(str(r["document"]), int(r["line"]), str(r["pta"]),
                                   tuple((str(c), bool(ok)) for c, ok in r["cann"]))
                          for r in doc.get("compat") or ())
        self._mapping: Dict[Any, MappingRow] = {}
        # the newest document's row wins: documents are listed oldest first
        for r in doc.get("mapping") or ():
            row = MappingRow(str(r["document"]), int(r["line"]), str(r["pta"]), str(r["torch_npu"]),
                             tuple(str(c) for c in r["cann"]), tuple(str(p) for p in r["python"]))
            key = versions.lenient("python_package", row.torch_npu)
            if key is not None:
                self._mapping[key] = row

    def pta_of(self, torch_npu: str) -> Optional[MappingRow]:
        """The mapping row that names this torch_npu package (the newest document's); None when none does."""
        key = versions.lenient("python_package", torch_npu)
        return self._mapping.get(key) if key is not None else None

    def mapping(self) -> Tuple[MappingRow, ...]:
        """Every torch_npu package a mapping row names, once (the newest document's row)."""
        return tuple(self._mapping[k] for k in sorted(self._mapping))

    def covering(self, pta: str) -> List[TableRow]:
        """Every compatibility row whose label names PTA release ``pta``."""
        return [r for r in self.rows if pta_matches(r.pta, pta)]

    def verdicts(self, pta: str, cann: str) -> Tuple[List[TableRow], List[TableRow]]:
        """(the rows that mark ``cann`` compatible with PTA ``pta``, the rows that have a column for
        ``cann`` and leave it out), from one pass over the rows that cover ``pta``."""
        listing: List[TableRow] = []
        excluding: List[TableRow] = []
        for row in self.covering(pta):
            said = row.column(cann)
            if said is not None:
                (listing if said else excluding).append(row)
        return listing, excluding

    def listing(self, pta: str, cann: str) -> List[TableRow]:
        """The rows that mark ``cann`` compatible with PTA ``pta``."""
        return self.verdicts(pta, cann)[0]

    def excluding(self, pta: str, cann: str) -> List[TableRow]:
        """The rows that have a column for ``cann`` and do not mark it compatible with ``pta``."""
        return self.verdicts(pta, cann)[1]
