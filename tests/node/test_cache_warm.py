"""`ascend-build mirror SRC CACHE --warm`: the real docker-registry run as a pull-through cache
(`proxy.remoteurl`) in front of a source registry on loopback, reached through a throttling proxy
that counts the bytes the source sends across it (`tests.support.throttle`; the source's own log
counts what it wrote into its socket buffers, not what crossed the link). After the warm, N = 8 pulls at
once through the cache cost the source one copy of each blob; without it, several."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, List

import pytest

from builder.registry import Registry, Transient
from tests.support import mirror as hm
from tests.support.throttle import Throttle

pytestmark = pytest.mark.skipif(not Path(hm.REGISTRY_BIN).exists(), reason="docker-registry missing")
CLI = str(Path(sys.executable).with_name("ascend-build"))
REPO = "team/train"
RATE = 16 << 20  # bytes a second from the source: the cache's route to it is a slow link
LABELS = {"io.ascend-build.cell": "cann8.0.rc3-910b-warm", "io.ascend-build.cann": "8.0.RC3"}


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_BUILD_")}
    done = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def pull(host: str, arch_digest: str) -> int:
    """A node's pull of one arch: its manifest, then every blob read to its end; the bytes read.
    A blob whose GET fails as a 5xx or a broken connection is asked again, up to three times, as
    containerd does (a cold docker-registry cache may answer so while many ask it at once)."""
    reg = Registry(host)
    manifest = reg.manifest(REPO, arch_digest)
    read = 0
    for item in [manifest.data["config"], *manifest.data["layers"]]:
        for attempt in range(3):
            try:
                got = 0
                with reg.open_blob(REPO, item["digest"], item["size"]) as stream:
                    while chunk := stream.read(1 << 16):
                        got += len(chunk)
                break
            except Transient:
                if attempt == 2:
                    raise
        read += got
    return read


def at_once(host: str, digest: str, n: int) -> List[object]:
    """``n`` pulls at once: each one's bytes read, or the error that ended it (as text)."""
    results: List[object] = []

    def one() -> None:
        try:
            results.append(pull(host, digest))
        except Exception as exc:  # shown in the test's assertion, not lost in a thread's warning
            results.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=one) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return results


@pytest.fixture
def route(tmp_path):
    """(source, throttle, cache): an index of two arches in the source; the cache reaches it through the throttle."""
    source = hm.serve(tmp_path / "source")
    throttle = Throttle(source.host, RATE)
    cache = hm.serve(tmp_path / "cache", extra=f"proxy: {{remoteurl: 'http://{throttle.host}'}}\n")
    try:
        reg = Registry(source.host)
        base = hm.layer(os.urandom(3 << 20), "base.bin")  # noise: it does not compress
        children = {arch: hm.push_image(reg, REPO, None, {**LABELS, "arch": arch}, arch.encode() * 1000, arch=arch,
                                        base=[base, hm.layer(os.urandom(1 << 20), f"{arch}.bin")])
                    for arch in ("x86_64", "aarch64")}
        hm.push_index(reg, REPO, "v1", children)
        yield source, throttle, cache, children
    finally:
        cache.stop()
        throttle.stop()
        source.stop()


def blob_sizes(host: str, digests) -> Dict[str, int]:
    sizes: Dict[str, int] = {}
    for digest in digests:
        data = Registry(host).manifest(REPO, digest).data
        for item in [data["config"], *data["layers"]]:
            sizes[item["digest"]] = item["size"]
    return sizes


@pytest.mark.parametrize("warm", [True, False], ids=["warmed", "cold"])
def test_after_the_warm_eight_pulls_at_once_cost_the_source_one_copy_of_each_blob(route, warm):
    source, throttle, cache, children = route
    sizes = blob_sizes(source.host, children.values())
    image = sum(sizes.values())
    if warm:
        done = cli("mirror", f"{source.host}/{REPO}", cache.host, "--warm", "--json")
        assert done.returncode == 0, done.stderr
        figures = json.loads(done.stdout)
        assert figures["tags"] == ["v1"] and figures["blobs_fetched"] == len(sizes)
        assert figures["bytes_fetched"] == image and figures["blobs_held"] == 0
        # both arches are stored: the cache answers every blob from its storage, at no cost to the source
        before = throttle.bytes_down
        assert all(Registry(cache.host).holds_blob(REPO, d) for d in sizes)
        assert throttle.bytes_down - before < 8 << 10
    x86 = children["x86_64"]
    one_arch = sum(blob_sizes(source.host, [x86]).values())
    before = throttle.bytes_down
    results = at_once(cache.host, x86, 8)
    assert results == [one_arch] * 8
    pulls = throttle.bytes_down - before
    print(f"\nwarm={warm}: the source sent {throttle.bytes_down} bytes in all ({throttle.bytes_down / image:.2f} "
          f"of both arches' {image}), {pulls} during the 8 pulls ({pulls / one_arch:.2f} of the x86 image)")
    if warm:  # one copy of each blob (the warm's), plus what the hung-up asks had in flight
        assert pulls == 0  # the pulls read manifests by digest and blobs: all from the cache
        assert image <= throttle.bytes_down < 1.5 * image  # the asks' waste grows with the machine's load
    else:  # a cold cache: its own copy, and a stream from the source for each pull asking before it is stored
        assert pulls > 2 * one_arch


