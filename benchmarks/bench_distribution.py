"""Benchmark (not a test): what distribution moves, and how long it takes over a slow link to the
source. `mirror`'s blob bytes, a pull-through cache's source egress with and without
`mirror --warm`, against N pulls from the source itself, and the layer sizes of real images.

Everything runs against Debian's docker-registry processes of this benchmark's own on loopback (no
auth). The source registry is reached only through a userspace throttling TCP proxy
(tests/support/throttle.py: `RATE` bytes a second each way, shared by every connection, every byte
counted; no `tc` on the shared machine), so the seconds are those of a link of that bandwidth and
the bytes are what crossed it. The images of the mirror and cache parts are **small synthetic
images** pushed through the registry API (tests/support/mirror.py: gzip tar layers of random
bytes, which do not compress): two cells of one CANN are built as the pipeline builds them, the same
CANN layer and the same Python layer, then each its own torch layer and its own top layer.

- mirror (`builder.node.mirror`, in process, registry -> registry): bytes and seconds of the first
  copy of cell A, of a run again of the unchanged selection (goal 0), and when cell B, a sibling of
  the same CANN, is added to the selection (goal: B's own layers only).
- pull-through cache: the distribution registry with `proxy: remoteurl` (the throttle) in front of
  the source; N = 1, 8, 32 nodes pull the image (its manifest, config and layers) at once: from the
  source itself, through a cold cache, and through a cache warmed first (`builder.node.cache_warm`,
  what `mirror SRC CACHE --warm` runs; its bytes and seconds counted). Each with a fresh cache.
- layer sizes of real images (`layer_sizes`): the CPU twins the tests built on this engine, pushed to
  a registry of the benchmark (the engine compresses the layers as any push does), their manifests
  read: the largest layer compressed and uncompressed, and the step that made it; and, from the
  rendered dockerfiles/, which steps two cells of one CANN share.

Run: .venv/bin/python -m benchmarks.bench_distribution   (needs /usr/bin/docker-registry; the layer
sizes need the Docker Engine and a CPU twin on it, and are skipped, saying so, without them)
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from builder.node import cache_warm, mirror
from builder.registry import Registry
from tests.support import mirror as hm
from tests.support.throttle import Throttle

MiB = 1 << 20
GB = 10 ** 9
RATE = 32 * MiB  # bytes a second each way between the source and everything else (about 268 Mb/s)
REPO = "bench/pytorch"
CANN = "8.0.RC3"
# (name, MiB): the layers of the synthetic images, bottom first
SHARED = (("cann-toolkit", 48), ("python", 8))
OWN = {"A": (("torch-2.1", 16),), "B": (("torch-2.4", 16),)}
CACHE_IMAGE = (("base", 16),)
FANOUT = (1, 8, 32)
ROOT = Path(__file__).resolve().parents[1]


def _pull(host: str, repo: str, tag: str) -> int:
    """A node's pull: the manifest, then every blob read to its end; the bytes read."""
    reg = Registry(host)
    manifest = reg.manifest(repo, tag)
    read = 0
    for item in [manifest.data["config"], *manifest.data["layers"]]:
        with reg.open_blob(repo, item["digest"], item["size"]) as stream:
            while chunk := stream.read(1 << 20):
                read += len(chunk)
    return read


def _at_once(host: str, repo: str, tag: str, n: int) -> List[int]:
    results: List[int] = []
    errors: List[BaseException] = []

    def one() -> None:
        try:
            results.append(_pull(host, repo, tag))
        except BaseException as exc:  # noqa: BLE001  (said below, not lost in a thread)
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(900)
    if errors or len(results) != n:
        raise RuntimeError(f"{n} pulls at once: {len(results)} completed; {errors[:1]}")
    return results


def _layers(spec: Sequence[Tuple[str, int]]) -> List[tuple]:
    return [hm.layer(os.urandom(mib * MiB), f"{name}.bin") for name, mib in spec]


def _size(host: str, repo: str, tag: str) -> Tuple[int, List[Tuple[str, int]]]:
    """(bytes of config and layers, [(digest, size) of each layer]) from the manifest."""
    data = Registry(host).manifest(repo, tag).data
    layers = [(x["digest"], x["size"]) for x in data["layers"]]
    return data["config"]["size"] + sum(s for _, s in layers), layers


