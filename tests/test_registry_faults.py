"""Registries that fail: 5xx, 429 with and without Retry-After, a connection reset mid-push and
mid-pull. A real HTTP proxy on loopback (`FaultProxy`, a thread) forwards every request to a real
docker-registry (the ``registry`` fixture) and injects the faults planned for the Nth request of
a method and path; it counts every request, so the tests see each retry. No Docker Engine needed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, Tuple

import pytest

from builder import bounded, registry as reg_module
from builder.errors import UserError
from builder.registry import Registry
from tests.support.faults import FaultProxy
from tests.support.faults import push_tiny_image as _image

REAL_BACKOFF = reg_module.BACKOFF

@pytest.fixture
def proxy(registry):
    p = FaultProxy(registry.host)
    yield p
    p.stop()


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    """The retries' own waits, shortened (0.1 s doubling) so the suite stays quick; a
    Retry-After the registry names is waited for as asked."""
    monkeypatch.setattr(reg_module, "BACKOFF", 0.1)


def _clients(registry, proxy) -> Tuple[Registry, Registry]:
    """(straight to the registry, through the proxy), with the test user's credentials."""
    return (Registry(registry.host, registry.username, registry.password),
            Registry(proxy.host, registry.username, registry.password))


def _warm(client: Registry, repository: str) -> None:
    """One clean read, so the 401 challenge and its answer are behind: counts are then exact."""
    client.tags(repository)


def test_reads_retry_through_5xx_429_and_resets_and_succeed(registry, proxy):
    direct, through = _clients(registry, proxy)
    repository = f"faults/read-{uuid.uuid4().hex[:8]}"
    digest, _ = _image(direct, repository, "v1")
    _warm(through, repository)
    tags_path, manifest_path = r"/tags/list$", r"/manifests/v1$"
    proxy.plan("GET", tags_path, ["503", "429", "reset", "502"])
    proxy.plan("GET", manifest_path, ["cut", "429:1"])
    before = proxy.count("GET", tags_path)
    start = time.monotonic()
    assert through.tags(repository) == ["v1"]
    assert proxy.count("GET", tags_path) - before == 5  # 4 faults, then the answer
    shown = through.manifest(repository, "v1")  # mid-answer reset, then 429 with Retry-After: 1
    elapsed = time.monotonic() - start
    assert shown.digest == digest and proxy.count("GET", manifest_path) == 3  # same scope: no new challenge
    assert elapsed >= 1.0  # the Retry-After was waited for
    print(f"reads: tags 5 requests, manifest 3 requests, {elapsed:.2f} s")


def test_a_persistent_5xx_fails_clearly_after_bounded_retries(registry, proxy):
    _, through = _clients(registry, proxy)
    repository = f"faults/down-{uuid.uuid4().hex[:8]}"
    _warm(through, repository)
    proxy.plan("GET", r"/tags/list$", always="503")
    before = proxy.count("GET", r"/tags/list$")
    start = time.monotonic()
    with pytest.raises(UserError) as failed:
        through.tags(repository)
    elapsed = time.monotonic() - start
    tries = proxy.count("GET", r"/tags/list$") - before
    print(f"persistent 503: {tries} requests, failed after {elapsed:.2f} s: {failed.value.message}")
    assert tries == reg_module.RETRIES + 1 == 5
    assert re.fullmatch(rf"registry {re.escape(proxy.host)}: answered HTTP 503 for GET /v2/{repository}/tags/list "
                        r"\(5 tries in \d+\.\d s\)", failed.value.message)
    assert failed.value.fix and failed.value.exit_code == 1
    assert elapsed < 0.1 * (1 + 2 + 4 + 8) + 5  # the backoff (shortened here) and the requests, no more


@pytest.mark.parametrize("limit", ["retry-after-max", "command-deadline"])
def test_a_retry_after_beyond_what_may_be_waited_is_not_waited_for(registry, proxy, limit):
    _, through = _clients(registry, proxy)
    repository = f"faults/throttled-{uuid.uuid4().hex[:8]}"
    _warm(through, repository)
    after = 3600 if limit == "retry-after-max" else 10
    proxy.plan("GET", r"/tags/list$", always=f"429:{after}")
    before = proxy.count("GET", r"/tags/list$")
    start = time.monotonic()
    with pytest.raises(UserError) as failed:
        if limit == "command-deadline":
            with bounded.command_deadline(5):
                through.tags(repository)
        else:
            through.tags(repository)
    elapsed = time.monotonic() - start
    assert elapsed < 3 and proxy.count("GET", r"/tags/list$") - before == 1  # answered 429 once, not retried
    why = "more than the 60 s waited for" if limit == "retry-after-max" else "past the command's deadline"
    assert f"answered HTTP 429 for GET /v2/{repository}/tags/list and asked to retry after {after} s, {why}" \
        in failed.value.message


