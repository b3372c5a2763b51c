"""What the lazy-variant tests and bench_lazy share: a small image of real files put through the
registry API (no Docker Engine), and a registry of their own whose storage they can see."""

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
from typing import Dict, Iterator, Optional, Tuple

import pytest

from builder.registry import OCI_MANIFEST, Registry
from tests.support.loopback_registry import free_port, serve_registry, stop, wait_up

LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG = "application/vnd.oci.image.config.v1+json"


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


def put_image(registry: Registry, repository: str, tag: str, layers: Tuple[bytes, ...], labels: Dict[str, str]) -> str:
    """An amd64 image of the layer tars ``layers`` (gzip-compressed here) with ``labels``, put under ``tag``; its digest."""
    blobs = [gzip.compress(raw, compresslevel=6, mtime=0) for raw in layers]
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": labels},
                         "rootfs": {"type": "layers",
                                    "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest() for raw in layers]}}).encode()
    described = {"mediaType": CONFIG, "size": len(config), "digest": registry.put_blob(repository, config)}
    layer_descriptors = [{"mediaType": LAYER_GZIP, "size": len(b), "digest": registry.put_blob(repository, b)} for b in blobs]
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": described,
                           "layers": layer_descriptors}).encode()
    return registry.put_manifest(repository, tag, manifest, OCI_MANIFEST)


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
