"""Download a lock's wheels natively for another platform, so an emulated build only installs.

Why: under qemu every instruction of pip is emulated, its TLS and hashing included, so
fetching torch inside an arm64 build costs minutes that the host does in seconds. The
host's pip can fetch the wheels *for* the target (``pip download --platform ... --python-
version ... --only-binary=:all:``) with the lock's hashes checked (``--require-hashes``),
into the build context's wheelhouse; the build then installs with ``PIP_NO_INDEX=1`` (a
build-time setting, never in the image), so nothing it installs came from anywhere else,
and the install still checks every hash against the lock.

When the host cannot (no pip, an entry with no wheel for the target, no index reachable),
`download` says why and the build fetches inside the emulation as before.

Example:
    >>> platform_tags("aarch64", (2, 31))[:2], platform_tags("aarch64", (2, 31))[-1]
    (['manylinux_2_31_aarch64', 'manylinux_2_28_aarch64'], 'manylinux2014_aarch64')
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

# glibc minors for which wheels carry manylinux_2_N tags (the oldest is manylinux2014's 2.17)
_GLIBC_MINORS = (40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 28, 27, 24, 17)
TIMEOUT = 1800.0


def platform_tags(arch: str, glibc: Tuple[int, int]) -> List[str]:
    """The manylinux platform tags a Linux of ``glibc`` (major, minor) runs, newest first."""
    minor = glibc[1]
    return [f"manylinux_2_{m}_{arch}" for m in _GLIBC_MINORS if m <= minor] + [f"manylinux2014_{arch}"]


def download(requirements: Sequence[Path], dest: Path, *, python: str, arch: str,
             glibc: Optional[Tuple[int, int]]) -> Optional[str]:
    """Fetch every entry of the ``requirements`` files (a lock, uv's pin) as a wheel for the
    target into ``dest``, hashes checked.

    Returns None when every wheel is there, else the reason (pip's last lines).
    """
    if not glibc:
        return "the base's glibc is not in the knowledge base, so the wheels' platform is unknown"
    dest.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
            "--only-binary=:all:", "--require-hashes", "--implementation", "cp", "--python-version", python,
            "--abi", "cp" + python.replace(".", ""), "--dest", str(dest)]
    for file in requirements:
        argv += ["-r", str(file)]
    for tag in platform_tags(arch, glibc):
        argv += ["--platform", tag]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"pip download could not run: {exc}"
    if done.returncode != 0:
        tail = [line for line in done.stderr.splitlines() if line.strip()][-3:]
        return "pip download failed: " + " / ".join(tail)
    return None