def test_429_without_retry_after_backs_off_and_succeeds(registry, proxy):
    direct, through = _clients(registry, proxy)
    repository = f"faults/backoff-{uuid.uuid4().hex[:8]}"
    _image(direct, repository, "v1")
    _warm(through, repository)
    proxy.plan("GET", r"/tags/list$", ["429", "429", "429"])
    before = proxy.count("GET", r"/tags/list$")
    start = time.monotonic()
    assert through.tags(repository) == ["v1"]
    assert time.monotonic() - start >= 0.1 + 0.2 + 0.4  # doubling backoff
    assert proxy.count("GET", r"/tags/list$") - before == 3 + 1


def test_a_push_survives_resets_and_5xx_and_reports_what_the_registry_holds(registry, proxy):
    direct, through = _clients(registry, proxy)
    repository = f"faults/push-{uuid.uuid4().hex[:8]}"
    _warm(through, repository)
    proxy.plan("POST", r"/blobs/uploads/$", ["503"])
    proxy.plan("PUT", r"/blobs/uploads/", ["reset"])      # mid-push: half the blob sent, then a reset
    proxy.plan("PUT", r"/manifests/v1$", ["500", "reset"])
    digest, manifest = _image(through, repository, "v1")
    assert digest == "sha256:" + hashlib.sha256(manifest).hexdigest()
    assert direct.manifest(repository, "v1").digest == digest  # the registry holds what was reported
    assert proxy.count("POST", r"/blobs/uploads/$") == 3       # 503, the upload cut by the reset, the good one
    assert proxy.count("PUT", r"/blobs/uploads/") == 2
    assert proxy.count("PUT", r"/manifests/v1$") == 3


def test_a_push_that_keeps_failing_reports_no_digest_and_publishes_no_tag(registry, proxy):
    direct, through = _clients(registry, proxy)
    repository = f"faults/nopush-{uuid.uuid4().hex[:8]}"
    _warm(through, repository)
    proxy.plan("PUT", r"/manifests/v1$", always="reset")
    start = time.monotonic()
    reported: Dict[str, str] = {}
    with pytest.raises(UserError) as failed:
        reported["v1"] = _image(through, repository, "v1")[0]
    assert reported == {}
    assert "the connection broke during PUT" in failed.value.message and "(5 tries in" in failed.value.message
    assert proxy.count("PUT", r"/manifests/v1$") == 5 and time.monotonic() - start < 10
    assert direct.tags(repository) == []  # nothing under the tag
    with pytest.raises(LookupError):
        direct.manifest(repository, "v1")


def test_a_post_or_blob_put_is_not_retried_alone(registry, proxy):
    """The upload session's own requests are not repeated by themselves (a PUT to a session
    that took the bytes would 404); the whole upload is, from its HEAD."""
    _, through = _clients(registry, proxy)
    repository = f"faults/session-{uuid.uuid4().hex[:8]}"
    _warm(through, repository)
    proxy.plan("PUT", r"/blobs/uploads/", always="503")
    with pytest.raises(UserError, match=r"answered HTTP 503 for PUT .*\(5 tries in"):
        through.put_blob(repository, b"blob " + uuid.uuid4().hex.encode())
    assert proxy.count("POST", r"/blobs/uploads/$") == 5 and proxy.count("PUT", r"/blobs/uploads/") == 5
    assert proxy.count("HEAD", r"/blobs/sha256:") == 5 + 1  # + the 401 challenge of the push scope


def test_retry_after_reads_seconds_and_dates():
    assert reg_module.retry_after("7") == 7.0 and reg_module.retry_after("") is None
    assert reg_module.retry_after("9" * 40) == float(bounded.HUGE)
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= (reg_module.retry_after(later) or 0) <= 31




def test_the_real_backoff_gives_up_on_a_persistent_503_within_8_seconds(registry, proxy, monkeypatch):
    monkeypatch.setattr(reg_module, "BACKOFF", REAL_BACKOFF)
    _, through = _clients(registry, proxy)
    repository = f"faults/real-{uuid.uuid4().hex[:8]}"
    _warm(through, repository)
    proxy.plan("GET", r"/manifests/", always="500")
    start = time.monotonic()
    with pytest.raises(UserError, match=r"answered HTTP 500 for GET .*\(5 tries in \d"):
        through.manifest(repository, "v1")
    elapsed = time.monotonic() - start
    print(f"persistent 500, real backoff: failed after {elapsed:.2f} s")
    assert 0.5 + 1 + 2 + 4 <= elapsed < 0.5 + 1 + 2 + 4 + 3