def _rate(rate: Optional[float]) -> str:
    return f"{rate / MiB:.0f} MiB/s ({rate * 8 / 1e6:.0f} Mb/s)" if rate else "no limit"


# --- mirror ------------------------------------------------------------------------------------------

def bench_mirror(work: Path, rate: Optional[float] = RATE) -> Dict[str, str]:
    source, destination = hm.serve(work / "m-source"), hm.serve(work / "m-destination")
    link = Throttle(source.host, rate)
    try:
        reg = Registry(source.host)
        shared = _layers(SHARED)
        cells = {}
        for cell in ("A", "B"):
            cell_id = f"cann{CANN.lower()}-910b-bench-{cell.lower()}"
            labels = {"io.ascend-build.cell": cell_id, "io.ascend-build.cann": CANN, "io.ascend-build.chip": "910b"}
            hm.push_image(reg, REPO, cell_id, labels, f"top of {cell}".encode(), base=shared + _layers(OWN[cell]))
            cells[cell] = cell_id
        src = mirror.place(f"{link.host}/{REPO}", REPO, create=False)
        dst = mirror.place(f"{destination.host}/{REPO}", REPO, create=True)
        runs = {}
        for what, chosen in (("first", ("A",)), ("again", ("A",)), ("sibling", ("A", "B"))):
            before, started = link.bytes_down, time.monotonic()
            _, figures = mirror.mirror(src, dst, mirror.Selection(cells=tuple(cells[c] for c in chosen)))
            runs[what] = (figures, link.bytes_down - before, time.monotonic() - started)
        size_a, layers_a = _size(source.host, REPO, cells["A"])
        size_b, layers_b = _size(source.host, REPO, cells["B"])
        shared_bytes = sum(s for d, s in layers_a if d in dict(layers_b))
        own_b = size_b - shared_bytes
        largest = max(s for _, s in layers_a + layers_b)
    finally:
        link.stop()
        source.stop()
        destination.stop()
    print(f"mirror registry -> registry, the source behind a {_rate(rate)} link; cell A is {size_a} bytes "
          f"({size_a / MiB:.1f} MiB: config and {len(layers_a)} layers):")
    print(f"  {'':<20} {'blob bytes sent':>15} {'link bytes':>11} {'seconds':>8}")
    for what, label in (("first", "first copy of A"), ("again", "run again"), ("sibling", "+ sibling cell B")):
        figures, crossed, seconds = runs[what]
        print(f"  {label:<20} {figures.bytes_sent:>15} {crossed:>11} {seconds:>8.2f}")
    print(f"  B's own config and layers: {own_b} bytes (B is {size_b} bytes; {shared_bytes} shared with A)")
    print(f"  synthetic layers: largest {largest / MiB:.1f} MiB; the two cells share {shared_bytes / MiB:.1f} MiB "
          f"({100 * shared_bytes / size_b:.0f}% of B)")
    first, again, sibling = runs["first"], runs["again"], runs["sibling"]
    return {
        "mirror first copy (bytes sent, s)": f"{first[0].bytes_sent} (image {size_a}), {first[2]:.2f} s at {_rate(rate)}",
        "mirror run again (bytes sent)": f"{again[0].bytes_sent} (goal 0), {again[2]:.2f} s",
        "mirror + sibling cell (bytes sent)": f"{sibling[0].bytes_sent} (its own layers: {own_b}), {sibling[2]:.2f} s",
        "largest layer / shared by two cells of one CANN": f"{largest / MiB:.1f} MiB / {shared_bytes / MiB:.1f} MiB "
                                                           f"(synthetic images)",
    }


# --- pull-through cache ------------------------------------------------------------------------------

@dataclass
class Run:
    """One row's cell: bytes that crossed the source's link, and seconds (the warm's apart)."""

    crossed: int
    seconds: float
    warm_seconds: float = 0.0
    warm_crossed: int = 0


