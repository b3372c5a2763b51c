"""What the lazy-variant tests and bench_lazy share: a small image of real files put through the
registry API (no Docker Engine), a registry of their own whose storage they can see, and a validated
image with its eStargz variant made without ctr-remote (`fixture_pair`: the variant's layer is the one
ctr-remote made for tests/fixtures/estargz)."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

from builder import estargz
from builder.registry import OCI_MANIFEST, Registry
from builder.trust import variant
from tests.support.loopback_registry import free_port, serve_registry, stop, wait_up

LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG = "application/vnd.oci.image.config.v1+json"
ESTARGZ = Path(__file__).resolve().parents[1] / "fixtures" / "estargz"


def layer_tar(files: Dict[str, bytes], links: Optional[Dict[str, str]] = None) -> bytes:
    """A layer tar of ``files`` (path -> content, mode 0755) and symbolic ``links`` (path -> target),
    with an entry for every parent folder, as an image's layer has them (eStargz's prioritizing
    moves a file with its parents: without them it finds none)."""
    folders = sorted({str(p) for path in [*files, *(links or {})] for p in Path(path).parents if str(p) != "."})
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in folders:
            info = tarfile.TarInfo(folder + "/")
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for path, target in (links or {}).items():
            info = tarfile.TarInfo(path)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
    return raw.getvalue()


def put_image(registry: Registry, repository: str, tag: Optional[str], layers: Tuple[bytes, ...],
              labels: Dict[str, str]) -> str:
    """An amd64 image of the layer tars ``layers`` (gzip-compressed here) with ``labels``, put under ``tag``
    (None: by its digest only, no tag); its digest."""
    blobs = [gzip.compress(raw, compresslevel=6, mtime=0) for raw in layers]
    return _put(registry, repository, tag, [{"mediaType": LAYER_GZIP, "size": len(b), "digest": registry.put_blob(repository, b)}
                                            for b in blobs], list(layers), labels)


def _put(registry: Registry, repository: str, tag: Optional[str], layers: List[dict], raw: List[bytes],
         labels: Dict[str, str]) -> str:
    """The image of the layer descriptors ``layers`` (their blobs put already; ``raw``: their uncompressed tars)."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": labels},
                         "rootfs": {"type": "layers",
                                    "diff_ids": ["sha256:" + hashlib.sha256(r).hexdigest() for r in raw]}}).encode()
    described = {"mediaType": CONFIG, "size": len(config), "digest": registry.put_blob(repository, config)}
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": described, "layers": layers}).encode()
    return registry.put_manifest(repository, tag or "sha256:" + hashlib.sha256(manifest).hexdigest(), manifest, OCI_MANIFEST)


def fixture_pair(registry: Registry, repository: str, validated_tag: Optional[str], variant_tag: Optional[str],
                 labels: Dict[str, str]) -> Tuple[str, str]:
    """A validated image and its eStargz variant, made without ctr-remote, each under its tag (None: by
    digest only); (the validated image's digest, the variant's). The variant's one layer is the layer
    ctr-remote made (tests/fixtures/estargz/small.esgz, with the descriptor its manifest gave it); the
    validated image's is a plain gzip tar of the regular files and links that layer's TOC lists, so
    `builder.trust.variant.bind` holds between them. Both carry ``labels``."""
    blob = (ESTARGZ / "small.esgz").read_bytes()
    descriptor = json.loads((ESTARGZ / "small.descriptor.json").read_text())
    layer = estargz.Layer.open(lambda start, end: blob[start:end], len(blob), descriptor["annotations"][estargz.TOC_DIGEST])
    files, links = variant.toc_listing(layer)
    contents = layer.read_files([path for path, _, _ in files])
    assert all(mode == 0o755 for _, mode, _ in files)  # layer_tar's mode
    validated = put_image(registry, repository, validated_tag,
                          (layer_tar(contents, {path: target for path, target, _ in links}),), labels)
    assert registry.put_blob(repository, blob) == descriptor["digest"]
    lazy = _put(registry, repository, variant_tag, [descriptor], [gzip.decompress(blob)], labels)
    return validated, lazy


@contextlib.contextmanager
def own_registry(root: Path, user: str = "", password: str = "") -> Iterator[Registry]:
    """A docker-registry on a loopback port with its storage under ``root``; with ``user``, htpasswd auth."""
    root.mkdir(parents=True, exist_ok=True)
    auth = ""
    if user:
        htpasswd = subprocess.run(["htpasswd", "-Bbn", user, password], check=True, capture_output=True, text=True).stdout
        (root / "htpasswd").write_text(htpasswd)
        auth = f"auth: {{htpasswd: {{realm: ascend-build-lazy, path: {root / 'htpasswd'}}}}}\n"
    port = free_port()
    proc = serve_registry(root, ("version: 0.1\nlog: {level: warn}\n"
                                 f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}}}\n"
                                 f"http: {{addr: '127.0.0.1:{port}', secret: lazy-test-only}}\n" + auth))
    try:
        wait_up(proc, port, root)
        yield Registry(f"127.0.0.1:{port}", user or None, password or None)
    finally:
        stop(proc)


def tools_here() -> str:
    """Why the lazy tests cannot run here ("" when they can)."""
    missing = [tool for tool in ("containerd", "ctr-remote", "docker-registry", "htpasswd") if shutil.which(tool) is None]
    return f"{', '.join(missing)} missing (Debian: containerd, stargz-snapshotter, docker-registry, apache2-utils)" if missing else ""


def need_tools() -> None:
    """Skip a lazy test where its tools are missing, but fail it in CI (``CI`` set, as `.ci/run` runs):
    scripts/setup-engine.sh installs them there, so a skip would hide that the variant went untested."""
    why = tools_here()
    if why and os.environ.get("CI"):
        pytest.fail(f"{why}: scripts/setup-engine.sh installs them (CI is set, so this is not skipped)")
    if why:
        pytest.skip(why)