def test_index_through_a_failing_registry_fails_clearly_and_reports_nothing_published(registry, proxy, tmp_path):
    """The CLI, as people run it: `index` against a registry whose manifests keep answering 503."""
    cli = Path(sys.executable).with_name("ascend-build")
    if not cli.exists():
        pytest.skip("the ascend-build script is not installed next to this Python")
    repository = f"faults/index-{uuid.uuid4().hex[:8]}"
    proxy.plan("GET", r"/manifests/", always="503")
    env = dict(os.environ, ASCEND_BUILD_REGISTRY_USER=registry.username, ASCEND_BUILD_REGISTRY_PASSWORD=registry.password)
    start = time.monotonic()
    done = subprocess.run([str(cli), "index", f"{proxy.host}/{repository}:cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0",
                           "--matrix", str(Path(__file__).resolve().parents[1] / "matrix"), "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    elapsed = time.monotonic() - start
    assert done.returncode == 1 and "Traceback" not in done.stderr
    [outcome] = json.loads(done.stdout)
    assert outcome["status"] == "error" and outcome["digests"] == {} and outcome["arches"] == {}
    assert re.search(rf"answered HTTP 503 for GET /v2/{repository}/manifests/\S+ \(5 tries in \d", outcome["message"])
    assert proxy.count("GET", r"/manifests/") == 5 and elapsed < 30  # one arch's manifest, 5 tries: then it stops
    print(f"index, persistent 503: exit 1 after {elapsed:.2f} s, 5 requests")


@pytest.mark.engine
def test_image_push_to_a_failing_registry_reports_an_error_no_digest_and_keeps_the_image(engine, registry, proxy,
                                                                                       tmp_path, monkeypatch):
    """Pushing goes through Docker Engine: the pipeline's last step (`conclude`: seal, tag, push)
    of a small image that passed, against a registry whose manifest PUT keeps answering 500."""
    from builder.images import image_run

    monkeypatch.setenv("ASCEND_BUILD_REGISTRY_USER", registry.username)
    monkeypatch.setenv("ASCEND_BUILD_REGISTRY_PASSWORD", registry.password)
    token = uuid.uuid4().hex[:10]
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text("FROM scratch\nCOPY a.txt /a.txt\n")
    (tmp_path / "ctx" / "a.txt").write_text(f"faults {token}\n")
    candidate = engine.build(tmp_path / "ctx", log_path=tmp_path / "build.log")
    ref = f"ascend-build-test/faults-{token}:cell-cpu"
    pushed = f"{proxy.host}/{ref}"
    proxy.plan("PUT", r"/manifests/", always="500")
    report = {"schema": 1, "passed": True, "exit_code": 0, "device": "cpu", "host": {},
              "tiers": [{"name": "versions", "status": "passed", "summary": "ok"}]}
    out = image_run.Outcome("cell", "cpu", image_id=candidate)
    options = image_run.Options(variants=("cpu",), state_dir=tmp_path / "state", push=proxy.host)
    start = time.monotonic()
    try:
        out = image_run.conclude(image_run.ImageRun("cell-cpu", ref, out, options, engine, lambda line: None,
                                                    tiers=("versions",), report=report))
        elapsed = time.monotonic() - start
        print(f"image --push, manifest PUT always 500: {out.status} after {elapsed:.1f} s, "
              f"{proxy.count('PUT', r'/manifests/')} manifest PUTs: {out.message.splitlines()[0]}")
        assert out.status == "error" and out.digests == {} and not out.ok
        assert f"push of {pushed} to {proxy.host} failed" in out.message and "500" in out.message
        assert f"kept locally as {ref}, {pushed}" in out.message
        assert engine.image_id(ref) == out.image_id and engine.image_id(pushed) == out.image_id  # kept, sealed
        assert engine.labels(ref)["io.ascend-build.validated"] == "true"
        assert proxy.count("PUT", r"/manifests/") >= 4 and elapsed < 120  # Engine.push: 4 tries, 1 + 2 + 4 s apart
        direct = Registry(registry.host, registry.username, registry.password)
        assert direct.tags(ref.split(":")[0]) == []  # no tag reached the registry
    finally:
        for name in (ref, pushed):
            engine.untag(name)
        engine.remove_if_unnamed(candidate)


@pytest.mark.engine
def test_a_registry_that_stalls_mid_upload_ends_the_push_with_a_clear_error_and_no_tag(engine, registry, proxy, tmp_path):
    """The engine's push stream goes silent when the registry stops answering a blob upload; the
    SDK then raises urllib3's ReadTimeoutError from the stream (not requests'), which was a
    traceback. The engine's silence limit is shortened here (5 s) so the test does not wait 300 s."""
    token = uuid.uuid4().hex[:10]
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text("FROM scratch\nCOPY a.txt /a.txt\n")
    (tmp_path / "ctx" / "a.txt").write_text(f"stall {token}\n")
    image = engine.build(tmp_path / "ctx", log_path=tmp_path / "build.log")
    ref = f"{proxy.host}/ascend-build-test/stall-{token}:cell-cpu"
    engine.tag(image, ref)
    proxy.plan("PUT", r"/blobs/uploads/", always="stall")
    proxy.plan("PATCH", r"/blobs/uploads/", always="stall")
    saved = engine.client.api.timeout
    engine.client.api.timeout = 5
    start = time.monotonic()
    try:
        with pytest.raises(UserError) as stalled:
            engine.push(ref, username=registry.username, password=registry.password)
        elapsed = time.monotonic() - start
        assert f"push of {ref} to {proxy.host} stalled: the engine reported no progress for 5 s" in stalled.value.message
        assert "nothing counts as published" in stalled.value.message and elapsed < 60
        direct = Registry(registry.host, registry.username, registry.password)
        assert direct.tags(f"ascend-build-test/stall-{token}") == []
    finally:
        engine.client.api.timeout = saved
        proxy.stop()
        engine.untag(ref)
        engine.remove_if_unnamed(image)


def test_verify_through_a_stalling_registry_ends_at_its_deadline_naming_what_stalled(registry, proxy, tmp_path):
    """`verify` had no deadline: a registry that takes the request and never answers held it for
    each request's own 120 s. With --deadline 3 it ends after 3 s, exit 1, naming the read."""
    from builder.trust import signing

    repository = f"faults/verify-stall-{uuid.uuid4().hex[:8]}"
    _, public = signing.generate(tmp_path / "keys")
    proxy.plan("GET", r"/manifests/", always="stall")
    env = dict(os.environ, ASCEND_BUILD_REGISTRY_USER=registry.username, ASCEND_BUILD_REGISTRY_PASSWORD=registry.password)
    start = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).with_name("ascend-build")), "verify", f"{proxy.host}/{repository}:v1",
                           "--key", str(public), "--deadline", "3"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=200)
    elapsed = time.monotonic() - start
    print(f"verify, manifest GET stalled, --deadline 3: exit {done.returncode} after {elapsed:.1f} s: "
          f"{done.stderr.strip().splitlines()[:1]}")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "the command's deadline of 3 s passed, waiting on" in done.stderr and "/manifests/v1" in done.stderr
    assert 3 <= elapsed < 20