def _cache_run(work: Path, link: Throttle, n: int, mode: str) -> Run:
    """N pulls at once of the source's `REPO:v1`: "direct" from the source, "cold" through a fresh
    cache, "warm" through a fresh cache `cache_warm.warm` warmed first (counted)."""
    label = f"c{n}{mode}"
    before = link.bytes_down
    if mode == "direct":
        started = time.monotonic()
        _at_once(link.host, REPO, "v1", n)
        return Run(link.bytes_down - before, time.monotonic() - started)
    cache = hm.serve(work / f"{label}-cache", extra=f"proxy: {{remoteurl: 'http://{link.host}'}}\n")
    try:
        warm_seconds, warm_crossed = 0.0, 0
        started = time.monotonic()
        if mode == "warm":
            cache_warm.warm(mirror.place(f"{link.host}/{REPO}", REPO, create=False), Registry(cache.host),
                            mirror.Selection())
            warm_seconds, warm_crossed = time.monotonic() - started, link.bytes_down - before
        _at_once(cache.host, REPO, "v1", n)
        return Run(link.bytes_down - before, time.monotonic() - started, warm_seconds, warm_crossed)
    finally:
        cache.stop()


def bench_cache(work: Path, fanout: Sequence[int] = FANOUT, rate: Optional[float] = RATE) -> Dict[str, str]:
    source = hm.serve(work / "c-source")
    link = Throttle(source.host, rate)
    try:
        hm.push_image(Registry(source.host), REPO, "v1", {}, b"top", base=_layers(CACHE_IMAGE))
        size, _ = _size(source.host, REPO, "v1")
        rows = {n: {mode: _cache_run(work, link, n, mode) for mode in ("direct", "cold", "warm")} for n in fanout}
    finally:
        link.stop()
        source.stop()
    print(f"\npull-through cache (docker-registry 2.8, proxy.remoteurl), N pulls at once of a {size / MiB:.1f} MiB "
          f"image, the source behind a {_rate(rate)} link; source egress in images (bytes that crossed the "
          "link / the image's), seconds to the last pull's end (warm: the warm's seconds, then the pulls'):")
    print(f"  {'N':>3} | {'N from the source':>19} | {'through a cold cache':>30} | "
          f"{'warm, then through the cache':>42}")
    figures = {}
    for n, row in rows.items():
        direct, cold, warm = row["direct"], row["cold"], row["warm"]
        d, c, w = (r.crossed / size for r in (direct, cold, warm))
        print(f"  {n:>3} | {d:>7.2f} {direct.seconds:>9.2f} s | {c:>7.2f} {cold.seconds:>7.2f} s "
              f"({c / d:.2f}x, {cold.seconds / direct.seconds:.2f}x) | {w:>7.2f} {warm.warm_seconds:>5.2f} + "
              f"{warm.seconds - warm.warm_seconds:>5.2f} s ({w / d:.3f}x, {warm.seconds / direct.seconds:.2f}x)")
        print(f"  {'':>3} | {'':>19} | {'':>30} | of which the warm {warm.warm_crossed / size:.2f}, "
              f"the pulls {(warm.crossed - warm.warm_crossed) / size:.3f}")
        figures[f"cache N={n}: source egress direct / cold / warm (images)"] = (
            f"{d:.2f} / {c:.2f} / {w:.2f} (the warm {warm.warm_crossed / size:.2f})")
        figures[f"cache N={n}: seconds direct / cold / warm+pulls"] = (
            f"{direct.seconds:.2f} / {cold.seconds:.2f} / {warm.warm_seconds:.2f}+{warm.seconds - warm.warm_seconds:.2f}"
            f" at {_rate(rate)}")
    print("  (x: the ratio to N pulls from the source: egress, then seconds)")
    return figures


# --- layer sizes of real images ------------------------------------------------------------------------

def _step(created_by: str) -> str:
    """The Dockerfile step a history entry names, short: its instruction and what the command does."""
    text = re.sub(r"\s+", " ", created_by.replace("\\\n", " ")).strip()
    if not text:
        return "(a layer of the base image)"
    text = re.sub(r"^/bin/(ba)?sh -c (#\(nop\) )?", "", text)
    text = re.sub(r"^RUN \|\d+ (\S+=\S* )*", "RUN ", text)
    text = text.replace("/bin/bash -o pipefail -c ", "")
    text = re.sub(r"--mount=\S+ ?", "", text)
    text = re.sub(r"if \[ [^]]*\]; then .*?fi && ", "", text)  # the secrets' and the opt-in's guards
    text = re.sub(r'\w+="\$\{[^}]*\}" && |\w+=\(\) && |"\$\{\w+\[@\]\}" ', "", text)  # defaults, option arrays
    return text.replace(" # buildkit", "")[:100]


