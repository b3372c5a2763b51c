"""`make bench`: every benchmark in one run, then their headline figures side by side.

Each benchmark prints its own table as it goes and returns its headline figures; this
prints them together at the end, measured in this one run.

Run: .venv/bin/python benchmarks/run_all.py   (needs `make engine` first; prunes the BuildKit cache)
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

BENCHMARKS = ("bench_validate_render", "bench_build", "bench_chips", "bench_verdict", "bench_lock", "bench_arm64",
              "bench_hostile", "bench_faults", "bench_attest", "trace_cell_path")


def main() -> None:
    rows = []
    for name in BENCHMARKS:
        print(f"\n== {name}", flush=True)
        start = time.monotonic()
        figures = importlib.import_module(name).main()
        rows += [(name, what, value) for what, value in figures.items()]
        print(f"({name}: {time.monotonic() - start:.0f} s)", flush=True)
    width = max(len(what) for _, what, _ in rows)
    print("\n== summary (this run)")
    for name, what, value in rows:
        print(f"{what:<{width}}  {value}")


if __name__ == "__main__":
    main()
