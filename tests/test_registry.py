"""The registry client as people meet registries: token auth, anonymous pulls, pages of tags,
forged bytes, credentials in Docker's order, redirects and realms that must not get them.

The engine tests run against a real distribution registry with token auth on loopback
(tests/support/registry.py): anonymous pull allowed under ``public/``, refused elsewhere.
The images pushed there carry the labels of a validated NPU image, which cannot exist on
this machine (``fake_npu``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.support import registry as hr
from builder.images import matrix, plan, render
from builder.errors import UserError
from builder.registry import Registry, credentials, docker_config_credentials, is_loopback
from tests.support.node import SMI_910B3, make_node

CLI = str(Path(sys.executable).with_name("ascend-build"))
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """Nothing in the environment or a Docker config: the client is anonymous."""
    monkeypatch.delenv("ASCEND_BUILD_REGISTRY_USER", raising=False)
    monkeypatch.delenv("ASCEND_BUILD_REGISTRY_PASSWORD", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    return {"DOCKER_CONFIG": str(tmp_path / "no-docker-config"), "ASCEND_BUILD_REGISTRY_USER": ""}


def validated_npu_labels() -> dict:
    cell = next(c for c in matrix.load(ROOT / "matrix").cells if c.cann == "8.0.RC3" and c.arch == "x86_64")
    labels = dict(plan.labels(cell, "npu", render.content_hash(cell)))
    labels.update({"io.ascend-build.validated": "true", "io.ascend-build.validated-device": "npu",
                   "io.ascend-build.validated-tiers": "versions,libraries,import,device,train,collective"})
    return labels


@pytest.fixture(scope="module")
def published(token_registry, engine, base_image, tmp_path_factory):
    """One labelled image under public/ (tags v0..v4) and private/ (v0), pushed with credentials."""
    folder = tmp_path_factory.mktemp("image")
    (folder / "Dockerfile").write_text(f"FROM {base_image}\n")
    image = engine.build(folder, labels=validated_npu_labels(), log_path=folder / "build.log")
    name = uuid.uuid4().hex[:8]
    public, private = f"public/reg-{name}", f"private/reg-{name}"
    digests, refs = {}, {r: f"{token_registry.host}/{r}:v0" for r in (public, private)}
    for repository, ref in refs.items():
        engine.tag(image, ref)
        digests[repository] = engine.push(ref, username=token_registry.username, password=token_registry.password)
    writer = Registry(token_registry.host, token_registry.username, token_registry.password)
    first = writer.manifest(public, "v0")
    for n in range(1, 5):
        writer.put_manifest(public, f"v{n}", first.body, first.media_type)
    yield public, private, digests
    for ref in refs.values():
        engine.untag(ref)


@pytest.mark.engine
def test_anonymous_pull_of_a_public_repository_over_several_pages_of_tags(token_registry, published, no_credentials):
    public, _, digests = published
    before = len(token_registry.tokens.requests)
    reg = Registry(token_registry.host, page_size=2)
    assert reg.tags(public) == ["v0", "v1", "v2", "v3", "v4"]  # three pages of at most two
    info = reg.inspect(public, "v3", "x86_64")
    assert info and info.digest == digests[public] and info.labels["io.ascend-build.validated"] == "true"
    asked = token_registry.tokens.requests[before:]
    assert asked and all(r["authorization"] == "" for r in asked)  # anonymous tokens only


@pytest.mark.engine
def test_anonymous_access_to_a_private_repository_is_refused_clearly(token_registry, published, no_credentials):
    _, private, _ = published
    with pytest.raises(UserError) as refused:
        Registry(token_registry.host).tags(private)
    assert refused.value.message == (f"registry {token_registry.host}: refused anonymous access "
                                     f"for /v2/{private}/tags/list")
    assert "docker login" in refused.value.fix
    with_credentials = Registry(token_registry.host, token_registry.username, token_registry.password)
    assert with_credentials.tags(private) == ["v0"]


@pytest.mark.engine
def test_wrong_credentials_are_refused_by_the_token_service(token_registry, published, no_credentials):
    with pytest.raises(UserError) as refused:
        Registry(token_registry.host, token_registry.username, "wrong").tags(published[1])
    assert "its token service refused the credentials given (HTTP 401)" in refused.value.message


def _rewrite(path: Path, old: bytes, new: bytes) -> bytes:
    """Replace bytes in a stored blob, same length (the registry serves what is on disk)."""
    original = path.read_bytes()
    assert len(old) == len(new) and original.count(old) >= 1
    path.write_bytes(original.replace(old, new, 1))
    return original


@pytest.mark.engine
def test_a_config_whose_bytes_do_not_match_its_digest_is_refused(token_registry, published, no_credentials):
    public, _, _ = published
    reg = Registry(token_registry.host)
    config_digest = reg.manifest(public, "v0").data["config"]["digest"]
    blob = hr.blob_path(token_registry.root, config_digest)
    original = _rewrite(blob, b'"io.ascend-build.min-driver":"24.1.RC3"', b'"io.ascend-build.min-driver":"10.0.RC1"')
    try:
        with pytest.raises(UserError) as forged:
            Registry(token_registry.host).inspect(public, "v0", "x86_64")
    finally:
        blob.write_bytes(original)
    assert f"the config blob {config_digest} of {public} does not hash to its digest" in forged.value.message
    info = Registry(token_registry.host).inspect(public, "v0", "x86_64")
    assert info and info.labels["io.ascend-build.min-driver"] == "24.1.RC3"


@pytest.mark.engine
def test_a_manifest_whose_bytes_do_not_match_its_digest_is_refused(token_registry, published, no_credentials):
    public, _, digests = published
    blob = hr.blob_path(token_registry.root, digests[public])
    size = json.loads(blob.read_bytes())["config"]["size"]  # still a valid manifest, other bytes
    original = _rewrite(blob, f'"size": {size}'.encode(), f'"size": {size + 1 if size % 10 != 9 else size - 1}'.encode())
    try:
        with pytest.raises(UserError) as forged:
            Registry(token_registry.host).manifest(public, "v1")
        with pytest.raises(UserError):
            Registry(token_registry.host).manifest(public, digests[public])
    finally:
        blob.write_bytes(original)
    assert "hashes to sha256:" in forged.value.message and f"not {digests[public]}" in forged.value.message


@pytest.mark.engine
def test_pull_works_anonymously_against_the_token_registry_fake_npu(token_registry, published, no_credentials,
                                                                     engine, tmp_path):
    public, private, digests = published
    node = make_node(tmp_path / "node", arch="x86_64", smi=SMI_910B3)
    env = {**os.environ, **no_credentials}
    done = subprocess.run([CLI, "pull", "--cann", "8.0.RC3", "--registry", f"{token_registry.host}/{public}",
                           "--root", str(node), "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["digest"] == digests[public] and result["ref"] == f"{token_registry.host}/{public}@{digests[public]}"
    assert engine.labels(result["ref"])["io.ascend-build.validated"] == "true"
    engine.untag(result["ref"])
    refused = subprocess.run([CLI, "pull", "--cann", "8.0.RC3", "--registry", f"{token_registry.host}/{private}",
                              "--root", str(node)], capture_output=True, text=True, env=env, timeout=300)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"registry {token_registry.host}: refused anonymous access for /v2/{private}/tags/list" in refused.stderr


# --- servers that must not get what they ask for (plain loopback HTTP servers) -----------


class Recorder(BaseHTTPRequestHandler):
    """Answers from a script: path -> (status, headers, body); records every request."""

    script: dict = {}
    seen: list = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        status, headers, body = type(self).script.get(self.path.split("?")[0], (404, {}, b""))
        if callable(status):
            status, headers, body = status(self)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def recorder(script: dict):
    handler = type("Handler", (Recorder,), {"script": script, "seen": []})
    server, port = hr.serve(handler)
    return server, port, handler


def test_credentials_never_follow_a_redirect_to_another_host(no_credentials):
    other, other_port, other_seen = recorder({"/tags": (200, {}, b'{"tags": ["elsewhere"]}')})

    def tags(handler):
        if handler.headers.get("Authorization") is None:
            return 401, {"WWW-Authenticate": 'Basic realm="test"'}, b""
        return 302, {"Location": f"http://localhost:{other_port}/tags"}, b""

    first, port, first_seen = recorder({"/v2/r/tags/list": (tags, None, None)})
    try:
        found = Registry(f"127.0.0.1:{port}", "user", "secret").tags("r")
    finally:
        first.shutdown()
        other.shutdown()
    assert found == ["elsewhere"]
    assert first_seen.seen[-1][1].startswith("Basic ")     # the registry itself got the credentials
    assert other_seen.seen == [("/tags", None)]             # the other host did not


@pytest.mark.parametrize("realm", ["file:///etc/passwd", "http://token.example/token", "ftp://127.0.0.1/t", "/token",
                                   "http://127.0.0.1:80@192.0.2.2/token"])  # user@host: the host is 192.0.2.2
def test_a_token_realm_that_is_not_https_gets_nothing(realm, no_credentials):
    server, port, handler = recorder({"/v2/r/tags/list": (401, {"WWW-Authenticate": f'Bearer realm="{realm}"'}, b"")})
    try:
        with pytest.raises(UserError) as refused:
            Registry(f"127.0.0.1:{port}", "user", "secret").tags("r")
    finally:
        server.shutdown()
    assert f"its token realm {realm!r} is not an HTTPS address; no credentials were sent there" in refused.value.message
    assert [auth for _, auth in handler.seen] == [None]


def test_a_manifest_announced_larger_than_the_limit_is_not_read(no_credentials):
    big = {"Content-Length": str(64 << 20), "Docker-Content-Digest": "sha256:" + "0" * 64}
    server, port, _ = recorder({"/v2/r/manifests/t": (200, big, b"{}")})
    try:
        with pytest.raises(UserError) as refused:
            Registry(f"127.0.0.1:{port}").manifest("r", "t")
    finally:
        server.shutdown()
    assert "is announced as 67108864 bytes, more than the 4194304 allowed" in refused.value.message


# --- credentials, in Docker's order ------------------------------------------------------


def write_helper(folder: Path, name: str, user: str) -> None:
    """A credential helper speaking Docker's protocol: server URL on stdin, JSON on stdout."""
    path = folder / f"docker-credential-{name}"
    path.write_text("#!/bin/sh\nread server\n"
                    f'printf \'{{"ServerURL":"%s","Username":"{user}","Secret":"s-%s"}}\' "$server" "$server"\n')
    path.chmod(0o755)


