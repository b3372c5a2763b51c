"""The rule that a cell's product is one its CANN release supports, by CANN's own release notes.

Why: support starts per product inside one chip family (the notes of CANN 9.0.0 say "新增支持
Atlas 350 加速卡", newly supports the Atlas 350 card, while the 950 chip itself came with the
9.0.0 line), so a cell naming a product with a CANN release older than the first whose notes
name it is refused, citing those notes. The knowledge base answers from
``builder/data/cann-products.yaml`` (parsed from the notes, `builder.knowledge.cann_products`)
through ``kb.drivers.product_first_release``.

A release whose notes do not name a product an older release's notes name says nothing: the
notes list what is new in a release, not everything it supports. Where nothing is known (no
notes name the product, or the product is of another chip, which `checks.product_fits`
refuses), the rule says nothing either.

Example:
    >>> from builder import knowledge
    >>> kb = knowledge.load()
    >>> cell = Cell(id="c", image="i", os="ubuntu22.04", arch="aarch64", chip="950", cann="8.5.0", driver="25.5.1",
    ...             firmware=None, python="3.11", torch="", torch_npu="", env="venv", product="atlas-350")
    >>> [(f.rule, f.severity) for f in product_released(cell, kb)]
    [('product-before-release', 'error')]
    >>> from dataclasses import replace
    >>> list(product_released(replace(cell, cann="9.0.0"), kb))
    []
"""

from __future__ import annotations

from typing import Iterator

from builder import versions
from builder.errors import Finding
from builder.images.matrix import Cell

Findings = Iterator[Finding]


def _finding(cell: Cell, key: str, rule: str, message: str, fix: str, severity: str = "error") -> Finding:
    path, where = cell.locate(key)
    return Finding(rule, severity, message, fix, where, path)


def product_released(cell: Cell, kb) -> Findings:
    """A product first named in CANN R's release notes needs CANN R or later (an error, citing the notes)."""
    if not cell.product:
        return
    product = kb.drivers.product(cell.product)
    if product is None or product.chip != cell.chip:  # unknown id: the schema's; another chip: product_fits's
        return
    first = kb.drivers.product_first_release(cell.product)
    if first is None:  # no notes name it: nothing known, nothing said
        return
    release, source = first
    try:
        too_old = versions.cann(cell.cann) < versions.cann(release)
    except versions.VersionError:  # a CANN that is no version is cann_known's finding
        return
    if too_old:
        yield _finding(cell, "product", "product-before-release",
                       f"product {cell.product} ({product.name}) is first listed in CANN {release}'s release notes "
                       f"({source.cite()}, as {source.name!r}); CANN {cell.cann} predates it",
                       f"set cann: {release} or later")
