"""`ascend-build k8s mirror-config`: containerd's hosts.toml and Docker's registry-mirrors, read
back with a real TOML parser and by containerd's own rules (core/remotes/docker/config/hosts.go),
and a pull-through cache in front of a source registry: the real distribution registry
(`proxy: remoteurl`) on loopback, N pulls of an image's blobs through it, the source's blob GETs
counted from its log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from builder.errors import UserError
from builder.k8s import node_mirrors
from builder.registry import Registry
from tests.support import mirror as hm

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
CLI = str(Path(sys.executable).with_name("ascend-build"))


def cli(*args) -> subprocess.CompletedProcess:
    done = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_hosts_toml_names_the_mirrors_in_order_and_the_registry_last(tmp_path):
    done = cli("k8s", "mirror-config", "--registry", "registry.example:5000", "--mirror", "http://10.0.0.5:5000",
               "--mirror", "https://cache.example/proxy/", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    hosts = tmp_path / "certs.d" / "registry.example:5000" / "hosts.toml"
    text = hosts.read_text()
    data = tomllib.loads(text)  # a real TOML parser
    assert data["server"] == "https://registry.example:5000"
    assert list(data["host"]) == ["http://10.0.0.5:5000", "https://cache.example/proxy"]
    assert all(h["capabilities"] == ["pull", "resolve"] for h in data["host"].values())
    # by containerd's rules: the host tables in file order, then the server; /v2 appended
    assert [(h.scheme, h.host, h.path, h.capabilities) for h in node_mirrors.containerd_hosts(text)] == [
        ("http", "10.0.0.5:5000", "/v2", ("pull", "resolve")),
        ("https", "cache.example", "/proxy/v2", ("pull", "resolve")),
        ("https", "registry.example:5000", "/v2", ("pull", "resolve", "push", "referrers"))]
    daemon = json.loads((tmp_path / "daemon.json").read_text())
    assert daemon == {"registry-mirrors": ["http://10.0.0.5:5000", "https://cache.example/proxy"]}
    assert "Docker uses registry-mirrors for Docker Hub's images only" in done.stderr


def test_printed_without_out_and_a_loopback_registry_is_plain_http():
    done = cli("k8s", "mirror-config", "--registry", "127.0.0.1:5000", "--mirror", "http://127.0.0.1:5001")
    assert done.returncode == 0, done.stderr
    assert "# /etc/containerd/certs.d/127.0.0.1:5000/hosts.toml" in done.stdout
    assert 'server = "http://127.0.0.1:5000"' in done.stdout and '"registry-mirrors"' in done.stdout


@pytest.mark.parametrize("flag,value,said", [
    ("--mirror", 'http://x"]\nserver = "https://evil', "is not http(s)://HOST[:PORT][/PATH]"),
    ("--mirror", "ftp://cache.example", "is not http(s)://HOST[:PORT][/PATH]"),
    ("--mirror", "http://user:pw@cache.example", "is not http(s)://HOST[:PORT][/PATH]"),
    ("--mirror", "10.0.0.5:5000", "is not http(s)://HOST[:PORT][/PATH]"),
    ("--registry", "https://registry.example", "is not HOST[:PORT]"),
    ("--registry", "a b", "is not HOST[:PORT]"),
])
def test_bad_input_is_refused_before_anything_is_written(flag, value, said, tmp_path):
    args = {"--registry": "registry.example", "--mirror": "http://10.0.0.5:5000", flag: value}
    done = cli("k8s", "mirror-config", *[x for k, v in args.items() for x in (k, v)], "--out", str(tmp_path))
    assert done.returncode == 2 and said in done.stderr and "fix:" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_containerd_rules_refuse_an_unknown_capability():
    with pytest.raises(ValueError):
        node_mirrors.containerd_hosts('server = "https://r"\n[host."https://m"]\n  capabilities = ["fetch"]\n')
    with pytest.raises(UserError):
        node_mirrors.configure("registry.example", [])


@pytest.fixture(scope="module")
def source_and_cache(tmp_path_factory):
    """A source registry (no auth) holding one image, and a pull-through cache in front of it."""
    if not Path(hm.REGISTRY_BIN).exists():
        pytest.skip("docker-registry missing")
    root = tmp_path_factory.mktemp("pull-through")
    source = hm.serve(root / "source")
    cache = None
    try:
        cache = hm.serve(root / "cache", extra=f"proxy: {{remoteurl: 'http://{source.host}'}}\n")
        base = hm.layer(os.urandom(1 << 20), "base.bin")  # 1 MiB of noise: it does not compress
        hm.push_image(Registry(source.host), "team/train", "v1", {"io.ascend-build.cell": "c"}, b"top", base=[base])
        yield source, cache
    finally:
        if cache is not None:
            cache.stop()
        source.stop()


def pull_blobs(host: str, repo: str, tag: str) -> int:
    """What a node's pull reads: the manifest, then every blob (config and layers); the bytes read."""
    reg = Registry(host)
    manifest = reg.manifest(repo, tag)
    read = 0
    for item in [manifest.data["config"], *manifest.data["layers"]]:
        with reg.open_blob(repo, item["digest"], item["size"]) as stream:
            while chunk := stream.read(1 << 16):
                read += len(chunk)
    return read


