"""How long do validate + render take for a 1,000-cell matrix? The goal is under 0.5 s in process.

Generates 1,000 cells (unique names) from the valid combinations of the shipped matrix:
each shipped cell's CANN / torch_npu / OS / env, crossed with both arches, the chips
its CANN supports with known installers, and every Python its torch_npu has a wheel
for (venv cells keep their OS's Python). Every generated cell passes `checks`.

Then it times, in one process (best of 3, and the first, cold run):
    matrix.load + checks.check + render.render_all
and, as subprocesses (wall time, interpreter start included):
    ascend-build validate --matrix M
    ascend-build render --matrix M --out DIR      (first write, then an unchanged re-run)

With ``--vs COMMIT``, render at scale instead, this tree beside another commit in one run:
it checks COMMIT out into a temporary `git worktree` and generates one matrix of N cells (the
same generator). Then, for both trees in turn (this, that; then that, this; ...), each in a process of its own started in its tree
(so it imports that tree's `builder`):

* first write: ``ascend-build render --matrix M --out DIR`` into a DIR that does not exist
  yet, wall time, interpreter start included (the disk is synced before each, untimed, so
  neither tree pays for the other's leftovers);
* in-process: ``matrix.load + checks.check + render.render_all`` of M, best of 3 after a
  cold run, in one process;
* once a pair, the floor: the files of the first write made again bare (created, written,
  closed; no temporary name, no check, no flush): what the disk alone costs at that moment.

Prints every run with the load average beside it, then per tree the median and the minimum,
and the ratio this / that (the median of the ratios of each pair of runs, which keeps it
meaningful when the machine's speed drifts).

Run: .venv/bin/python -m benchmarks.bench_validate_render [--cells N] [--keep DIR]
     .venv/bin/python -m benchmarks.bench_validate_render --vs COMMIT [--cells N] [--runs 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from builder.images import checks, matrix
from builder.images import render
from tests.support.generated_matrix import _cell, _yaml, combinations

REPO = Path(__file__).resolve().parent.parent

GOAL_S = 0.5      # validate + render of 1,000 cells, in one process
CLI_GOAL_S = 1.0  # each command, interpreter start included


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


GENERATE = """
import itertools, sys
from tests.support.generated_matrix import _cell, _yaml, combinations
combos = combinations()
cells = [_cell(i, combo) for i, combo in zip(range(int(sys.argv[2])), itertools.cycle(combos))]
open(sys.argv[1], "w").write(_yaml(cells))
"""

CLI = "import sys; from builder.cli import main; sys.argv[0] = 'ascend-build'; main()"

IN_PROCESS = """
import json, sys, time
from pathlib import Path
from builder.images import checks, matrix, render
def once():
    start = time.perf_counter()
    loaded = matrix.load(Path(sys.argv[1]))
    findings = loaded.findings + checks.check(loaded.cells)
    rendered = render.render_all(loaded.cells)
    took = time.perf_counter() - start
    assert not [f for f in findings if f.severity == "error"], findings[:3]
    return took, sum(len(files) for files in rendered.values())
runs = [once() for _ in range(4)]
print(json.dumps({"cold": runs[0][0], "best": min(t for t, _ in runs[1:]), "files": runs[0][1]}))
"""


def _run(tree: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, *args], cwd=tree, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"in {tree}: {' '.join(args[:3])} ... failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done


def first_write(tree: Path, matrix_file: Path, out: Path) -> float:
    """Seconds of ``ascend-build render`` into ``out`` (made afresh) with ``tree``'s code."""
    shutil.rmtree(out, ignore_errors=True)
    os.sync()  # the removal and the last run's writes on disk before the clock starts
    start = time.perf_counter()
    _run(tree, "-c", CLI, "render", "--matrix", str(matrix_file), "--out", str(out))
    took = time.perf_counter() - start
    files = sum(1 for p in out.rglob("*") if p.is_file())
    print(f"  {tree.name:>12}: first write {took:7.2f} s ({files} files){_load()}", flush=True)
    return took


def _load() -> str:
    """The 1-minute load average, said beside each run: the machine is shared."""
    return f"  [load {os.getloadavg()[0]:.1f}]"


