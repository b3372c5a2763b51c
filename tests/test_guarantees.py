"""Guarantees the docs give that once regressed with every test that needs no engine still
passing: each is held here by a test that runs without an engine (a registry or an HTTP
server on loopback stands in where one is needed).

- docs/reliability.md "Registries that fail": an upload session's own POST and PUT are never
  repeated alone, in the streaming upload `mirror` uses as in the small one;
- docs/distribution.md (lazy reads) and `Registry.blob_range`: a 200 answer to a Range request
  (the whole blob) is refused, never read as the range; `holds_blob` counts only a 206;
- docs/trust.md: a statement's envelope is read only as the bytes its digest names;
- docs/kubernetes.md: the Job has ``backoffLimit: 0`` and ``restartPolicy: Never``;
- docs/node.md: the NFD feature file is written as a dot file and renamed into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import uuid
from pathlib import Path

import pytest

from builder import registry as reg_module
from builder.errors import UserError
from builder.k8s import job
from builder.node import nfd
from builder.node.host import HostInfo
from builder.registry import Registry
from tests.support.faults import FaultProxy
from tests.support.k8s import spec_for
from tests.support.registry import answering, serve

DIGEST = "sha256:" + "a" * 64


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """Nothing in the environment or a Docker config: the client is anonymous."""
    monkeypatch.delenv("ASCEND_BUILD_REGISTRY_USER", raising=False)
    monkeypatch.delenv("ASCEND_BUILD_REGISTRY_PASSWORD", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))


@pytest.fixture
def proxy(registry):
    p = FaultProxy(registry.host)
    yield p
    p.stop()


def test_a_streamed_upload_is_retried_whole_never_its_post_or_put_alone(registry, proxy, monkeypatch):
    monkeypatch.setattr(reg_module, "BACKOFF", 0.05)
    through = Registry(proxy.host, registry.username, registry.password)
    repository = f"guarantees/stream-{uuid.uuid4().hex[:8]}"
    through.tags(repository)  # the 401 challenge behind us: the counts below are the upload's own
    data = b"layer " + uuid.uuid4().hex.encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    proxy.plan("POST", r"/blobs/uploads/$", ["503"])
    proxy.plan("PUT", r"/blobs/uploads/", ["503", "503"])

    sent = through.put_blob_stream(repository, digest, len(data), lambda: contextlib.nullcontext(io.BytesIO(data)))

    assert sent == len(data)
    # four whole tries, each from its HEAD: the POST of the first failed, the PUTs of the next two;
    # neither request is ever sent again by itself (+ 1 HEAD: the 401 challenge of the push scope)
    assert proxy.count("HEAD", r"/blobs/sha256:") == 4 + 1
    assert proxy.count("POST", r"/blobs/uploads/$") == 4 and proxy.count("PUT", r"/blobs/uploads/") == 3
    assert Registry(registry.host, registry.username, registry.password).blob(repository, digest, len(data)) == data


def test_a_range_answered_with_the_whole_blob_is_refused_not_read(no_credentials):
    whole = b"x" * 64
    server, port = serve(answering(200, {"Content-Length": str(len(whole))}, whole))
    try:
        client = Registry(f"127.0.0.1:{port}")
        with pytest.raises(UserError, match=r"HTTP 200 .*not the 206 range 0-9"):
            client.blob_range("r", DIGEST, 0, 10)
        assert client.holds_blob("r", DIGEST) is False  # a 200 is a cache streaming it, not holding it
    finally:
        server.shutdown()


def test_a_range_answered_206_with_the_range_asked_for_is_read(no_credentials):
    server, port = serve(answering(206, {"Content-Range": "bytes 0-9/64", "Content-Length": "10"}, b"0123456789"))
    try:
        client = Registry(f"127.0.0.1:{port}")
        assert client.blob_range("r", DIGEST, 0, 10) == b"0123456789"
        assert client.holds_blob("r", DIGEST) is True
    finally:
        server.shutdown()


def test_a_blob_whose_bytes_are_not_its_digest_is_never_handed_out(no_credentials):
    envelope = b'{"payloadType":"application/vnd.in-toto+json"}'
    server, port = serve(answering(200, {"Content-Length": str(len(envelope))}, envelope))
    try:
        client = Registry(f"127.0.0.1:{port}")
        with pytest.raises(UserError, match="does not hash to its digest"):
            client.blob("r", DIGEST)
        named = "sha256:" + hashlib.sha256(envelope).hexdigest()
        assert client.blob("r", named) == envelope  # the same server, the digest that names its bytes
    finally:
        server.shutdown()


def test_the_job_is_not_restarted_on_its_own():
    manifest = job.job("llama-sft", spec_for("24.1.RC3"), {})
    assert manifest["spec"]["backoffLimit"] == 0
    assert manifest["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_the_feature_file_appears_only_by_a_rename_of_a_dot_file(tmp_path, monkeypatch):
    target = tmp_path / "ascend-build"
    renames = []
    real_replace = os.replace

    def watched(src, dst):
        renames.append((Path(src), Path(dst), Path(src).read_text()))
        assert not Path(dst).exists()  # nothing at the name before the rename: no half file to read
        real_replace(src, dst)

    monkeypatch.setattr(nfd.os, "replace", watched)
    text = nfd.features_text(HostInfo(arch="x86_64", driver="25.0.RC1"))
    nfd.write_atomically(target, text)

    [(src, dst, written)] = renames
    assert src.parent == tmp_path and src.name.startswith(".") and dst == target and written == text
    assert target.read_text() == text and [p.name for p in tmp_path.iterdir()] == ["ascend-build"]


def test_a_test_that_hangs_is_failed_at_its_bound(request):
    # pytest-timeout, given every test by tests/conftest.py: a hang fails instead of holding the suite
    [bound] = request.node.get_closest_marker("timeout").args
    assert 0 < bound <= 600
