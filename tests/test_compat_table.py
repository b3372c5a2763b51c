"""The knowledge base against Ascend/pytorch's own compatibility table (tests/fixtures/,
copied verbatim with its commit): every pairing it publishes since CANN 7.0 is known here
and validates, except the torch_npu releases PyPI has no files for, which are refused by
name (they cannot be installed from a package index; the table lists them all the same).

The release watcher keeps the copy current in CI; here it is what the test reads.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List

import yaml

from builder import knowledge, python_env, versions
from builder.images import checks, matrix
from tests.support.matrix import cell_index

TABLE = Path(__file__).parent / "fixtures" / "documents" / "ascend-pytorch" / "master" / "COMPATIBILITY.en.md"
ROW = re.compile(r"^\|\s*(\d[\w.]*)(?: \(beta\))?\s*\|\s*[^|]+\|\s*([\d.]+)\s*\|\s*CANN ([\w.]+)\s*\|", re.M)
SINCE = versions.cann("7.0.RC1")


def published_rows():
    """(torch_npu, PyTorch, CANN) of every row, as the table spells them."""
    return ROW.findall(TABLE.read_text())


def test_the_table_is_read_whole():
    rows = published_rows()
    assert len(rows) == 62 and rows[0] == ("2.12.0", "2.12.0", "9.1.0") and rows[-1] == ("1.5.0.post2", "1.5.0", "5.0.2")


def recent():
    return [row for row in published_rows() if versions.cann(row[2]) >= SINCE]


def test_every_cann_release_the_table_names_since_7_0_is_known():
    kb = knowledge.load()
    known = {versions.cann(c) for c in kb.releases.cann_releases()}
    missing = sorted({cann for _, _, cann in recent() if versions.cann(cann) not in known})
    assert missing == [] and len({cann for _, _, cann in recent()}) == 12


def _cells(rows, kb):
    """One cell per row and arch, on the newest Python that torch_npu has a wheel for and the
    CANN's installation guide supports, where the knowledge base holds it (the table's Python
    column is PyTorch's, not torch_npu's wheels')."""
    cells: List[dict] = []
    for npu, _torch, cann in rows:
        release = kb.releases.torch_npu(npu)
        stated = python_env.python_range(cann)
        for arch in ("x86_64", "aarch64"):
            pythons = release.python.get(arch, ()) if release else ("3.10",)
            pythons = tuple(p for p in pythons if stated is None or stated.allows(p)) or pythons
            cells.append({"name": f"row-{len(cells)}", "os": "ubuntu22.04", "arch": arch, "chip": "910b",
                          "cann": cann, "python": pythons[-1] if pythons else "3.10", "torch_npu": npu})
    return cells


def test_every_published_pairing_since_7_0_validates(tmp_path):
    """Ascend's own word, row by row on both arches: only torch_npu releases PyPI has no files for are refused."""
    kb = knowledge.load()
    rows = recent()
    path = tmp_path / "table.yaml"
    path.write_text(yaml.safe_dump({"image": "table/check", "cells": _cells(rows, kb)}))
    loaded = matrix.load(path)
    errors = [f for f in loaded.findings + checks.check(loaded.cells, kb) if f.severity == "error"]
    by_cell: Dict[int, List[str]] = {}
    for f in errors:
        by_cell.setdefault(cell_index(f.field), []).append(f.rule)
    refused = {rows[i // 2][0] for i in by_cell}
    assert set(rule for rules in by_cell.values() for rule in rules) == {"torch-npu-unpublished"}, by_cell
    assert refused == {"1.11.0.post14", "1.11.0.post11", "2.1.0.post4", "1.11.0.post8", "1.11.0.post4", "2.0.1",
                       "2.0.1.post1"}
    assert all(kb.releases.torch_npu(npu) is None for npu in refused)  # none of them is on PyPI
    assert len(rows) * 2 - len(by_cell) == 2 * (len(rows) - len(refused))  # all others validate, both arches


# What a pair outside the published pairing gets (a table lists it, leaves it out, or says
# nothing): tests/test_published_tables.py, by the release notes' tables.
