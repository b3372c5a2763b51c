"""Shared pytest fixtures.

Engine part (fixtures `engine`, `registry`, `base_image`): tests marked
`pytest.mark.engine` use a real Docker Engine and a real registry on loopback,
because mocks of Docker hide exactly the failures (secrets, auth, digests)
these tests exist for. `.ci/run` starts the engine via scripts/setup-engine.sh.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from builder.errors import UserError

# --- engine fixtures ------------------------------------------------------------

BASE_IMAGE = "local/debian:12"
REGISTRY_BIN = "/usr/bin/docker-registry"


@pytest.fixture(scope="session")
def engine():
    """A connected Engine; the session skips engine tests when none answers."""
    from builder.engine import Engine

    try:
        return Engine.connect()
    except UserError as e:
        pytest.skip(f"{e.message} (fix: {e.fix}; or run scripts/setup-engine.sh as root)")


@pytest.fixture(scope="session")
def base_image(engine) -> str:
    """The locally made base image (no image can be pulled on the build machine)."""
    if engine.image_id(BASE_IMAGE) is None:
        pytest.skip(f"base image {BASE_IMAGE} missing: run scripts/setup-engine.sh as root")
    return BASE_IMAGE


@dataclass(frozen=True)
class Registry:
    host: str  # "127.0.0.1:PORT"; Docker treats loopback registries as insecure (HTTP ok)
    username: str
    password: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_registry(root: Path, config_text: str):
    """Start docker-registry with ``config_text`` (its address is in it); the process."""
    config = root / "config.yml"
    config.write_text(config_text)
    log = open(root / "registry.log", "w")
    proc = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdout=log, stderr=log)
    log.close()
    return proc


def _wait_up(proc, port: int, root: Path) -> None:
    no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + 20
    while True:
        try:
            no_proxy.open(f"http://127.0.0.1:{port}/v2/", timeout=1)
            return
        except urllib.error.HTTPError:  # 401: up, and asking for auth
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"registry did not start: {(root / 'registry.log').read_text()}")
            time.sleep(0.1)


def _stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    """A real registry (Debian's docker-registry) with htpasswd auth on loopback."""
    if not Path(REGISTRY_BIN).exists() or not shutil.which("htpasswd"):
        pytest.skip("docker-registry or htpasswd missing: run scripts/setup-engine.sh as root")
    root = tmp_path_factory.mktemp("registry")
    user, password = "ascend", "pw-" + root.name
    htpasswd = subprocess.run(["htpasswd", "-Bbn", user, password], check=True,
                              capture_output=True, text=True).stdout
    (root / "htpasswd").write_text(htpasswd)
    port = _free_port()
    proc = _serve_registry(root, (
        "version: 0.1\n"
        "log: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}', secret: test-only}}\n"
        f"auth: {{htpasswd: {{realm: ascend-build-test, path: {root / 'htpasswd'}}}}}\n"))
    try:
        _wait_up(proc, port, root)
        yield Registry(f"127.0.0.1:{port}", user, password)
    finally:
        _stop(proc)


@dataclass(frozen=True)
class TokenRegistry:
    host: str
    username: str
    password: str
    root: Path          # the registry's storage (tests corrupt blobs there)
    tokens: object      # helpers_registry.TokenService: every token request it answered


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory):
    """A real registry with token auth, as public registries run: anonymous pull on
    public/*, everything for the test user, nothing else (see helpers_registry)."""
    import helpers_registry as hr

    if not Path(REGISTRY_BIN).exists() or not shutil.which("openssl"):
        pytest.skip("docker-registry or openssl missing: run scripts/setup-engine.sh as root")
    root = tmp_path_factory.mktemp("token-registry")
    key, cert, der = hr.make_key(root)
    tokens = hr.TokenService(key, der)
    server, token_port = hr.serve(tokens.handler())
    port = _free_port()
    proc = _serve_registry(root, hr.registry_config(root, port, f"http://127.0.0.1:{token_port}/token", cert))
    try:
        _wait_up(proc, port, root)
        yield TokenRegistry(f"127.0.0.1:{port}", hr.USER, hr.PASSWORD, root, tokens)
    finally:
        _stop(proc)
        server.shutdown()


@pytest.fixture
def serve_folder():
    """serve_folder(folder) -> "http://127.0.0.1:PORT": a loopback web server of that folder
    (a release folder, a wheel server, a published file), stopped at the test's end."""
    import functools
    import http.server
    import threading

    servers = []

    def start(folder: Path) -> str:
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