@pytest.fixture
def docker_config(tmp_path, monkeypatch, no_credentials):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, user in (("helper", "from-helper"), ("store", "from-store")):
        write_helper(bin_dir, name, user)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    (tmp_path / "docker").mkdir()

    def write(config: dict) -> None:
        (tmp_path / "docker" / "config.json").write_text(json.dumps(config))
    return write


def basic(user: str, password: str) -> dict:
    import base64
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_cred_helpers_come_before_the_store_and_the_auths(docker_config):
    docker_config({"credHelpers": {"reg.example:5000": "helper"}, "credsStore": "store",
                   "auths": {"reg.example:5000": basic("from-auths", "pw")}})
    assert docker_config_credentials("reg.example:5000") == ("from-helper", "s-reg.example:5000")
    assert docker_config_credentials("other.example") == ("from-store", "s-other.example")


def test_auths_are_used_when_no_helper_knows_the_host(docker_config, tmp_path):
    docker_config({"auths": {"https://reg.example:5000/v1/": basic("from-auths", "pw")}})
    assert docker_config_credentials("reg.example:5000") == ("from-auths", "pw")
    assert docker_config_credentials("reg.example") is None


def test_docker_hub_credentials_are_found_under_dockers_own_key(docker_config):
    docker_config({"auths": {"https://index.docker.io/v1/": basic("hub-user", "pw")}})
    assert docker_config_credentials("docker.io") == ("hub-user", "pw")
    docker_config({"credHelpers": {"https://index.docker.io/v1/": "helper"}})
    assert docker_config_credentials("docker.io") == ("from-helper", "s-https://index.docker.io/v1/")