def test_pull_through_a_stalling_registry_ends_at_its_deadline(registry, proxy, tmp_path):
    """`pull`'s registry reads (the tags, each manifest) end at --deadline when the registry stalls."""
    repository = f"faults/pull-stall-{uuid.uuid4().hex[:8]}"
    proxy.plan("GET", r"/tags/list$", always="stall")
    env = dict(os.environ, ASCEND_BUILD_REGISTRY_USER=registry.username, ASCEND_BUILD_REGISTRY_PASSWORD=registry.password)
    start = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).with_name("ascend-build")), "pull", "--registry",
                           f"{proxy.host}/{repository}", "--deadline", "3", "--root", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=200)
    elapsed = time.monotonic() - start
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "the command's deadline of 3 s passed, waiting on" in done.stderr and "/tags/list" in done.stderr
    assert 3 <= elapsed < 20


def _stand_in_image(engine, tmp_path: Path, what: str) -> str:
    """A one-file image of a layer no other test has (so the engine holds no blob of it)."""
    token = uuid.uuid4().hex
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text("FROM scratch\nCOPY a.txt /a.txt\n")
    (tmp_path / "ctx" / "a.txt").write_text(f"{what} {token}\n")
    return engine.build(tmp_path / "ctx", log_path=tmp_path / "build.log")