def test_a_warm_run_again_fetches_nothing(route):
    source, throttle, cache, children = route
    assert cli("mirror", f"{source.host}/{REPO}", f"{cache.host}/{REPO}", "--warm").returncode == 0
    before = throttle.bytes_down
    done = cli("mirror", f"{source.host}/{REPO}", cache.host, "--warm")
    assert done.returncode == 0, done.stderr
    assert "blobs: 0 fetched by the cache (0 bytes), 7 held already" in done.stdout, done.stdout
    assert "warmed v1: sha256:" in done.stdout and "statements were not checked" in done.stdout
    assert throttle.bytes_down - before < 32 << 10  # tag checks and manifests


def test_a_destination_that_is_not_a_cache_of_the_source_is_refused(route, tmp_path):
    source, _, _, _ = route
    other = hm.serve(tmp_path / "other")
    try:
        done = cli("mirror", f"{source.host}/{REPO}", other.host, "--warm")
    finally:
        other.stop()
    assert done.returncode == 1
    assert f"the cache {other.host}/{REPO} answers v1 with nothing" in done.stderr
    assert "fix:" in done.stderr and "proxy.remoteurl" in done.stderr


@pytest.mark.parametrize("destination,said", [
    ("oci:{tmp}/carry", "--warm needs a pull-through cache as DST, not the layout"),
    ("127.0.0.1:5999/other/repo", "names the repository 'other/repo', the source 'team/train'"),
])
def test_bad_warm_destinations_are_refused_before_anything_is_asked(destination, said, tmp_path):
    done = cli("mirror", f"127.0.0.1:5998/{REPO}", destination.format(tmp=tmp_path), "--warm")
    assert done.returncode == 2 and said in done.stderr and "fix:" in done.stderr


class NeverStores:
    """A cache that answers the tag and the manifests but never stores a blob (always 200)."""

    name = "cache.example:5000"

    def __init__(self, manifests):
        self.manifests, self.asked = manifests, []

    def manifest(self, repository, reference):
        return self.manifests[reference]

    def holds_blob(self, repository, digest):
        self.asked.append(digest)
        return False

    def blob_deadline(self, size):
        return 0.0


def test_a_cache_that_never_stores_a_blob_is_named_with_what_is_and_is_not_stored():
    from builder.errors import UserError
    from builder.node import cache_warm, mirror
    from builder.registry import OCI_MANIFEST, Manifest

    data = {"config": {"digest": "sha256:" + "c" * 64, "size": 10},
            "layers": [{"digest": "sha256:" + "a" * 64, "size": 1 << 20}]}
    image = Manifest("sha256:" + "1" * 64, OCI_MANIFEST, json.dumps(data).encode(), data)
    cache = NeverStores({"v1": image, image.digest: image})
    source = mirror.RegistryPlace(Registry("127.0.0.1:5000"), REPO)
    unit = mirror.Unit("v1", image, [mirror.Image(image, {}, None)])
    pauses: List[float] = []
    with pytest.raises(UserError) as failed:
        cache_warm._warm_unit(source, cache, unit, cache_warm.Warmed(), pauses.append)  # type: ignore[arg-type]
    assert f"the cache cache.example:5000/{REPO} did not store sha256:{'c' * 64} (10 bytes) of v1" in failed.value.message
    assert "0 blob(s) are stored, 2 not yet" in failed.value.message and "run the command again" in failed.value.fix
    assert cache.asked == [f"sha256:{'c' * 64}", f"sha256:{'a' * 64}", f"sha256:{'c' * 64}"] and pauses == [0.05]


def test_with_a_key_an_image_without_statements_is_refused_and_the_cache_is_asked_nothing(route, tmp_path):
    from builder.trust import signing

    source, throttle, cache, _ = route
    saved = os.environ.pop(signing.PASSPHRASE_ENV, None)
    try:
        _, public = signing.generate(tmp_path, "team")
    finally:
        if saved is not None:
            os.environ[signing.PASSPHRASE_ENV] = saved
    before = throttle.bytes_down
    done = cli("mirror", f"{source.host}/{REPO}", cache.host, "--warm", "--trust-key", str(public))
    assert done.returncode == 1, done.stdout
    assert "do not verify; the cache was not asked for anything" in done.stderr and "v1 (sha256:" in done.stderr
    assert throttle.bytes_down == before and "/v2/team/train/" not in cache.log()