def test_arguments_then_environment_then_docker_config(docker_config, monkeypatch):
    docker_config({"auths": {"reg.example": basic("from-auths", "pw")}})
    assert credentials("reg.example") == ("from-auths", "pw")
    monkeypatch.setenv("ASCEND_BUILD_REGISTRY_USER", "from-env")
    monkeypatch.setenv("ASCEND_BUILD_REGISTRY_PASSWORD", "env-pw")
    assert credentials("reg.example") == ("from-env", "env-pw")
    assert credentials("reg.example", "from-args", "args-pw") == ("from-args", "args-pw")


def test_a_helper_name_that_is_a_path_is_never_run(docker_config, tmp_path):
    docker_config({"credHelpers": {"reg.example": "../../bin/sh"}, "auths": {"reg.example": basic("a", "b")}})
    assert docker_config_credentials("reg.example") is None


def test_docker_hub_names_reach_the_hub_api_and_its_library_namespace():
    reg = Registry("docker.io")
    assert (reg.base, reg.repository("ubuntu"), reg.repository("ascend/cann")) == (
        "https://registry-1.docker.io", "library/ubuntu", "ascend/cann")
    assert Registry("127.0.0.1:5000").base == "http://127.0.0.1:5000"
    assert Registry("127.0.0.1.example.com").base == "https://127.0.0.1.example.com"


