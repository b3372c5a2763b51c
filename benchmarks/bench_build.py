"""Benchmark (not a test): what the layer plan buys when torch_npu is bumped.

Builds, side by side in one run, through the real Docker Engine:

1. ascend-build's NPU image of the Debian 12 / Python 3.11 / torch 2.13.0 cell, cold
   (every step run again, no cache), then again after changing only its torch_npu pin
   (2.13.0 -> 2.13.0rc1, same torch);
2. a hand-written single-stage Dockerfile in the field guide's style (one
   environment, pip installs in one step, no layer plan), cold and after the same
   pin change.

Prints the four build times, the rebuild/cold ratio of each (goal for ascend-build:
<= 5%), the image sizes, the bytes the two ascend-build variants share, and where the
bump's time goes.

CANN itself cannot be downloaded here, so the cell installs synthetic installers of the
vendor's shape (tests/support/cann.py) that weigh nothing: the Dockerfile is the cell's
own (toolkit, chip's package, torch_npu's step as shipped), and the cold build is no
longer for CANN than a build without it. Both builds get the same wheelhouse, CA bundle
and base image, so the comparison is fair.

Run: .venv/bin/python -m benchmarks.bench_build   (needs `make engine` first)
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path
from collections import Counter
from typing import Dict, Iterable, List, Optional, Tuple

from builder import knowledge
from builder.images import lock, matrix, render
from builder.images import stage
from builder.images.plan import lock_inputs
from builder.engine import Engine
from tests.support.cann import installers_91

ROOT = Path(__file__).resolve().parent.parent

BASE = "local/debian:12"
CA = Path("/etc/ssl/certs/ca-certificates.crt")
WHEELHOUSE = Path("/opt/wheels")
CELL_ID = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
CHIP_PACKAGES = {"910b": "Ascend-cann-910b-ops_9.1.0_linux-x86_64.run", "a3": "Ascend-cann-A3-ops_9.1.0_linux-x86_64.run"}

HAND_WRITTEN = """\
FROM {base}
COPY . /workspace
RUN --mount=type=secret,id=ca \\
    apt-get update && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \\
    && python3 -m venv /opt/env \\
    && PIP_CERT=/run/secrets/ca /opt/env/bin/pip install --find-links /workspace/wheelhouse \\
        torch==2.13.0 torch_npu=={torch_npu} numpy pyyaml attrs decorator sympy cffi pathlib2 psutil \\
        protobuf scipy requests absl-py
