"""How long do validate + render take for a 1,000-cell matrix? The goal is under 1 s.

Generates 1,000 cells (unique names) from the valid combinations of the shipped matrix:
each shipped cell's CANN / torch_npu / OS / env, crossed with both arches, the chips
its CANN supports with known installers, and every Python its torch_npu has a wheel
for (venv cells keep their OS's Python). Every generated cell passes `checks`.

Then it times, in one process (best of 3, and the first, cold run):
    matrix.load + checks.check + render.render_all
and, as subprocesses (wall time, interpreter start included):
    ascend-build validate --matrix M
    ascend-build render --matrix M --out DIR      (first write, then an unchanged re-run)

Run: .venv/bin/python -m benchmarks.bench_validate_render [--cells N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict

from builder.images import checks, matrix
from builder.images import render
from tests.support.generated_matrix import _cell, _yaml, combinations

REPO = Path(__file__).resolve().parent.parent

GOAL_S = 1.0


def in_process(path: Path):
    start = time.perf_counter()
    loaded = matrix.load(path)
    t_load = time.perf_counter()
    findings = loaded.findings + checks.check(loaded.cells)
    t_check = time.perf_counter()
    rendered = render.render_all(loaded.cells)
    t_render = time.perf_counter()
    assert not [f for f in findings if f.severity == "error"], findings[:3]
    return {"load": t_load - start, "check": t_check - t_load, "render": t_render - t_check,
            "total": t_render - start, "cells": len(loaded.cells), "files": sum(len(v) for v in rendered.values())}


def wall(*args) -> float:
    exe = Path(sys.executable).with_name("ascend-build")
    start = time.perf_counter()
    result = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, cwd=REPO)
    took = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args))} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return took


def main() -> Dict[str, str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument("--keep", type=Path, help="write the generated matrix here too")
    args = parser.parse_args(sys.argv[1:] if __name__ == "__main__" else [])

    combos = combinations()
    cells = [_cell(i, combo) for i, combo in zip(range(args.cells), itertools.cycle(combos))]
    with tempfile.TemporaryDirectory(prefix="ascend-bench-") as folder:
        path = Path(folder) / "matrix.yaml"
        path.write_text(_yaml(cells))
        if args.keep:
            shutil.copy(path, args.keep)
        print(f"matrix: {len(cells)} cells from {len(combos)} valid combinations, {path.stat().st_size / 1024:.0f} KiB")

        runs = [in_process(path) for _ in range(4)]  # the first is cold (knowledge base read, template compiled)
        cold, warm = runs[0], min(runs[1:], key=lambda r: r["total"])
        print(f"in-process, cold:      load {cold['load']:.3f} s + check {cold['check']:.3f} s + "
              f"render {cold['render']:.3f} s = {cold['total']:.3f} s")
        print(f"in-process, best of 3: load {warm['load']:.3f} s + check {warm['check']:.3f} s + "
              f"render {warm['render']:.3f} s = {warm['total']:.3f} s "
              f"({warm['files']} files)  -> {warm['total'] / GOAL_S:.2f} x the {GOAL_S:.0f} s goal")

        out = Path(folder) / "out"
        t_validate = min(wall("validate", "--matrix", path) for _ in range(3))
        t_render_first = wall("render", "--matrix", path, "--out", out)
        t_render_again = min(wall("render", "--matrix", path, "--out", out) for _ in range(2))
        t_check = min(wall("render", "--check", "--matrix", path, "--out", out) for _ in range(2))
        print(f"CLI wall: validate {t_validate:.3f} s ({t_validate / GOAL_S:.2f} x goal); "
              f"render {t_render_first:.3f} s first write, {t_render_again:.3f} s unchanged "
              f"({t_render_again / GOAL_S:.2f} x goal); render --check {t_check:.3f} s")
        shipped_validate = min(wall("validate", "--matrix", REPO / "matrix") for _ in range(3))
        shipped_check = min(wall("render", "--check", "--matrix", REPO / "matrix", "--out", REPO / "dockerfiles")
                            for _ in range(3))
        print(f"shipped matrix, CLI wall: validate {shipped_validate:.3f} s; render --check {shipped_check:.3f} s")
    return {
        f"validate + render, {len(cells)} cells, in-process": f"{warm['total']:.2f} s ({warm['total'] / GOAL_S:.2f} x the 1 s goal)",
        f"validate / render --check, {len(cells)} cells, CLI": f"{t_validate:.2f} s / {t_check:.2f} s",
        "validate / render --check, shipped matrix, CLI": f"{shipped_validate:.2f} s / {shipped_check:.2f} s",
    }


if __name__ == "__main__":
    main()
