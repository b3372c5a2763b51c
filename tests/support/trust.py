"""What the trust tests share: keys, tiny images with a sealed twin's labels, pushes, and the four forgeries.

Used by tests/test_trust_e2e.py (`verify`) and tests/test_trust_policy_e2e.py (`pull`, `run`,
`index` with --trust-key). Its fixtures (`creds`, `keys`, `images`) reach the tests as a pytest
plugin that tests/conftest.py names (pytest_plugins), not by import.

The forgeries, each under the genuine image's tag, with labels identical to the genuine one's:

1. ``unsigned``: pushed without any statement;
2. ``copied``: the genuine image's ``.att`` manifest copied to the forgery's ``.att`` tag;
3. ``edited``: the genuine envelope with its subject changed to the forgery's digest and its
   predicate claiming an NPU host, the signature kept;
4. ``stranger``: statements made properly, signed by another key.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
from dataclasses import replace
from pathlib import Path
from typing import Dict, Optional

import pytest

from builder.trust import attached, signing, statements
from builder.images import attest, matrix, plan, render, smoke_run
from builder.registry import OCI_MANIFEST, Registry
from builder.vocabulary import CPU, tier_names

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).with_name("ascend-build"))
CELL_ID = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
TAG = CELL_ID + "-cpu"
CONTENT_HASH = "0123456789abcdef"
FORGERIES = ("unsigned", "copied", "edited", "stranger")


def sealed_twin_labels(arch: str = "x86_64") -> dict:
    """The labels `image` gives the sealed twin of the shipped Debian 12 cell (the matrix ships its
    x86_64 cell; another arch's is that cell with the arch changed, as tests/images/test_index_e2e.py makes them)."""
    cell = next(c for c in matrix.load(ROOT / "matrix").cells if c.id == CELL_ID)
    if arch != cell.arch:
        cell = replace(cell, arch=arch, id=cell.id[: -len(cell.arch)] + arch)
    labels = dict(plan.labels(cell, CPU, render.content_hash(cell)))
    labels.update(smoke_run.verdict(report(), tier_names(), final=True).seal_labels)
    return labels


def report() -> dict:
    return {"schema": 1, "passed": True, "exit_code": 0, "device": CPU, "python": "3.11.2",
            "started": "2026-12-01T10:00:00+00:00", "content_hash": CONTENT_HASH, "lock": "ok", "host": {},
            "tiers": [{"name": t, "status": "passed", "summary": f"{t} ok"} for t in tier_names()],
            "base_image": {"ref": "local/debian:12", "id": "sha256:" + "11" * 32, "digests": []}}


@pytest.fixture(scope="module")
def creds(registry):
    env = {"ASCEND_BUILD_REGISTRY_USER": registry.username, "ASCEND_BUILD_REGISTRY_PASSWORD": registry.password}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    saved = os.environ.pop(signing.PASSPHRASE_ENV, None)
    try:
        pairs = {name: signing.generate(folder, name) for name in ("team", "team-2027", "stranger")}
    finally:
        if saved is not None:
            os.environ[signing.PASSPHRASE_ENV] = saved
    return pairs


@pytest.fixture(scope="module")
def images(engine, base_image, tmp_path_factory):
    """build(marker, labels=None, base=None, platform=None) -> image id: FROM the base with the sealed
    twin's labels (+ one of its own)."""
    made, twin = [], sealed_twin_labels()

    def build(marker: str, labels: Optional[Dict[str, str]] = None, base: Optional[str] = None,
              platform: Optional[str] = None) -> str:
        folder = tmp_path_factory.mktemp("ctx")
        (folder / "Dockerfile").write_text(f"FROM {base or base_image}\n")
        image = engine.build(folder, labels={**(labels or twin), "test.marker": marker},
                             log_path=folder / "build.log", platform=platform)
        made.append(image)
        return image
    yield build
    for image in made:
        engine.remove(image, force=True)


def push(engine, registry, image: str, repo: str, tag: str = TAG) -> str:
    ref = f"{registry.host}/{repo}:{tag}"
    engine.tag(image, ref)
    try:
        return engine.push(ref)
    finally:
        engine.untag(ref)


def attest_as(registry, repo: str, tag: str, digest: str, key_file: Path, cell_id: str = CELL_ID) -> None:
    """Sign the validation statement of a passed twin of ``cell_id`` about ``digest`` and attach it."""
    predicates = attest.statements_for(report(), tier_names(), cell_id, CPU, CONTENT_HASH, None)
    attest.attest(f"{registry.host}/{repo}:{tag}", digest, predicates, signing.load_private(key_file))


def forge(kind: str, engine, registry, images, repo: str, genuine: str, keys, tag: str = TAG,
          labels: Optional[Dict[str, str]] = None, base: Optional[str] = None, platform: Optional[str] = None) -> str:
    """Push forgery ``kind`` (one of FORGERIES) under ``tag``, with the genuine image's labels; its digest."""
    forged = push(engine, registry, images(f"forged-{kind}", labels, base, platform), repo, tag)
    return tamper(kind, registry, repo, genuine, forged, keys, tag, (labels or {}).get("io.ascend-build.cell", CELL_ID))


def tamper(kind: str, registry, repo: str, genuine: str, forged: str, keys, tag: str = TAG,
           cell_id: str = CELL_ID) -> str:
    """Give the pushed image ``forged`` the statements of forgery ``kind`` (one of FORGERIES): none,
    the genuine image's copied, the genuine one edited to name it, or a stranger's; ``forged``."""
    assert forged != genuine
    reg = Registry(registry.host)
    if kind == "unsigned":
        return forged
    real = reg.manifest(repo, attached.attestation_tag(genuine))
    if kind == "copied":
        reg.put_manifest(repo, attached.attestation_tag(forged), real.body, real.media_type)
    elif kind == "edited":
        layer = next(x for x in real.data["layers"] if x["annotations"]["predicateType"] == statements.VALIDATION_V1)
        envelope = json.loads(reg.blob(repo, layer["digest"]))
        body = json.loads(base64.b64decode(envelope["payload"]))
        body["subject"][0]["digest"]["sha256"] = forged.split(":")[1]
        body["predicate"]["ranOn"]["kind"] = "npu-host"
        envelope["payload"] = base64.b64encode(json.dumps(body).encode()).decode()
        attached.attach(reg, repo, reg.manifest(repo, forged),  # the hint names the team's public key
                        [(json.dumps(envelope).encode(), statements.VALIDATION_V1)], signing.load_public(keys["team"][1]))
    elif kind == "stranger":
        attest_as(registry, repo, tag, forged, keys["stranger"][0], cell_id)
    else:
        raise ValueError(kind)
    return forged


# what each forgery is refused for, as `builder.trust.statements.check` / `builder.trust.attached.verify` say it
REFUSED_FOR = {
    "unsigned": "no statement is attached",
    "copied": "a statement about another image",
    "edited": "changed after signing",
    "stranger": "signed by another key",
}


def put_tiny_image(registry: Registry, repository: str, tag: str, labels: Optional[Dict[str, str]] = None) -> str:
    """A tiny image (one empty layer, ``labels``, by default the sealed twin's, and ``tag`` as its own,
    so each is another digest) put under ``tag``; its digest."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w"):
        pass
    layer = gzip.compress(raw.getvalue(), mtime=0)
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {**(labels or sealed_twin_labels()), "test.marker": tag}},
                         "rootfs": {"type": "layers",
                                    "diff_ids": ["sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()]}}).encode()
    described = []
    for media_type, body in (("application/vnd.oci.image.config.v1+json", config),
                             ("application/vnd.oci.image.layer.v1.tar+gzip", layer)):
        described.append({"mediaType": media_type, "size": len(body), "digest": registry.put_blob(repository, body)})
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": described[0],
                           "layers": described[1:]}).encode()
    return registry.put_manifest(repository, tag, manifest, OCI_MANIFEST)