ENV PATH=/opt/env/bin:$PATH
"""


def on_installers(cell: matrix.Cell, chip: str, folder: Path, sha: Dict[str, str]) -> matrix.Cell:
    """``cell`` for ``chip``, its CANN from the installers in ``folder``."""
    return replace(cell, chip=chip, base_image=BASE, cann_source="local", cann_local=str(folder),
                   sha256=tuple(sorted(sha.items())))


def timed_build(engine: Engine, context: Path, dockerfile: str, log: Path, secrets, cold: bool = False) -> tuple:
    """(image ID, seconds); ``cold``: every step run again (`Engine.build`'s no_cache)."""
    start = time.monotonic()
    image = engine.build(context, dockerfile, secrets=secrets, log_path=log, no_cache=cold)
    return image, time.monotonic() - start


def cell_lock(cell: matrix.Cell) -> lock.Lock:
    """The committed lock when it fits the cell, else one resolved now from the demo cell's
    (a bump is a relock that keeps every other pin)."""
    inputs = lock_inputs(cell, knowledge.load())
    made = lock.read(ROOT / "dockerfiles" / cell.id)
    if made is None or lock.status(made, inputs) != "ok":
        made = lock.resolve(inputs, wheelhouse=WHEELHOUSE if WHEELHOUSE.is_dir() else None,
                            previous=lock.read(ROOT / "dockerfiles" / CELL_ID))
    return made


def ascend_build(engine: Engine, cell: matrix.Cell, work: Path, log: str, made: Optional[lock.Lock] = None,
                 installers: Optional[Path] = None, cold: bool = False) -> tuple:
    """Build the NPU image as `ascend-build image` does, in the context folder of the cell's arch
    and variant; ``made`` is its lock (default: `cell_lock`), ``installers`` a local CANN folder."""
    made = made or cell_lock(cell)
    with stage.claim(work / "contexts", cell.arch, "npu") as folder:
        context = stage.context(render.render_cell(cell, lock=made), folder, WHEELHOUSE if WHEELHOUSE.is_dir() else None,
                                installers)
        with stage.secrets(cell, CA if CA.is_file() else None) as secrets:
            return timed_build(engine, context, "Dockerfile", work / f"{log}.log", secrets, cold)


def hand_written(engine: Engine, torch_npu: str, folder: Path, cold: bool = False) -> tuple:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Dockerfile").write_text(HAND_WRITTEN.format(base=BASE, torch_npu=torch_npu))
    wheels = folder / "wheelhouse"
    if not wheels.exists():
        stage._link_tree(WHEELHOUSE if WHEELHOUSE.is_dir() else None, wheels, "wheelhouse", "*.whl")
    secrets = {"ca": CA} if CA.is_file() else {}
    return timed_build(engine, folder, "Dockerfile", folder.with_suffix(".log"), secrets, cold)


METADATA = tuple(f"{word} " for word in ("ARG", "CMD", "ENTRYPOINT", "ENV", "EXPOSE", "HEALTHCHECK", "LABEL",
                                         "MAINTAINER", "ONBUILD", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR"))


def layers(engine: Engine, image: str) -> List[Tuple[str, int]]:
    """(diffID, bytes) of each layer of ``image``, bottom first. Its layers are its history
    entries but those of instructions that only set metadata, in order (a RUN that changed
    nothing would break that rule: the check says so)."""
    found = engine.client.images.get(image)
    sizes = [h["Size"] for h in reversed(found.history())
             if h["Size"] or not (h["CreatedBy"].startswith(METADATA) or "#(nop)" in h["CreatedBy"])]
    ids = found.attrs["RootFS"]["Layers"]
    if len(sizes) != len(ids):
        raise SystemExit(f"{image}: {len(ids)} layers but {len(sizes)} history entries with bytes")
    return list(zip(ids, sizes))


def shared_bytes(engine: Engine, a: str, b: str) -> int:
    """Bytes of the layers ``b`` has byte for byte in ``a`` too (same diffID): a registry, or a
    node's containerd content store, keeps each such layer once."""
    theirs = Counter(layer for layer, _ in layers(engine, a))
    total = 0
    for layer, size in layers(engine, b):
        if theirs[layer]:
            theirs[layer] -= 1
            total += size
    return total


def step_seconds(log: Path) -> Dict[str, float]:
    """What the bump's build spent where, from BuildKit's plain log: the torch_npu step (uv
    fetches, unpacks and byte-compiles one wheel) and the export of the image's layers."""
    titles, done = {}, {}
    for line in log.read_text().splitlines():
        step, _, rest = line.partition(" ")
        if rest.startswith("[") or rest == "exporting to image":
            titles[step] = rest
        elif rest.startswith("DONE "):
            done[step] = float(rest[5:].rstrip("s"))
    def seconds(marker):
        return sum(done.get(step, 0.0) for step, title in titles.items() if marker in title)
    return {"torch_npu step": seconds("lock.torch_npu.txt"), "export": seconds("exporting to image")}


def let_go(engine: Engine, images: Iterable[str]) -> None:
    """Remove the benchmark's own images, but only those nothing names: the same engine runs the
    test suite and other builds, and a test's deterministic build of the same content has the same
    image ID, which a force-removal by ID would take every tag off. (A cold build runs every step
    again with ``no_cache`` and never empties the shared cache: a ``docker builder prune`` beside a
    running build crashed dockerd 20.10 here.)"""
    for image in set(images):
        engine.remove_if_unnamed(image)


def size(engine: Engine, image: str) -> int:
    return engine.client.images.get(image).attrs["Size"]


def main() -> Dict[str, str]:
    engine = Engine.connect()
    loaded = matrix.load(ROOT / "matrix")
    cell = next(c for c in loaded.cells if c.id == CELL_ID)
    with tempfile.TemporaryDirectory(prefix="ascend-bench-") as tmp:
        work = Path(tmp)
        folder = work / "installers"
        cell = on_installers(cell, "910b", folder, installers_91(folder, CHIP_PACKAGES["910b"]))
        bumped = replace(cell, torch_npu="2.13.0rc1")
        ours_cold_id, ours_cold = ascend_build(engine, cell, work, "ours", installers=folder, cold=True)
        ours_bump_id, ours_bump = ascend_build(engine, bumped, work, "ours-bumped", installers=folder)
        hand_cold_id, hand_cold = hand_written(engine, "2.13.0", work / "hand", cold=True)
        hand_bump_id, hand_bump = hand_written(engine, "2.13.0rc1", work / "hand")

        print(f"{'':34}{'cold build':>12}{'torch_npu bump':>16}{'ratio':>8}{'image size':>14}")
        for name, cold, bump, image in (("ascend-build (layer plan)", ours_cold, ours_bump, ours_cold_id),
                                        ("hand-written single stage", hand_cold, hand_bump, hand_cold_id)):
            print(f"{name:34}{cold:>11.1f}s{bump:>15.1f}s{bump / cold:>7.0%}{size(engine, image) / 1e6:>11.0f} MB")
        shared = shared_bytes(engine, ours_cold_id, ours_bump_id)
        print(f"ascend-build variants (torch_npu 2.13.0 vs 2.13.0rc1) share {shared / 1e6:.0f} MB "
              f"of {size(engine, ours_bump_id) / 1e6:.0f} MB")
        hand_shared = shared_bytes(engine, hand_cold_id, hand_bump_id)
        print(f"hand-written variants share {hand_shared / 1e6:.0f} MB of {size(engine, hand_bump_id) / 1e6:.0f} MB")
        print(f"rebuild speed-up of the layer plan over the single stage: {hand_bump / ours_bump:.1f}x")
        spent = step_seconds(work / "ours-bumped.log")
        floor = sum(spent.values())
        print(f"the bump's {ours_bump:.1f} s: torch_npu step {spent['torch_npu step']:.1f} s (uv fetches, unpacks "
              f"and byte-compiles one wheel), export {spent['export']:.1f} s, the rest {ours_bump - floor:.1f} s; "
              f"those two alone are {floor / ours_cold:.0%} of this cold build")
        ours_size = size(engine, ours_bump_id)
        let_go(engine, (ours_cold_id, ours_bump_id, hand_cold_id, hand_bump_id))
    return {
        "torch_npu bump / cold, ascend-build": f"{ours_bump:.1f} s / {ours_cold:.1f} s = {ours_bump / ours_cold:.0%} "
                                               f"(goal <= 5%; torch_npu step + export alone {floor / ours_cold:.0%})",
        "torch_npu bump / cold, hand-written": f"{hand_bump:.1f} s / {hand_cold:.1f} s = {hand_bump / hand_cold:.0%}",
        "torch_npu variants share": f"{shared / ours_size:.0%} ({shared / 1e6:,.0f} of {ours_size / 1e6:,.0f} MB)",
    }


if __name__ == "__main__":
    main()
