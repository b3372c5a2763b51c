"""The NPU devices and driver mounts of this host, as `docker run` needs them.

Every Ascend project documents the same flags by hand (ascend-facts.md, "Running
an image on an NPU host"); this module derives them from what exists under
``root`` (``/`` normally, a fixture tree in tests), so a path the host lacks is
never mounted.

Example:
    >>> visible = npu_devices(Path("/"))                 # doctest: +SKIP
    >>> docker_devices(visible, Path("/"))               # doctest: +SKIP
    ['/dev/davinci0', '/dev/davinci_manager', '/dev/devmm_svm', '/dev/hisi_hdc']
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from builder.errors import UserError

CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
# host path -> read-only bind mount at the same path in the container
DRIVER_MOUNTS = (
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/version.info",
    "/usr/local/Ascend/firmware/version.info",
    "/etc/ascend_install.info",
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/usr/local/sbin/npu-smi",
)


def npu_devices(root: Path = Path("/")) -> List[int]:
    """Indices N of the ``/dev/davinciN`` devices present, sorted."""
    dev = root / "dev"
    if not dev.is_dir():
        return []
    found = (re.fullmatch(r"davinci(\d+)", p.name) for p in dev.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


def choose(available: Sequence[int], wanted: Optional[str]) -> List[int]:
    """Parse ``--devices 0,1`` against what the host has; None means all of them."""
    if not wanted:
        return list(available)
    try:
        chosen = [int(x) for x in wanted.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--devices {wanted!r} is not a list of numbers", fix="write e.g. --devices 0,1")
    missing = [n for n in chosen if n not in available]
    if missing:
        raise UserError(f"NPU device(s) {missing} not present on this host (have {list(available) or 'none'})",
                        fix="pick from the /dev/davinciN devices of this host", exit_code=1)
    return chosen


def docker_devices(chosen: Sequence[int], root: Path = Path("/")) -> List[str]:
    """``--device`` values: the chosen davinci devices plus the control devices that exist."""
    return [f"/dev/davinci{n}" for n in chosen] + [d for d in CONTROL_DEVICES if (root / d.lstrip("/")).exists()]


def driver_mounts(root: Path = Path("/")) -> List[Tuple[str, str, bool]]:
    """Read-only bind mounts (host, container, True) for the driver files the host has."""
    return [(p, p, True) for p in DRIVER_MOUNTS if (root / p.lstrip("/")).exists()]
