"""A large valid matrix made from the shipped one: what the render benchmark times and the fault
tests write twice under two image names."""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path
from typing import Tuple

from builder import knowledge
from builder.images import checks, matrix

REPO = Path(__file__).resolve().parents[2]


def combinations():
    """Valid (cann, torch_npu, os, env, arch, chip, python) tuples derived from the shipped matrix."""
    kb = knowledge.load()
    shipped = matrix.load(REPO / "matrix" / "default.yaml").cells
    seen, out = set(), []
    for cell in shipped:
        release = kb.releases.torch_npu(cell.torch_npu)
        for arch, chip in itertools.product(matrix.ARCHS, ("910b", "a3")):
            if cell.env == "venv":
                pythons: Tuple[str, ...] = (cell.python,)
            else:
                assert release is not None, f"{cell.id}: torch_npu {cell.torch_npu} is not in the knowledge base"
                pythons = release.python.get(arch, ())
            for python in pythons:
                key = (cell.cann, cell.torch_npu, cell.os, cell.env, arch, chip, python)
                if key in seen:
                    continue
                seen.add(key)
                out.append(key)
    # keep only what validates without errors
    cells = [_cell(i, key) for i, key in enumerate(out)]
    text = _yaml(cells)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "probe.yaml"
        path.write_text(text)
        loaded = matrix.load(path)
        errors = [f for f in loaded.findings + checks.check(loaded.cells) if f.severity == "error"]
        assert all(f.where for f in errors), [str(f) for f in errors if not f.where]  # each names its cell's line
        bad = {f.where.line for f in errors if f.where}
    return [key for key, line in zip(out, range(2, 2 + len(out))) if line not in bad]


def _cell(index, key):
    cann, torch_npu, os_id, env, arch, chip, python = key
    return {"name": f"bench-{index:04d}", "os": os_id, "env": env, "arch": arch, "chip": chip,
            "cann": cann, "python": python, "torch_npu": torch_npu}


def _yaml(cells) -> str:
    # one flow mapping per line: cell i is on line i + 2
    lines = ["cells:"] + ["  - {" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in c.items()) + "}" for c in cells]
    return "\n".join(lines) + "\n"