def gets_by_pull(source, cache, blobs, size, pulls):
    """Source blob GETs each of ``pulls`` pulls through the cache cost: [{blob: GETs}, ...]."""
    costs, before = [], source.blob_gets()
    for _ in range(pulls):
        assert pull_blobs(cache.host, "team/train", "v1") == size
        now = source.blob_gets()
        costs.append({b: now.get(b, 0) - before.get(b, 0) for b in blobs})
        before = now
    return costs


def test_n_pulls_through_the_cache_cost_the_source_one_to_two_copies_of_each_blob_whatever_n(source_and_cache):
    source, cache = source_and_cache
    manifest = Registry(source.host).manifest("team/train", "v1")
    blobs = [manifest.data["config"]["digest"], *(x["digest"] for x in manifest.data["layers"])]
    size = sum(x["size"] for x in [manifest.data["config"], *manifest.data["layers"]])
    costs = gets_by_pull(source, cache, blobs, size, 8)  # N = 8, one node after another; the first is N = 1
    total = {b: sum(c[b] for c in costs) for b in blobs}
    print(f"\nsource blob GETs (config, layers), {size} bytes an image: N=1 {[costs[0][b] for b in blobs]}, "
          f"N=8 {[total[b] for b in blobs]}; per pull {[sum(c.values()) for c in costs]}")
    # distribution 2.8's proxy fetches a blob it does not hold twice (one stream to the client, one
    # to its storage), then serves it from its storage: the cost does not grow with N. (A pull that
    # comes while the cache still stores a blob fetches it again: the bound leaves room for one.)
    assert all(1 <= costs[0][b] <= 2 for b in blobs) and all(total[b] <= 3 for b in blobs)
    assert [sum(c.values()) for c in costs[3:]] == [0] * 5
    assert sum(total.values()) < 8 * len(blobs)  # what 8 pulls from the source itself would cost


def test_concurrent_first_pulls_through_the_cache_are_measured_and_later_pulls_cost_nothing(tmp_path):
    """8 nodes pulling at once, before the cache holds the blobs: each in-flight pull is fetched from
    the source (distribution 2.8); once stored, a pull costs the source nothing."""
    source = hm.serve(tmp_path / "source")
    cache = hm.serve(tmp_path / "cache", extra=f"proxy: {{remoteurl: 'http://{source.host}'}}\n")
    try:
        base = hm.layer(os.urandom(1 << 20), "base.bin")
        hm.push_image(Registry(source.host), "team/train", "v1", {}, b"top", base=[base])
        results: list = []
        threads = [threading.Thread(target=lambda: results.append(pull_blobs(cache.host, "team/train", "v1")))
                   for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert len(results) == 8 and len(set(results)) == 1
        gets = source.blob_gets()
        print(f"\n8 concurrent first pulls: source blob GETs per blob {sorted(gets.values())}")
        assert all(n >= 1 for n in gets.values()) and len(gets) == 3
        manifest = Registry(source.host).manifest("team/train", "v1")
        blobs = [manifest.data["config"]["digest"], *(x["digest"] for x in manifest.data["layers"])]
        later = gets_by_pull(source, cache, blobs, results[0], 3)
        assert sum(later[-1].values()) == 0, later
    finally:
        cache.stop()
        source.stop()