def _engine_twins():
    """(engine, [(size, ref, labels)]) of the CPU twins on this engine, largest first; (None, []) without one."""
    try:
        from builder.engine import Engine

        engine = Engine.connect()
        images = engine.client.images.list(filters={"label": "io.ascend-build.variant=cpu"})
    except Exception as exc:  # noqa: BLE001  (no engine here: the part is skipped, saying why)
        print(f"\nlayer sizes of real images: skipped, no Docker Engine ({type(exc).__name__}: {str(exc)[:120]})")
        return None, []
    found = []
    seen_cells = set()
    for image in sorted(images, key=lambda i: -i.attrs.get("Size", 0)):
        labels = image.labels or {}
        cell = labels.get("io.ascend-build.cell")
        if not image.tags or cell in seen_cells:
            continue
        seen_cells.add(cell)
        found.append((image.attrs.get("Size", 0), image.tags[0], labels))
    return engine, found


def layer_sizes(work: Path, limit: int = 1) -> Dict[str, str]:
    """The largest CPU twins on this engine (one a cell, the ``limit`` largest): each layer's sizes and steps."""
    engine, twins = _engine_twins()
    figures: Dict[str, str] = {}
    if engine is not None and not twins:
        print("\nlayer sizes of real images: skipped, no CPU twin on this engine (the engine tests build them)")
    if twins:
        registry = hm.serve(work / "layers-registry")
        try:
            for _, ref, labels in twins[:limit]:
                figures.update(_twin_layers(engine, registry.host, ref, labels))
        finally:
            registry.stop()
    figures.update(_shared_steps())
    return figures


def _twin_layers(engine, host: str, ref: str, labels: Dict[str, str]) -> Dict[str, str]:
    """Push ``ref`` to the registry ``host`` (the engine compresses each layer as any push does), read
    its manifest (compressed sizes) and config (which history step made each layer); the engine's
    history gives each step's uncompressed size."""
    cell = labels.get("io.ascend-build.cell", "?")
    image = engine.client.images.get(ref)
    repository = "bench-distribution/twin"
    copy = f"{host}/{repository}:{cell}"
    engine.tag(image.id, copy)
    try:
        started = time.monotonic()
        engine.push(copy)
        pushed = time.monotonic() - started
    finally:
        engine.untag(copy)  # the benchmark's own name only: the twin keeps its own
    reg = Registry(host)
    manifest = reg.manifest(repository, cell)
    compressed = [x["size"] for x in manifest.data["layers"]]
    steps = reg.config(repository, manifest).get("history") or []  # bottom first, as the layers
    sizes = [h.get("Size", 0) for h in reversed(image.history())]  # the engine's: newest first
    if len(sizes) != len(steps):
        raise RuntimeError(f"{ref}: {len(steps)} steps in its config, {len(sizes)} in the engine's history")
    made = [(step.get("created_by", ""), size) for step, size in zip(steps, sizes) if not step.get("empty_layer")]
    if len(made) != len(compressed):
        raise RuntimeError(f"{ref}: {len(made)} steps made a layer, the manifest has {len(compressed)} layers")
    rows = [(created, size, packed) for (created, size), packed in zip(made, compressed)]
    print(f"\nlayers of the CPU twin {ref} ({image.attrs['Size'] / GB:.2f} GB; pushed to a registry of the "
          f"benchmark in {pushed:.0f} s to read its manifest), bottom first:")
    print(f"  {'uncompressed':>14} {'compressed':>12}  step")
    for created, size, packed in rows:
        print(f"  {size / MiB:>10.1f} MiB {packed / MiB:>8.1f} MiB  {_step(created)}")
    created, size, packed = max(rows, key=lambda r: r[1])
    over = sum(1 for r in rows if r[1] > 2 * GB)
    print(f"  largest: {size / GB:.2f} GB uncompressed, {packed / GB:.2f} GB compressed ({100 * packed / max(1, size):.0f}%), "
          f"{_step(created)[:70]}; layers over 2 GB uncompressed: {over}")
    return {f"largest layer of the CPU twin {cell}": (f"{size / GB:.2f} GB uncompressed / {packed / GB:.2f} GB compressed "
                                                      f"({_step(created)[:60]}); {over} layer(s) over 2 GB")}


_STEP = re.compile(r"^# (\d+)\. (.*)")


