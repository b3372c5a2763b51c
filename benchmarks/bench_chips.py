"""Benchmark (not a test): the bytes the 910b and A3 images of one cell share.

Builds the demo cell's NPU image (CANN 9.1.0, Debian 12, Python 3.11, torch 2.13.0) for both
chips through the real Docker Engine, from its committed lock. CANN comes from synthetic
installers of the vendor's shape (tests/support/cann.py): no CANN installer can be
downloaded here, so what they weigh is a stand-in, printed beside the result (a toolkit of
TOOLKIT_MB and a chip package of CHIP_MB of random bytes, which no layer compresses away).

Prints each image's size, the bytes the two share (their layers of the same diffID), what
each has of its own, and the share. Everything below the chip's package is shared, and so
is torch_npu's layer above it (built to be the same bytes on every chip, see the template).

Run: .venv/bin/python -m benchmarks.bench_chips   (needs `make engine` first)
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Dict

from benchmarks.bench_build import CELL_ID, CHIP_PACKAGES, ascend_build, let_go, on_installers, shared_bytes, size
from builder.images import lock, matrix
from builder.engine import Engine
from tests.support.cann import installers_91

ROOT = Path(__file__).resolve().parent.parent

TOOLKIT_MB, CHIP_MB = 1024, 256


def main() -> Dict[str, str]:
    engine = Engine.connect()
    demo = next(c for c in matrix.load(ROOT / "matrix").cells if c.id == CELL_ID)
    made = lock.read(ROOT / "dockerfiles" / CELL_ID)
    with tempfile.TemporaryDirectory(prefix="ascend-bench-chips-") as tmp:
        work = Path(tmp)
        folder = work / "installers"
        sha = installers_91(folder, *CHIP_PACKAGES.values(), toolkit_mb=TOOLKIT_MB, chip_mb=CHIP_MB)
        images = {}
        for chip in CHIP_PACKAGES:
            cell = on_installers(replace(demo, id=f"bench-chips-{chip}"), chip, folder, sha)
            images[chip], seconds = ascend_build(engine, cell, work, chip, made, folder)
            print(f"{chip:5} image built in {seconds:6.1f} s: {size(engine, images[chip]) / 1e6:,.0f} MB")
        shared = shared_bytes(engine, images["910b"], images["a3"])
        sizes = {chip: size(engine, image) for chip, image in images.items()}
        share = shared / max(sizes.values())
        print(f"the 910b and A3 images share {shared / 1e6:,.0f} MB: {share:.0%} of the larger "
              f"({max(sizes.values()) / 1e6:,.0f} MB); each has {(sizes['a3'] - shared) / 1e6:,.0f} MB of its own")
        print(f"  (stand-in weights: toolkit {TOOLKIT_MB} MiB, chip package {CHIP_MB} MiB; goal: >= 90% shared)")
        let_go(engine, images.values())
    return {"chip images share": f"{share:.0%} ({shared / 1e6:,.0f} of {max(sizes.values()) / 1e6:,.0f} MB)"}


if __name__ == "__main__":
    main()