def test_a_registry_that_trickles_is_cut_off_at_the_deadline(no_credentials):
    import time
    server, port = hr.serve(hr.Trickle)
    started = time.monotonic()
    try:
        with pytest.raises(UserError) as cut:
            Registry(f"127.0.0.1:{port}", deadline=1.0).tags("r")
    finally:
        server.shutdown()
    assert "not there within the deadline" in cut.value.message
    assert time.monotonic() - started < 30  # not the 200 s the server would take


def test_a_redirect_from_https_down_to_http_is_refused():
    import io
    import urllib.error
    import urllib.request
    from email.message import Message
    from builder.registry import _SameHostAuth
    request = urllib.request.Request("https://registry.example/v2/r/tags/list", headers={"Authorization": "Bearer t"})
    with pytest.raises(urllib.error.HTTPError, match="refusing a redirect from HTTPS to HTTP"):
        _SameHostAuth().redirect_request(request, io.BytesIO(), 302, "Found", Message(), "http://registry.example/x")
    same = _SameHostAuth().redirect_request(request, io.BytesIO(), 302, "Found", Message(),
                                            "https://registry.example/v2/r/tags/list?last=a")
    other = _SameHostAuth().redirect_request(request, io.BytesIO(), 302, "Found", Message(), "https://cdn.example/blob")
    assert same.get_header("Authorization") == "Bearer t" and other.get_header("Authorization") is None


@pytest.mark.parametrize("to", ["http://cdn.example/blob", "http://192.0.2.2:5000/blob", "http://127.0.0.1:80@192.0.2.2/b"])
def test_a_loopback_registry_may_not_redirect_in_plain_http_off_loopback(to):
    import io
    import urllib.error
    import urllib.request
    from email.message import Message
    from builder.registry import _SameHostAuth
    request = urllib.request.Request("http://127.0.0.1:5000/v2/r/blobs/sha256:0")
    with pytest.raises(urllib.error.HTTPError, match="refusing a plain-HTTP redirect to a host that is not loopback"):
        _SameHostAuth().redirect_request(request, io.BytesIO(), 302, "Found", Message(), to)
    for fine in ("http://localhost:5001/blob", "http://127.0.0.2/blob", "https://cdn.example/blob"):
        assert _SameHostAuth().redirect_request(request, io.BytesIO(), 302, "Found", Message(), fine) is not None


