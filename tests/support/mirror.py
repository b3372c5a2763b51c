"""What the mirror tests share: tiny real images pushed through the registry API (no engine),
registries of their own on loopback (plain, read-only, pull-through cache), and their logs.

An image here is a real OCI image: a gzip tar layer with one file, a config whose ``diff_ids``
name that tar and whose labels are a sealed twin's (`tests.support.trust.sealed_twin_labels`),
so `pull --trust-key` chooses it as it would a built one and Docker Engine can pull and run it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from builder.registry import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, Registry
from tests.support.loopback_registry import REGISTRY_BIN, free_port, serve_registry, stop, wait_up  # noqa: F401

PLATFORM = {"x86_64": "amd64", "aarch64": "arm64"}
# the media types of an image: OCI's, or Docker's schema 2 (what `docker push` of Docker Engine writes)
TYPES = {False: {"manifest": OCI_MANIFEST, "config": "application/vnd.oci.image.config.v1+json",
                 "layer": "application/vnd.oci.image.layer.v1.tar+gzip", "index": OCI_INDEX},
         True: {"manifest": DOCKER_MANIFEST, "config": "application/vnd.docker.container.image.v1+json",
                "layer": "application/vnd.docker.image.rootfs.diff.tar.gzip", "index": DOCKER_LIST}}


def layer(payload: bytes, name: str = "payload.txt") -> tuple:
    """(gzip bytes, diff id) of a tar with one file."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(payload), 0, 0o644
        tar.addfile(info, io.BytesIO(payload))
    body = raw.getvalue()
    return gzip.compress(body, mtime=0), "sha256:" + hashlib.sha256(body).hexdigest()


def push_image(reg: Registry, repo: str, tag: Optional[str], labels: Dict[str, str], payload: bytes,
               arch: str = "x86_64", base: Optional[List[tuple]] = None, docker: bool = False,
               env: Optional[List[str]] = None) -> str:
    """Push an image (``base`` layers (gz, diff id) first, then one layer holding ``payload``), with
    OCI's media types or with ``docker`` Docker's; ``env``: its config's ``KEY=VALUE`` list; its digest."""
    types = TYPES[docker]
    layers = list(base or []) + [layer(payload)]
    config = json.dumps({"architecture": PLATFORM[arch], "os": "linux",
                         "config": {"Labels": labels, "Cmd": ["/bin/true"], **({"Env": env} if env else {})},
                         "rootfs": {"type": "layers", "diff_ids": [d for _, d in layers]}}).encode()
    descriptors = []
    for gz, _ in layers:
        descriptors.append({"mediaType": types["layer"], "size": len(gz), "digest": reg.put_blob(repo, gz)})
    manifest = {"schemaVersion": 2, "mediaType": types["manifest"],
                "config": {"mediaType": types["config"], "size": len(config), "digest": reg.put_blob(repo, config)},
                "layers": descriptors}
    body = json.dumps(manifest).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    return reg.put_manifest(repo, tag or digest, body, types["manifest"])


def push_index(reg: Registry, repo: str, tag: str, children: Dict[str, str], docker: bool = False) -> str:
    """An OCI index (with ``docker`` a Docker manifest list, as `ascend-build index` writes over
    Docker images) of ``children`` ({arch: digest}, pushed already) under ``tag``; its digest."""
    types = TYPES[docker]
    entries = []
    for arch, digest in children.items():
        size = len(reg.manifest(repo, digest).body)
        entries.append({"mediaType": types["manifest"], "digest": digest, "size": size,
                        "platform": {"architecture": PLATFORM[arch], "os": "linux"}})
    return reg.put_manifest(repo, tag, json.dumps({"schemaVersion": 2, "mediaType": types["index"],
                                                   "manifests": entries}).encode(), types["index"])


@dataclass
class Served:
    host: str
    root: Path
    proc: object

    def log(self) -> str:
        return (self.root / "registry.log").read_text(errors="replace")

    def blob_gets(self) -> Dict[str, int]:
        """{digest: GET requests the registry answered for it}, from its access log (level info)."""
        counts: Dict[str, int] = {}
        for line in self.log().splitlines():
            if "response completed" not in line or "http.request.method=GET" not in line:
                continue
            found = re.search(r"http\.request\.uri=\"?/v2/[^ \"]*/blobs/(sha256:[0-9a-f]{64})", line)
            if found:
                counts[found.group(1)] = counts.get(found.group(1), 0) + 1
        return counts

    def stop(self) -> None:
        stop(self.proc)


def serve(root: Path, extra: str = "", storage_extra: str = "") -> Served:
    """A docker-registry without auth on loopback, logging every request (level info)."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = serve_registry(root, (
        "version: 0.1\n"
        "log: {level: info, accesslog: {disabled: true}}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}{storage_extra}}}\n"
        f"http: {{addr: '127.0.0.1:{port}', secret: test-only}}\n" + extra))
    try:
        wait_up(proc, port, root)
    except RuntimeError:
        stop(proc)
        raise
    return Served(f"127.0.0.1:{port}", root, proc)
