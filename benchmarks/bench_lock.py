"""Benchmark (not a test): what the lock costs and what it buys.

1. `lock` for the whole shipped matrix, from nothing (uv runs without a cache: see
   `lock._compile`), and the bytes it leaves in uv's default cache (none expected).
2. Reproducibility: the demo cell's CPU twin built twice from its committed lock, each
   with every step run again (no cache: two cold builds, as if days apart), then the
   distributions installed in each image listed and compared with each other and
   with the lock.

Prints the lock time, the per-cell mean, what uv's cache grew by, and for the two builds: identical closures
(yes/no), the count of distributions, equal to the lock (yes/no), and each build time.

Run: .venv/bin/python -m benchmarks.bench_lock   (needs `make engine`)
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict

from benchmarks.bench_build import let_go
from builder import knowledge
from builder.images import lock, matrix, relock, render, stage
from builder.engine import Engine

ROOT = Path(__file__).resolve().parent.parent

BASE = "local/debian:12"
CA = Path("/etc/ssl/certs/ca-certificates.crt")
WHEELHOUSE = Path("/opt/wheels")
CELL_ID = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
LIST = ("import json, sys, importlib.metadata as m, os\n"
        "root = os.path.realpath(sys.prefix) + os.sep\n"
        "print(json.dumps(sorted((d.metadata['Name'].lower().replace('_', '-'), d.version) "
        "for d in m.distributions() if os.path.realpath(str(d.locate_file(''))).startswith(root))))")


def time_lock(cells) -> float:
    with tempfile.TemporaryDirectory(prefix="ascend-bench-lock-") as out:
        start = time.monotonic()
        rows = relock.run(cells, knowledge.load(), Path(out), wheelhouse=WHEELHOUSE if WHEELHOUSE.is_dir() else None)
        seconds = time.monotonic() - start
    failed = [r.cell for r in rows if r.state == "failed"]
    if failed:
        raise SystemExit(f"lock failed for {failed}")
    return seconds


def du(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def build_twin(engine: Engine, cell, made: lock.Lock, folder: Path) -> tuple:
    context = stage.context(render.render_cell(cell, lock=made), folder, WHEELHOUSE if WHEELHOUSE.is_dir() else None)
    with stage.secrets(cell, CA if CA.is_file() else None) as secrets:
        start = time.monotonic()
        image = engine.build(context, "Dockerfile.cpu", secrets=secrets, log_path=folder.with_suffix(".log"),
                             no_cache=True)
        seconds = time.monotonic() - start
    listed = engine.run(image, ["python", "-c", LIST], timeout=120)
    return image, seconds, [tuple(pair) for pair in json.loads(listed.stdout.strip().splitlines()[-1])]


def main() -> Dict[str, str]:
    cells = matrix.load(ROOT / "matrix").cells
    cache = Path(os.environ.get("UV_CACHE_DIR") or Path.home() / ".cache" / "uv")
    before = du(cache)
    seconds = time_lock(cells)
    grew = du(cache) - before
    print(f"lock of the shipped matrix ({len(cells)} cells, 4 at a time):")
    print(f"  {seconds:7.1f} s  ({seconds / len(cells):.1f} s a cell); uv's cache grew by {grew / 1e6:.1f} MB")

    engine = Engine.connect()
    cell = replace(next(c for c in cells if c.id == CELL_ID), base_image=BASE)
    made = lock.read(ROOT / "dockerfiles" / CELL_ID)
    if made is None:
        raise SystemExit(f"no lock in dockerfiles/{CELL_ID}: make it with `ascend-build lock --cell {CELL_ID}`")
    expected = sorted((e.name, e.version) for e in made.without("torch-npu"))
    with tempfile.TemporaryDirectory(prefix="ascend-bench-repro-") as tmp:
        runs = []
        for n in (1, 2):
            runs.append(build_twin(engine, cell, made, Path(tmp) / f"build{n}"))
        (first_id, first_s, first), (second_id, second_s, second) = runs
        print("demo twin built twice from its lock, every step run again (no cache):")
        print(f"  build times          {first_s:.1f} s, {second_s:.1f} s")
        print(f"  identical closures   {'yes' if first == second else 'no'} ({len(first)} and {len(second)} distributions)")
        print(f"  equal to the lock    {'yes' if first == expected and second == expected else 'no'} "
              f"({len(expected)} locked, torch_npu aside)")
        if first != second or first != expected:
            print(f"  differences: {sorted(set(first) ^ set(second) ^ set(expected))}")
        let_go(engine, (first_id, second_id))
    return {"lock of the shipped matrix (uv's cache grew by)": f"{seconds:.1f} s ({grew / 1e6:.1f} MB)",
            "twin closure rebuilt from its lock": "identical, equal to the lock" if first == second == expected
            else "DIFFERS"}


if __name__ == "__main__":
    main()
