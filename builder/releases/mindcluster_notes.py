"""MindCluster's release notes (Ascend/mind-cluster ``docs/zh/release_notes.md``): which Ascend HDK
goes with which CANN release, per product where the notes number it apart.

The notes' version mapping (``相关产品版本配套说明``) comes in two shapes: a table of
``产品名称 | 版本`` with an ``Ascend HDK`` and a ``CANN`` row (26.0.x), and a table of
``MindCluster | CANN | HDK | ...`` rows (26.1.x). The HDK cell is one version for every product,
or a list of ``products：version`` lines, products joined by ``、`` (``Atlas 350 加速卡、Atlas 850
系列硬件产品、Atlas 950 SuperPoD：25.1.RC1``, ``其他产品：26.0.RC1``). Each product name is kept as
the notes spell it, with the product id a matrix cell writes where its model words match one of
``chips.products`` (`product_id`); ``其他产品`` ("other products") is ``other_products``.

A page with neither shape fails the generator naming the page, never yields an empty table.

Example:
    >>> [(r.line, r.cann, r.hdk) for r in read(EXAMPLE, "doc")]
    [(5, '9.0.0', (('Atlas 350 加速卡', '25.1.RC1'), ('Atlas 950 SuperPoD', '25.1.RC1'), ('其他产品', '26.0.RC1')))]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional, Sequence, Tuple

from builder.errors import UserError
from builder.releases import doc_tables

OTHER = "其他产品"            # "other products": the row for every product the list does not name
OTHER_PRODUCTS = "other_products"  # its key in the knowledge base (builder.knowledge.drivers.OTHER_PRODUCTS)
_HDK = re.compile(r"\b\d+\.\d+\.(?:RC\d+|\d+)(?:\.\d+)?\b", re.I)
_CANN = re.compile(r"\b\d+\.\d+\.(?:RC\d+|\d+)(?:[.-](?:alpha|beta)\.?\d+)?\b", re.I)
_WORD = re.compile(r"[A-Za-z0-9]+|[^\x00-\x7f]+")
_DESCRIPTORS = {"card", "series", "server"}  # words that describe a product, not its model

EXAMPLE = """## 相关产品版本配套说明

|产品名称|版本|
|--|--|
|Ascend HDK| <ul><li>Atlas 350 加速卡、Atlas 950 SuperPoD：25.1.RC1</li><li>其他产品：26.0.RC1</li></ul> |
|CANN|9.0.0|
"""


@dataclass(frozen=True)
class HdkRow:
    """One version mapping of one page: a CANN release and its HDK, per product as spelled ("": every product)."""

    document: str
    line: int
    cann: str
    hdk: Tuple[Tuple[str, str], ...]


def model(name: str) -> Tuple[str, ...]:
    """The words of a product name that name its model, case folded: descriptors ("card",
    "series", "Server") and Chinese words ("加速卡", "系列硬件产品") dropped.

    Example:
        >>> model("Atlas 850 Server"), model("Atlas 850 系列硬件产品"), model("Atlas 350 标卡"), model("Atlas 350 card")
        (('atlas', '850'), ('atlas', '850'), ('atlas', '350'), ('atlas', '350'))
    """
    return tuple(w.casefold() for w in _WORD.findall(name)
                 if w.isascii() and w.casefold() not in _DESCRIPTORS)


def product_id(name: str, products: Iterable[Any]) -> Optional[str]:
    """The id of the product (``.id``, ``.name``) whose model words are the name's; ``other_products``
    for 其他产品; None when none matches (a family such as "Atlas A2/A3 系列产品")."""
    if name.strip() == OTHER:
        return OTHER_PRODUCTS
    matches = [p.id for p in products if model(p.name) == model(name) and len(model(name)) > 1]
    return matches[0] if len(matches) == 1 else None


def _hdk(cell: str, document: str, line: int) -> Tuple[Tuple[str, str], ...]:
    """The HDK cell as (product as spelled, version) pairs; ("", version) for every product."""
    out: List[Tuple[str, str]] = []
    for part in cell.split("\n"):
        names, sep, version = re.split(r"([:：])", part, maxsplit=1) if re.search(r"[:：]", part) else ("", "", part)
        found = _HDK.search(version)
        if found is None:
            raise UserError(f"{document}:{line}: no HDK version in {part[:60]!r}",
                            fix="teach builder/releases/mindcluster_notes.py the cell's form", exit_code=1)
        out += [(n.strip(), found.group(0)) for n in (names.split("、") if sep else [""])]
    return tuple(out)


def read(text: str, document: str) -> List[HdkRow]:
    """Every version mapping row of one release notes page."""
    rows: List[HdkRow] = []
    for table in doc_tables.tables(text):
        if "配套" not in table.heading:
            continue
        header = [h.strip() for h in table.header]
        if header[:2] == ["产品名称", "版本"]:  # 26.0.x: an "Ascend HDK" row and a "CANN" row
            cells = {r[1][0]: (r[0], r[1][1]) for r in table.rows if len(r[1]) > 1}
            if "Ascend HDK" in cells and "CANN" in cells:
                line, hdk = cells["Ascend HDK"]
                rows += [HdkRow(document, line, c, _hdk(hdk, document, line))
                         for c in _CANN.findall(cells["CANN"][1])]
        elif "CANN" in header and "HDK" in header:  # 26.1.x: one row per MindCluster release
            at_cann, at_hdk = header.index("CANN"), header.index("HDK")
            rows += [HdkRow(document, line, c, _hdk(cells[at_hdk], document, line))
                     for line, cells in table.rows if len(cells) > max(at_cann, at_hdk)
                     for c in _CANN.findall(cells[at_cann])]
    if not rows:
        raise UserError(f"{document}: no version mapping of CANN and Ascend HDK found (MindCluster release notes)",
                        fix="the page's shape changed: teach builder/releases/mindcluster_notes.py the new shape, "
                            "or drop the document from the fixtures", exit_code=1)
    return rows


def data(rows: Sequence[HdkRow], products: Iterable[Any]) -> List[dict]:
    """The rows as the data file holds them, each product with its id (None where none matches)."""
    products = list(products)
    return [{"document": r.document, "line": r.line, "cann": r.cann,
             "hdk": [{"product": name, "id": product_id(name, products) if name else None, "hdk": version}
                     for name, version in r.hdk]}
            for r in rows]