def floor(out: Path) -> float:
    """Seconds to make ``out``'s folders and files again, the same sizes, bare: each created,
    written and closed, no temporary name, no check, no flush. What this disk asks for those
    files now, whatever a render does on top (the yardstick of both trees' first write)."""
    sizes = {p.relative_to(out): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}
    shutil.rmtree(out)
    os.sync()
    start = time.perf_counter()
    out.mkdir()
    for folder in sorted({path.parent for path in sizes} - {Path(".")}):
        (out / folder).mkdir()
    for path, size in sizes.items():
        fd = os.open(out / path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        os.write(fd, b"x" * size)
        os.close(fd)
    took = time.perf_counter() - start
    shutil.rmtree(out)
    print(f"  {'bare':>12}: {len(sizes)} files created and written {took:7.2f} s{_load()}", flush=True)
    return took


def in_process_of(tree: Path, matrix_file: Path) -> float:
    """Best of 3 of load + check + render_all in one process with ``tree``'s code."""
    figures = json.loads(_run(tree, "-c", IN_PROCESS, str(matrix_file)).stdout.strip().splitlines()[-1])
    print(f"  {tree.name:>12}: in-process  {figures['best']:7.3f} s best of 3 (cold {figures['cold']:.3f} s, "
          f"{figures['files']} files){_load()}", flush=True)
    return figures["best"]


def side_by_side(vs: str, cells: int, runs: int) -> Dict[str, str]:
    """This tree beside commit ``vs`` (see `--vs` in the module docstring)."""
    commit = subprocess.run(["git", "rev-parse", "--short", vs], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="ascend-bench-vs-") as folder:
        work = Path(folder)
        that = work / commit
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(that), commit], cwd=REPO, check=True)
        try:
            matrix_file = work / "matrix.yaml"
            _run(REPO, "-c", GENERATE, str(matrix_file), str(cells))
            print(f"this tree: {REPO}; that: {vs} ({commit}), checked out in {that}")
            print(f"matrix: {cells} cells, {matrix_file.stat().st_size / 1024:.0f} KiB")
            trees = {"this": REPO, "that": that}
            writes: Dict[str, List[float]] = {"this": [], "that": []}
            inproc: Dict[str, List[float]] = {"this": [], "that": []}
            bare: List[float] = []
            for n in range(runs):
                order = ("this", "that") if n % 2 == 0 else ("that", "this")
                print(f"pair {n + 1} of {runs} ({' then '.join(order)}):", flush=True)
                for name in order:
                    writes[name].append(first_write(trees[name], matrix_file, work / "out"))
                    if name == order[0]:
                        bare.append(floor(work / "out"))
                shutil.rmtree(work / "out")
                for name in order:
                    inproc[name].append(in_process_of(trees[name], matrix_file))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(that)], cwd=REPO, check=False)

    def ratio(figures: Dict[str, List[float]]) -> float:
        return statistics.median(a / b for a, b in zip(figures["this"], figures["that"]))

    rows = {}
    for what, figures, digits in (("render, first write", writes, 2), ("validate + render, in-process", inproc, 3)):
        here, there = statistics.median(figures["this"]), statistics.median(figures["that"])
        line = (f"{here:.{digits}f} s here vs {there:.{digits}f} s at {commit} (x {ratio(figures):.2f}); "
                f"min {min(figures['this']):.{digits}f} s vs {min(figures['that']):.{digits}f} s")
        rows[f"{what}, {cells} cells"] = line
        print(f"{what} ({cells} cells, median of {runs}): {line}")
    rows["the same files created bare (the disk's floor)"] = f"{statistics.median(bare):.2f} s (min {min(bare):.2f} s)"
    print(f"the same files created bare, no render (median of {runs}): {statistics.median(bare):.2f} s, "
          f"min {min(bare):.2f} s")
    loads = os.getloadavg()
    rows["load average at the end (1, 5, 15 min)"] = ", ".join(f"{x:.1f}" for x in loads)
    print(f"load average at the end (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in loads)}")
    return rows


def main() -> Dict[str, str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument("--keep", type=Path, help="write the generated matrix here too")
    parser.add_argument("--vs", metavar="COMMIT", help="instead: render at scale, this tree beside COMMIT (see above)")
    parser.add_argument("--runs", type=int, default=3, help="with --vs: pairs of runs of each measure")
    args = parser.parse_args(sys.argv[1:] if __name__ == "__main__" else [])
    if args.vs:
        return side_by_side(args.vs, args.cells, args.runs)

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
              f"({warm['files']} files)  -> {warm['total'] / GOAL_S:.2f} x the {GOAL_S} s goal")

        out = Path(folder) / "out"
        t_validate = min(wall("validate", "--matrix", path) for _ in range(3))
        t_render_first = wall("render", "--matrix", path, "--out", out)
        t_render_again = min(wall("render", "--matrix", path, "--out", out) for _ in range(2))
        t_check = min(wall("render", "--check", "--matrix", path, "--out", out) for _ in range(2))
        print(f"CLI wall: validate {t_validate:.3f} s ({t_validate / CLI_GOAL_S:.2f} x its {CLI_GOAL_S} s goal); "
              f"render {t_render_first:.3f} s first write, {t_render_again:.3f} s unchanged "
              f"({t_render_again / CLI_GOAL_S:.2f} x its goal); render --check {t_check:.3f} s")
        shipped_validate = min(wall("validate", "--matrix", REPO / "matrix") for _ in range(3))
        shipped_check = min(wall("render", "--check", "--matrix", REPO / "matrix", "--out", REPO / "dockerfiles")
                            for _ in range(3))
        print(f"shipped matrix, CLI wall: validate {shipped_validate:.3f} s; render --check {shipped_check:.3f} s")
    return {
        f"validate + render, {len(cells)} cells, in-process": f"{warm['total']:.2f} s ({warm['total'] / GOAL_S:.2f} x the {GOAL_S} s goal)",
        f"validate / render --check, {len(cells)} cells, CLI": f"{t_validate:.2f} s / {t_check:.2f} s",
        "validate / render --check, shipped matrix, CLI": f"{shipped_validate:.2f} s / {shipped_check:.2f} s",
    }


if __name__ == "__main__":
    main()
