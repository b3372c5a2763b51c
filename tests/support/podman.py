"""podman as the engine tests run it: `podman kube play` of a rendered Pod, with storage of its own."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Iterator

import pytest

PODMAN = "/usr/bin/podman"
# This sandbox refuses raising RLIMIT_NOFILE (podman's default ulimits) and runs no systemd.
CONTAINERS_CONF = 'default_ulimits = []\n'
ENGINE_CONF = 'cgroup_manager = "cgroupfs"\nevents_logger = "file"\n'


@contextlib.contextmanager
def own_podman(folder: Path) -> Iterator[Callable[..., subprocess.CompletedProcess]]:
    """A ``run(*args)`` for podman with storage of its own under ``folder``, reset at the end."""
    if not Path(PODMAN).exists() or not shutil.which("catatonit"):
        pytest.skip("podman or catatonit missing: run scripts/setup-engine.sh as root")
    conf = folder / "containers.conf"
    conf.write_text(f"[containers]\n{CONTAINERS_CONF}[engine]\n{ENGINE_CONF}")
    runroot = tempfile.mkdtemp(prefix="podman-")  # podman refuses a runroot longer than 50 characters
    base = [PODMAN, "--root", str(folder / "storage"), "--runroot", runroot]

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([*base, *args], env={**os.environ, "CONTAINERS_CONF": str(conf)},
                              capture_output=True, text=True, timeout=timeout)

    try:
        yield run
    finally:
        run("system", "reset", "--force", timeout=300)
        shutil.rmtree(runroot, ignore_errors=True)


@pytest.fixture
def podman(tmp_path):
    """podman with storage of its own under tmp_path (nothing shared with other tests), reset after."""
    with own_podman(tmp_path) as run:
        yield run