def _final_stage_steps(dockerfile: Path) -> List[Tuple[str, str]]:
    """(step heading, its instructions' text) of the final stage, in order; the first is the stage it
    is built FROM (that stage's whole text: the OS step), headed by that stage's own step heading."""
    lines = dockerfile.read_text().splitlines()
    final = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    base = lines[final].split()[1]
    start = next(i for i, line in enumerate(lines) if line.startswith("FROM ") and line.split()[-1] == base)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("FROM ")), final)
    heading = next((m.group(0)[2:] for m in map(_STEP.match, lines[start:end]) if m), f"FROM {base}")
    steps: List[Tuple[str, str]] = [(heading.rstrip("."), "\n".join(lines[start:end]))]
    heading = next((m.group(0)[2:] for m in map(_STEP.match, reversed(lines[:final])) if m), "")
    body: List[str] = []
    for line in lines[final + 1:]:
        found = _STEP.match(line)
        if found:
            steps.append((heading.rstrip("."), "\n".join(body)))
            heading, body = found.group(0)[2:], []
        elif line.strip() and not line.startswith("#") and not line.lstrip().startswith(("LABEL", "io.", "org.")):
            body.append(line)
    steps.append((heading.rstrip("."), "\n".join(body)))
    return steps


def shared_steps(a: Path, b: Path) -> Tuple[List[str], List[str]]:
    """(steps the two rendered cells share, steps from the first that differs on) of their final stage.
    A step is shared when its text and every step before it are the same (a build cache reuses it)."""
    steps_a, steps_b = _final_stage_steps(a), _final_stage_steps(b)
    shared = 0
    while shared < min(len(steps_a), len(steps_b)) and steps_a[shared][1] == steps_b[shared][1]:
        shared += 1
    return [_short(h) for h, _ in steps_a[:shared]], [_short(h) for h, _ in steps_a[shared:]]


def _short(heading: str) -> str:
    """"5. NOT VERIFIED: torch. torch: ..." -> "5. torch"; "2. CANN 8.5.0's toolkit; the ..." -> "2. CANN 8.5.0's toolkit"."""
    number, _, text = heading.partition(". ")
    text = text.replace("NOT VERIFIED: ", "")
    return f"{number}. {re.split(r'[.;:,]( |$)', text)[0]}"


def _shared_steps() -> Dict[str, str]:
    """For each pair of rendered cells of one CANN, OS and arch: the steps they share."""
    folders = sorted(p for p in (ROOT / "dockerfiles").iterdir() if (p / "Dockerfile").is_file())
    groups: Dict[Tuple[str, ...], List[Path]] = {}
    for folder in folders:
        cann, chip, rest = folder.name.split("-", 2)
        groups.setdefault((cann, rest), []).append(folder)
    figures = {}
    print("\nrendered cells of one CANN (dockerfiles/), NPU images: the steps of the final stage two cells share "
          "(the same text after the same steps: one build cache makes them the same layers):")
    for (cann, _), pair in groups.items():
        if len(pair) < 2:
            continue
        shared, own = shared_steps(pair[0] / "Dockerfile", pair[1] / "Dockerfile")
        chips = [p.name.split("-")[1] for p in pair[:2]]
        names = " and ".join(chips)
        print(f"  {cann}-{{{names}}}-{pair[0].name.split('-', 2)[2]}:\n"
              f"    shared: {'; '.join(shared)}\n    own:    {'; '.join(own)}")
        figures[f"steps two cells of {cann} share ({names}, {pair[0].name.rsplit('-', 1)[1]})"] = f"{len(shared)} shared, {len(own)} own (from {own[0]})" \
            if own else f"{len(shared)} shared"
    return figures


def main(fanout: Sequence[int] = FANOUT, rate: Optional[float] = RATE, real_layers: bool = True) -> Dict[str, str]:
    if not Path(hm.REGISTRY_BIN).exists():
        raise SystemExit(f"{hm.REGISTRY_BIN} missing: run scripts/setup-engine.sh as root")
    work = Path(tempfile.mkdtemp(prefix="bench-distribution-"))
    try:
        figures = bench_mirror(work, rate)
        figures.update(bench_cache(work, fanout, rate))
        if real_layers:
            figures.update(layer_sizes(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return figures


if __name__ == "__main__":
    main()