def test_a_refused_redirect_says_where_it_pointed_why_it_was_not_followed_and_the_fix(no_credentials):
    """A loopback registry answering with a redirect to a plain-HTTP host elsewhere: the client
    never goes there, and the error names the redirect, not a bare "answered HTTP 302"."""
    from http.server import BaseHTTPRequestHandler

    class Elsewhere(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", "http://192.0.2.2:5000" + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server, port = hr.serve(Elsewhere)
    try:
        with pytest.raises(UserError) as refused:
            Registry(f"127.0.0.1:{port}").tags("r")
    finally:
        server.shutdown()
    assert refused.value.message == (f"registry 127.0.0.1:{port}: its answer to GET /v2/r/tags/list redirects to "
                                     "192.0.2.2:5000, not followed: refusing a plain-HTTP redirect to a host that "
                                     "is not loopback")
    assert "over HTTPS" in refused.value.fix


# --- hostile registries: malformed answers are refused, never a traceback -----------------------


def test_a_registry_name_with_a_user_part_is_no_host():
    assert not is_loopback("127.0.0.1:80@192.0.2.2")
    with pytest.raises(UserError) as refused:
        Registry("127.0.0.1:80@192.0.2.2")
    assert refused.value.message == "'127.0.0.1:80@192.0.2.2' is not a registry host"


def test_nesting_deeper_than_pythons_stack_is_a_malformed_answer(no_credentials):
    deep = b"[" * 100000 + b"]" * 100000
    server, port, _ = recorder({"/v2/r/tags/list": (200, {}, b'{"tags": ' + deep + b"}")})
    try:
        with pytest.raises(UserError) as refused:
            Registry(f"127.0.0.1:{port}").tags("r")
    finally:
        server.shutdown()
    assert refused.value.message.endswith("sent something other than a JSON object for the tags of r")


def test_tags_no_image_can_have_are_left_out(no_credentials):
    body = json.dumps({"tags": ["good-1.0", "bad\n::error::x", "../etc", "-dash", "ok_2"]}).encode()
    server, port, _ = recorder({"/v2/r/tags/list": (200, {}, body)})
    try:
        assert Registry(f"127.0.0.1:{port}").tags("r") == ["good-1.0", "ok_2"]
    finally:
        server.shutdown()


def test_an_index_whose_manifests_are_not_a_list_names_no_arch(no_credentials):
    body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": 5}).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    server, port, _ = recorder({"/v2/r/manifests/t": (200, {"Docker-Content-Digest": digest}, body)})
    try:
        info = Registry(f"127.0.0.1:{port}").inspect("r", "t", "x86_64")
    finally:
        server.shutdown()
    assert info is not None and info.labels == {} and info.architecture == "none of: "


def test_a_docker_config_nested_past_any_need_is_a_clear_error(docker_config, tmp_path):
    (tmp_path / "docker" / "config.json").write_text('{"auths": ' + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(UserError) as refused:
        docker_config_credentials("reg.example")
    assert str(tmp_path / "docker" / "config.json") in refused.value.message
    assert "nested deeper than 64 levels" in refused.value.message


def test_a_content_length_of_absurd_length_is_refused_not_converted(no_credentials):
    server, port = hr.serve(hr.answering(200, {"Content-Length": "9" * 5000}, b"{}"))
    try:
        with pytest.raises(UserError) as refused:
            Registry(f"127.0.0.1:{port}").tags("r")
    finally:
        server.shutdown()
    assert "is announced as over 999999999999999999 bytes, more than the 4194304 allowed" in refused.value.message


# --- deadlines: per answer (head included) and per command ---------------------------------------


def test_a_registry_trickling_its_status_line_and_headers_is_cut_off_at_the_deadline(no_credentials):
    import time
    server, port = hr.serve(hr.TrickleHead)
    started = time.monotonic()
    try:
        with pytest.raises(UserError) as cut:
            Registry(f"127.0.0.1:{port}", timeout=5, deadline=1.0).tags("r")
    finally:
        server.shutdown()
    assert "not there within the deadline" in cut.value.message
    assert time.monotonic() - started < 10  # not the 25 s the head takes: no read ever waits 5 s


def slow_registry(tags: int, per_answer: float):
    """A registry of ``tags`` tags of one image, every answer dripping over ``per_answer`` seconds."""
    config = json.dumps({"architecture": "arm64", "config": {"Labels": {}}}).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"digest": config_digest, "size": len(config)}, "layers": []}).encode()
    routes = {"/v2/r/tags/list": json.dumps({"tags": [f"t{i}" for i in range(tags)]}).encode(),
              f"/v2/r/blobs/{config_digest}": config, **{f"/v2/r/manifests/t{i}": manifest for i in range(tags)}}
    return hr.serve(hr.slow_answers(routes, per_answer))


