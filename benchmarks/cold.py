"""The images a benchmark built, let go of without taking them from anyone else.

Why: the same engine runs the test suite, other benchmarks and other people's builds. A
force-removal by image ID takes every tag off that image, and a test's deterministic build of the
same content has the same ID. So an image is removed only when nothing names it. (Cold builds
run every step again with `Engine.build`'s ``no_cache``, and never empty the shared cache: a
``docker builder prune`` beside a running build crashed dockerd 20.10 here.)

Run: imported by bench_build, bench_chips and bench_lock.
"""

from __future__ import annotations

from typing import Iterable

from builder.engine import Engine


def let_go(engine: Engine, images: Iterable[str]) -> None:
    """Remove the benchmark's own untagged images, leaving any that something else names (a test's
    build of the same content has the same ID) or uses."""
    for image in set(images):
        engine.remove_if_unnamed(image)
