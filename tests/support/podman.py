"""podman as the engine tests run it: `podman kube play` of a rendered Pod, with storage of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

PODMAN = "/usr/bin/podman"
# This sandbox refuses raising RLIMIT_NOFILE (podman's default ulimits) and runs no systemd.
CONTAINERS_CONF = 'default_ulimits = []\n'
ENGINE_CONF = 'cgroup_manager = "cgroupfs"\nevents_logger = "file"\n'


@pytest.fixture
def podman(tmp_path):
    """podman with storage of its own under tmp_path (nothing shared with other tests), reset after."""
    if not Path(PODMAN).exists() or not shutil.which("catatonit"):
        pytest.skip("podman or catatonit missing: run scripts/setup-engine.sh as root")
    conf = tmp_path / "containers.conf"
    conf.write_text(f"[containers]\n{CONTAINERS_CONF}[engine]\n{ENGINE_CONF}")
    runroot = tempfile.mkdtemp(prefix="podman-")  # podman refuses a runroot longer than 50 characters
    base = [PODMAN, "--root", str(tmp_path / "storage"), "--runroot", runroot]

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([*base, *args], env={**os.environ, "CONTAINERS_CONF": str(conf)},
                              capture_output=True, text=True, timeout=timeout)

    yield run
    run("system", "reset", "--force", timeout=300)
    shutil.rmtree(runroot, ignore_errors=True)