@pytest.mark.engine
def test_a_push_stalled_by_the_registry_ends_at_the_commands_deadline(engine, registry, proxy, tmp_path):
    """Within a command's deadline (image --push-deadline), the engine's push stream is cut at
    that instant however long the engine client would wait, and the push in the engine cancelled:
    the error names the deadline, no digest, no tag in the registry."""
    image = _stand_in_image(engine, tmp_path, "deadline")
    ref = f"{proxy.host}/ascend-build-test/faults-deadline-{uuid.uuid4().hex[:10]}:cell-cpu"
    engine.tag(image, ref)
    proxy.plan("PUT", r"/blobs/uploads/", always="stall")
    proxy.plan("PATCH", r"/blobs/uploads/", always="stall")
    start = time.monotonic()
    try:
        with pytest.raises(UserError) as stalled, bounded.command_deadline(4):
            engine.push(ref, username=registry.username, password=registry.password)
        elapsed = time.monotonic() - start
        print(f"push, blob upload stalled, deadline 4 s: {elapsed:.1f} s: {stalled.value.message}")
        assert f"push of {ref} to {proxy.host} stalled: the command's deadline of 4 s passed" in stalled.value.message
        assert "no digest was reported, so nothing counts as published" in stalled.value.message
        assert "--push-deadline" in (stalled.value.fix or "")
        assert 4 <= elapsed < 15
        assert engine.client.api.timeout == 300 and engine.client.api.hooks["response"] == []  # restored
        direct = Registry(registry.host, registry.username, registry.password)
        assert direct.tags(ref.split("/", 1)[1].split(":")[0]) == []
    finally:
        proxy.stop()
        engine.untag(ref)
        engine.remove_if_unnamed(image)


@pytest.mark.engine
def test_a_pull_stalled_by_the_registry_ends_at_the_commands_deadline(engine, registry, proxy, tmp_path):
    """The engine's pull of the layers counts against `pull`'s deadline: a registry that stalls
    the layer's GET ends it there, with nothing pulled."""
    image = _stand_in_image(engine, tmp_path, "pull-deadline")
    repository = f"ascend-build-test/faults-pull-{uuid.uuid4().hex[:10]}"
    direct_ref = f"{registry.host}/{repository}:v1"
    engine.tag(image, direct_ref)
    try:
        digest = engine.push(direct_ref, username=registry.username, password=registry.password)
    finally:
        engine.untag(direct_ref)
    engine.remove_if_unnamed(image)
    wanted = f"{proxy.host}/{repository}@{digest}"
    proxy.plan("GET", r"/blobs/", always="stall")
    start = time.monotonic()
    try:
        with pytest.raises(UserError) as stalled, bounded.command_deadline(4):
            engine.pull(wanted, username=registry.username, password=registry.password)
        elapsed = time.monotonic() - start
        print(f"pull, blob GET stalled, deadline 4 s: {elapsed:.1f} s: {stalled.value.message}")
        assert f"pull of {wanted} stalled: the command's deadline of 4 s passed" in stalled.value.message
        assert 4 <= elapsed < 15 and engine.image_id(wanted) is None
    finally:
        proxy.stop()
        engine.remove(wanted, force=True)


def test_verify_of_a_manifest_the_registry_altered_says_so_not_unsigned(registry, proxy, tmp_path):
    """A registry (or a proxy before it) that alters the manifest served for a tag and sends no
    digest header: what was served hashes to a digest with no statement. That is other bytes than
    the tag names, not an image "pushed without --sign-key"."""
    from builder.trust import attached, signing

    direct, through = _clients(registry, proxy)
    repository = f"faults/altered-{uuid.uuid4().hex[:8]}"
    digest, _ = _image(direct, repository, "v1")
    _, public = signing.generate(tmp_path / "keys")
    proxy.plan("GET", r"/manifests/v1$", always="alter")
    with pytest.raises(UserError) as altered:
        attached.verify(through, repository, "v1", signing.load_public(public))
    print(altered.value.message)
    assert "the registry served other bytes than the digest asked for" in altered.value.message
    assert "--sign-key" not in altered.value.message and digest not in altered.value.message
    assert proxy.count("GET", rf"/manifests/{digest}$") == 0  # asked by its altered digest, not the real one
    # unaltered, the same image is diagnosed as unsigned, as it is
    unaltered = attached.verify(direct, repository, "v1", signing.load_public(public))
    assert "pushed without --sign-key" in unaltered.missing


def test_a_manifest_asked_by_digest_and_served_altered_is_named_so(registry, proxy):
    direct, through = _clients(registry, proxy)
    repository = f"faults/altered-digest-{uuid.uuid4().hex[:8]}"
    digest, _ = _image(direct, repository, "v1")
    proxy.plan("GET", r"/manifests/sha256:", always="alter")
    with pytest.raises(UserError) as altered:
        through.manifest(repository, digest)
    assert "hashes to sha256:" in altered.value.message and f"not {digest}" in altered.value.message
    assert "the registry served other bytes than the digest asked for" in altered.value.message
