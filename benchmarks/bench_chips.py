"""Benchmark (not a test): the bytes the 910b and A3 images of one cell share.

Builds the demo cell's NPU image (CANN 9.1.0, Debian 12, Python 3.11, torch 2.13.0) for both
chips through the real Docker Engine, from its committed lock. CANN comes from synthetic
installers of the vendor's shape (tests/helpers_cann.py): no CANN installer can be
downloaded here, so what they weigh is a stand-in, printed beside the result (a toolkit of
TOOLKIT_MB and a chip package of CHIP_MB of random bytes, which no layer compresses away).

Prints each image's size, the bytes the two share (their layers of the same diffID), what
each has of its own, and the share. The layer order decides it: everything but the chip's
package and torch_npu (above it, so a torch_npu bump rebuilds one layer) is shared.

Run: .venv/bin/python benchmarks/bench_chips.py   (needs `make engine` first)
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from hashlib import sha256
from pathlib import Path
from typing import Dict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_build import BASE, CELL_ID, ascend_build, shared_bytes, size  # noqa: E402
from builder.build import lock, matrix  # noqa: E402
from builder.engine import Engine  # noqa: E402
from helpers_cann import synthetic_run  # noqa: E402

HOME = "/usr/local/Ascend/cann-9.1.0"
TOOLKIT_MB, CHIP_MB = 1024, 256
PACKAGES = {"910b": "Ascend-cann-910b-ops_9.1.0_linux-x86_64.run", "a3": "Ascend-cann-A3-ops_9.1.0_linux-x86_64.run"}
TOOLKIT = "Ascend-cann-toolkit_9.1.0_linux-x86_64.run"


def installers(folder: Path) -> Dict[str, str]:
    """The synthetic toolkit and both chips' packages in ``folder``; their sha256 by name."""
    folder.mkdir(parents=True, exist_ok=True)
    made = {TOOLKIT: synthetic_run(TOOLKIT, HOME, "9.1.0", payload_mb=TOOLKIT_MB)}
    made.update({name: synthetic_run(name, HOME, "9.1.0", payload_mb=CHIP_MB) for name in PACKAGES.values()})
    for name, data in made.items():
        (folder / name).write_bytes(data)
    return {name: sha256(data).hexdigest() for name, data in made.items()}


def main() -> Dict[str, str]:
    engine = Engine.connect()
    demo = next(c for c in matrix.load(ROOT / "matrix").cells if c.id == CELL_ID)
    made = lock.read(ROOT / "dockerfiles" / CELL_ID)
    with tempfile.TemporaryDirectory(prefix="ascend-bench-chips-") as tmp:
        work = Path(tmp)
        sha = installers(work / "installers")
        images = {}
        for chip in PACKAGES:
            cell = replace(demo, id=f"bench-chips-{chip}", chip=chip, base_image=BASE, cann_source="local",
                           cann_local=str(work / "installers"), sha256=tuple(sorted(sha.items())))
            images[chip], seconds = ascend_build(engine, cell, work, chip, made, work / "installers")
            print(f"{chip:5} image built in {seconds:6.1f} s: {size(engine, images[chip]) / 1e6:,.0f} MB")
        shared = shared_bytes(engine, images["910b"], images["a3"])
        sizes = {chip: size(engine, image) for chip, image in images.items()}
        share = shared / max(sizes.values())
        print(f"the 910b and A3 images share {shared / 1e6:,.0f} MB: {share:.0%} of the larger "
              f"({max(sizes.values()) / 1e6:,.0f} MB); each has {(sizes['a3'] - shared) / 1e6:,.0f} MB of its own")
        print(f"  (stand-in weights: toolkit {TOOLKIT_MB} MiB, chip package {CHIP_MB} MiB; goal: >= 90% shared)")
        for image in images.values():
            engine.remove(image, force=True)
    return {"chip images share": f"{share:.0%} ({shared / 1e6:,.0f} of {max(sizes.values()) / 1e6:,.0f} MB)"}


if __name__ == "__main__":
    main()
