"""Benchmark (not a test): what distribution moves. `mirror`'s blob bytes, a pull-through cache's
source egress, and the layer sizes the manifests give, on loopback.

Everything runs against Debian's docker-registry processes of this benchmark's own on loopback (no
auth), with **small synthetic images** pushed through the registry API (tests/support/mirror.py:
gzip tar layers of random bytes, which do not compress, so a layer's size is what it holds). Two
cells of one CANN are built as the pipeline builds them: the same CANN layer and the same Python
layer, then each its own torch layer and its own top layer.

- mirror (`builder.node.mirror`, in process, registry -> registry): blob bytes sent on the first
  copy of cell A, on a run again of the unchanged selection (goal 0), and when cell B, a sibling of
  the same CANN, is added to the selection (goal: B's own layers only).
- pull-through cache: the distribution registry with `proxy: remoteurl` in front of the source;
  N = 1, 8, 32 nodes pull the image (its manifest, config and layers) at once through the cache;
  the source's blob GETs and bytes written are read from its log (level info). Side by side: N
  full pulls from the source itself (N times the image). Then the same with a prefetch: one pull
  through the cache first, then N at once.
- layer sizes, from the manifests: the largest layer, and the bytes the two cells share.

Times are not reported: on loopback with no bandwidth limit they say nothing of a network.

Run: .venv/bin/python -m benchmarks.bench_distribution   (needs /usr/bin/docker-registry)
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from builder.node import mirror
from builder.registry import Registry
from tests.support import mirror as hm

MiB = 1 << 20
REPO = "bench/pytorch"
CANN = "8.0.RC3"
# (name, MiB): the layers of the synthetic images, bottom first
SHARED = (("cann-toolkit", 48), ("python", 8))
OWN = {"A": (("torch-2.1", 16),), "B": (("torch-2.4", 16),)}
CACHE_IMAGE = (("base", 16),)
FANOUT = (1, 8, 32)
RANGE = "bytes=0-0"
PREFETCH = {"": "none", "pull": "one whole pull through the cache",
            "touch": f"each blob's first byte asked of the cache ({RANGE}), then a wait until it stored the blob"}


def _gets(served: hm.Served) -> Tuple[int, int]:
    """(blob GET requests, bytes the registry wrote answering them), from its log."""
    count = written = 0
    for line in served.log().splitlines():
        if "response completed" not in line or "http.request.method=GET" not in line or "/blobs/sha256:" not in line:
            continue
        count += 1
        found = re.search(r"http\.response\.written=(\d+)", line)
        written += int(found.group(1)) if found else 0
    return count, written


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


def _touch(host: str, repo: str, tag: str, storage: Path) -> None:
    """A prefetch that costs the source one copy: ask the cache for each blob's first byte only (the
    cache's own fetch into its storage is whole; the one it streams to this client stops), then
    wait until the cache's storage holds every blob. Waiting reads the cache's folder: this
    benchmark runs the cache; a deployment would retry a HEAD or wait."""
    manifest = Registry(host).manifest(repo, tag)
    items = [manifest.data["config"], *manifest.data["layers"]]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for item in items:
        request = urllib.request.Request(f"http://{host}/v2/{repo}/blobs/{item['digest']}", headers={"Range": RANGE})
        with opener.open(request, timeout=60) as answer:
            answer.read(1)
    for item in items:
        hexa = item["digest"].split(":", 1)[1]
        data = storage / "docker/registry/v2/blobs/sha256" / hexa[:2] / hexa / "data"
        for _ in range(600):
            if data.exists() and data.stat().st_size == item["size"]:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"the cache did not store {item['digest']} within 60 s")


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
        thread.join(600)
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


def bench_mirror(work: Path) -> Dict[str, str]:
    source, destination = hm.serve(work / "m-source"), hm.serve(work / "m-destination")
    try:
        reg = Registry(source.host)
        shared = _layers(SHARED)
        cells = {}
        for cell in ("A", "B"):
            cell_id = f"cann{CANN.lower()}-910b-bench-{cell.lower()}"
            labels = {"io.ascend-build.cell": cell_id, "io.ascend-build.cann": CANN, "io.ascend-build.chip": "910b"}
            hm.push_image(reg, REPO, cell_id, labels, f"top of {cell}".encode(), base=shared + _layers(OWN[cell]))
            cells[cell] = cell_id
        src = mirror.place(f"{source.host}/{REPO}", REPO, create=False)
        dst = mirror.place(f"{destination.host}/{REPO}", REPO, create=True)
        runs = {}
        for what, chosen in (("first", ("A",)), ("again", ("A",)), ("sibling", ("A", "B"))):
            _, figures = mirror.mirror(src, dst, mirror.Selection(cells=tuple(cells[c] for c in chosen)))
            runs[what] = figures
        size_a, layers_a = _size(source.host, REPO, cells["A"])
        size_b, layers_b = _size(source.host, REPO, cells["B"])
        shared_bytes = sum(s for d, s in layers_a if d in dict(layers_b))
        own_b = size_b - shared_bytes
        largest = max(s for _, s in layers_a + layers_b)
    finally:
        source.stop()
        destination.stop()
    print(f"mirror, cell A ({size_a / MiB:.1f} MiB: config and {len(layers_a)} layers):")
    print(f"  first copy:        {runs['first'].bytes_sent:>11} bytes sent ({runs['first'].blobs_sent} blobs)")
    print(f"  run again:         {runs['again'].bytes_sent:>11} bytes sent, {runs['again'].blobs_there} blobs already there")
    print(f"  + sibling cell B:  {runs['sibling'].bytes_sent:>11} bytes sent; B's own config and layers: {own_b} bytes "
          f"(B is {size_b} bytes; {shared_bytes} shared with A)")
    print(f"layers: largest {largest / MiB:.1f} MiB; two cells of CANN {CANN} share {shared_bytes / MiB:.1f} MiB "
          f"({100 * shared_bytes / size_b:.0f}% of B)")
    return {
        "mirror first copy (bytes sent)": f"{runs['first'].bytes_sent} (image {size_a})",
        "mirror run again (bytes sent)": f"{runs['again'].bytes_sent} (goal 0)",
        "mirror + sibling cell (bytes sent)": f"{runs['sibling'].bytes_sent} (its own layers: {own_b})",
        "largest layer / shared by two cells of one CANN": f"{largest / MiB:.1f} MiB / {shared_bytes / MiB:.1f} MiB "
                                                           f"(synthetic images)",
    }


def _cache_run(work: Path, n: int, prefetch: str) -> Tuple[int, int, int, int]:
    """(source blob GETs, source bytes, blobs, image bytes) for N pulls at once through a fresh cache."""
    label = f"c{n}{prefetch}"
    source = hm.serve(work / f"{label}-source")
    cache = hm.serve(work / f"{label}-cache", extra=f"proxy: {{remoteurl: 'http://{source.host}'}}\n")
    try:
        hm.push_image(Registry(source.host), REPO, "v1", {}, b"top", base=_layers(CACHE_IMAGE))
        size, layers = _size(source.host, REPO, "v1")
        base = _gets(source)
        if prefetch == "pull":
            assert _pull(cache.host, REPO, "v1") == size
        elif prefetch == "touch":
            _touch(cache.host, REPO, "v1", cache.root / "data")
        got = _at_once(cache.host, REPO, "v1", n)
        assert set(got) == {size}, got
        count, written = _gets(source)
        return count - base[0], written - base[1], len(layers) + 1, size
    finally:
        cache.stop()
        source.stop()


def bench_cache(work: Path, fanout: Sequence[int]) -> Dict[str, str]:
    figures = {}
    print("\npull-through cache (docker-registry, proxy.remoteurl), N pulls at once through a fresh cache:")
    print(f"  {'N':>3}  {'source blob GETs':>18}  {'source bytes':>12}  {'= images':>8}  {'N pulls from the source':>23}")
    for prefetch in PREFETCH:
        if prefetch:
            print(f"  after a prefetch, {PREFETCH[prefetch]}, then N at once (the prefetch counted):")
        for n in fanout:
            gets, written, blobs, size = _cache_run(work, n, prefetch)
            copies = written / size
            print(f"  {n:>3}  {gets:>5} ({gets / blobs:.1f} a blob)  {written:>12}  {copies:>8.2f}  {n * size:>14} ({n} images)")
            figures[f"cache source egress, N={n}{', prefetch: ' + prefetch if prefetch else ''}"] = (
                f"{copies:.2f} images ({written / MiB:.1f} MiB, {gets} blob GETs) vs {n} pulling from the source")
    return figures


def main(fanout: Sequence[int] = FANOUT) -> Dict[str, str]:
    if not Path(hm.REGISTRY_BIN).exists():
        raise SystemExit(f"{hm.REGISTRY_BIN} missing: run scripts/setup-engine.sh as root")
    work = Path(tempfile.mkdtemp(prefix="bench-distribution-"))
    try:
        figures = bench_mirror(work)
        figures.update(bench_cache(work, fanout))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return figures


if __name__ == "__main__":
    main()
