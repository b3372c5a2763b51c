"""A real docker-registry on loopback: started with a config, waited for, stopped; what the session's
registry fixtures and the fault benchmark start."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REGISTRY_BIN = "/usr/bin/docker-registry"


@dataclass(frozen=True)
class Registry:
    host: str  # "127.0.0.1:PORT"; Docker treats loopback registries as insecure (HTTP ok)
    username: str
    password: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_registry(root: Path, config_text: str):
    """Start docker-registry with ``config_text`` (its address is in it); the process."""
    config = root / "config.yml"
    config.write_text(config_text)
    log = open(root / "registry.log", "w")
    proc = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdout=log, stderr=log)
    log.close()
    return proc


def wait_up(proc, port: int, root: Path) -> None:
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
                raise RuntimeError(f"registry did not start: {(root / 'registry.log').read_text()}") from None
            time.sleep(0.1)


def stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