@pytest.mark.parametrize("how", ["option", "environment"])
def test_pull_from_a_slow_drip_registry_stops_at_the_commands_deadline(tmp_path, no_credentials, how):
    """40 tags, each answer 0.5 s: no request comes near its own deadline, the whole listing takes 40 s."""
    import time
    server, port = slow_registry(40, 0.5)
    env = {**os.environ, **no_credentials, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    args = [CLI, "pull", "--registry", f"127.0.0.1:{port}/r", "--root", str(tmp_path)]
    if how == "option":
        args += ["--deadline", "3"]
    else:
        env["ASCEND_BUILD_DEADLINE"] = "3"
    started = time.monotonic()
    try:
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    finally:
        server.shutdown()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "the command's deadline of 3 s passed" in done.stderr and "--deadline" in done.stderr
    assert time.monotonic() - started < 15


def test_index_against_a_trickling_registry_stops_at_the_commands_deadline(no_credentials):
    import time
    server, port = hr.serve(hr.Trickle)
    env = {**os.environ, **no_credentials, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    started = time.monotonic()
    try:
        done = subprocess.run([CLI, "index", f"127.0.0.1:{port}/r:cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1",
                               "--deadline", "2"], capture_output=True, text=True, env=env, timeout=60)
    finally:
        server.shutdown()
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    assert "the command's deadline of 2 s passed" in done.stderr
    assert time.monotonic() - started < 15


def test_a_blob_stream_slower_than_the_floor_is_cut_whatever_size_it_declares(monkeypatch):
    """The throughput floor counts the bytes that came, not the size the source declared: a blob
    declared as 2**62 bytes that trickles is cut once it falls behind, not held for its declared size."""
    import io

    from builder import registry as registry_module

    clock = [1000.0]
    monkeypatch.setattr(registry_module.time, "monotonic", lambda: clock[0])

    class Trickle(io.RawIOBase):
        def read(self, n=-1):
            clock[0] += 10.0  # ten seconds a byte
            return b"x"

    stream = registry_module.Checked(Trickle(), "sha256:" + "0" * 64, 2 ** 62, "r/x@sha256:0", floor=1 << 20, grace=30)
    got = [stream.read(1), stream.read(1), stream.read(1)]  # 30 s: within the grace
    assert got == [b"x", b"x", b"x"]
    with pytest.raises(registry_module.BadBlob, match=r"came slower than 1048576 bytes a second: 4 bytes in 40 s"):
        stream.read(1)
    fast = registry_module.Checked(io.BytesIO(b"abc"), "sha256:" + hashlib.sha256(b"abc").hexdigest(), 3, "r/y",
                                   floor=1 << 20, grace=30)
    assert fast.read() == b"abc" and fast.read() == b""  # a whole blob within the grace passes


def test_every_blob_stream_open_blob_opens_is_held_to_the_floor(monkeypatch):
    """`open_blob` (what mirror streams every layer through) hands out its stream with the throughput
    floor and the request deadline as its grace, not a bare stream."""
    import contextlib
    import io

    from builder import registry as registry_module

    @contextlib.contextmanager
    def served(self, repository, digest, deadline, size, *rest):
        yield io.BytesIO(b""), None

    monkeypatch.setattr(registry_module.Registry, "_blob_get", served)
    source = registry_module.Registry("127.0.0.1:1", deadline=45.0)
    with source.open_blob("r", "sha256:" + "0" * 64, 2 ** 62) as stream:
        assert (stream._floor, stream._grace) == (registry_module.STREAM_FLOOR, 45.0)


@pytest.mark.parametrize("repository", ["../x", "a?b", "a#b", "UPPER", "a\nb", "a//b", "-a", "a/", "a" * 256, "a b"])
def test_a_repository_name_outside_the_grammar_never_reaches_a_url(repository, no_credentials):
    client = Registry("127.0.0.1:9")  # nothing listens: a request would fail otherwise
    for call in (lambda: client.tags(repository), lambda: client.manifest(repository, "t"),
                 lambda: client.put_blob(repository, b"x")):
        with pytest.raises(UserError) as refused:
            call()
        assert "is not a repository name" in refused.value.message and refused.value.exit_code == 2


@pytest.mark.parametrize("reference", ["../../v2/other/manifests/x", "t?x=1", "t#f", ".hidden", "a" * 129, "sha256:ABC",
                                       "t\r\nX-Injected: 1"])
def test_a_reference_neither_tag_nor_digest_never_reaches_a_url(reference, no_credentials):
    client = Registry("127.0.0.1:9")
    for call in (lambda: client.manifest("ok/name", reference),
                 lambda: client.put_manifest("ok/name", reference, b"{}", "application/json")):
        with pytest.raises(UserError, match="is neither a tag nor a sha256 digest"):
            call()
