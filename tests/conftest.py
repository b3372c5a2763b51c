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
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}', secret: test-only}}\n"
        f"auth: {{htpasswd: {{realm: ascend-build-test, path: {root / 'htpasswd'}}}}}\n"
    )
    log = open(root / "registry.log", "w")
    proc = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdout=log, stderr=log)
    try:
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + 20
        while True:
            try:
                no_proxy.open(f"http://127.0.0.1:{port}/v2/", timeout=1)
                break
            except urllib.error.HTTPError:  # 401: up, and asking for auth
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"registry did not start: {(root / 'registry.log').read_text()}")
                time.sleep(0.1)
        yield Registry(f"127.0.0.1:{port}", user, password)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
