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
from builder.vocabulary import CONTROL_DEVICES

# host path -> read-only bind mount at the same path in the container
DRIVER_MOUNTS = (
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/version.info",
    "/usr/local/Ascend/firmware/version.info",  # FIRMWARE_INFO
    "/etc/ascend_install.info",
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/usr/local/sbin/npu-smi",
    # HCCL reads the NPUs' NIC addresses from hccn.conf and the chips' links from the driver's topo;
    # neither the device plugin nor Ascend Docker Runtime (its base.list) mounts them.
    "/etc/hccn.conf",
    "/usr/local/Ascend/driver/topo",
)
# Those of DRIVER_MOUNTS that are folders (the rest are files), for mounts that must say which
# (a Kubernetes hostPath of type Directory/File, which never creates what is missing).
DRIVER_DIRECTORIES = frozenset({"/usr/local/Ascend/driver/lib64", "/usr/local/dcmi", "/usr/local/Ascend/driver/topo"})
# Where npu-smi sits on some hosts only (ascend-facts.md): mounted where it exists (`run`), left
# out where the node cannot be looked at beforehand (a Kubernetes pool).
SOME_HOSTS_ONLY = frozenset({"/usr/local/sbin/npu-smi"})
# The firmware's version.info: read by nothing in an image but the driver guard, and by it only when
# the image states a firmware minimum (ASCEND_REQUIRE_FIRMWARE); `run` mounts it only then.
FIRMWARE_INFO = "/usr/local/Ascend/firmware/version.info"
# Without these two a container sees devices but cannot open them (libascend_hal.so, the driver's
# version): a node that has a driver must have both, or `run` refuses rather than drop the mount.
REQUIRED_MOUNTS = DRIVER_MOUNTS[:2]


def npu_devices(root: Path = Path("/")) -> List[int]:
    """Indices N of the ``/dev/davinciN`` devices present, sorted."""
    dev = root / "dev"
    if not dev.is_dir():
        return []
    found = (re.fullmatch(r"davinci([0-9]{1,9})", p.name) for p in dev.iterdir())  # ASCII, bounded: int() stays cheap
    return sorted(int(m.group(1)) for m in found if m)


def choose(available: Sequence[int], wanted: Optional[str]) -> List[int]:
    """Parse ``--devices 0,1`` against what the host has; None means all of them."""
    if not wanted:
        return list(available)
    parts = [x.strip() for x in wanted.split(",") if x.strip()]
    # ASCII digits only, as /dev/davinciN are read: int() also takes '١' (Arabic-Indic one) for NPU 1
    if not all(re.fullmatch(r"[0-9]{1,9}", x) for x in parts):
        raise UserError(f"--devices {wanted!r} is not a list of numbers", fix="write e.g. --devices 0,1")
    chosen = [int(x) for x in parts]
    missing = [n for n in chosen if n not in available]
    if missing:
        raise UserError(f"NPU device(s) {missing} not present on this host (have {list(available) or 'none'})",
                        fix="pick from the /dev/davinciN devices of this host", exit_code=1)
    return chosen


def davinci(n: int) -> str:
    """The device node of NPU ``n``: ``/dev/davinciN``."""
    return f"/dev/davinci{n}"


def control_devices(root: Path = Path("/")) -> List[str]:
    """The control devices every NPU container needs besides its davinci devices, those that exist."""
    return [d for d in CONTROL_DEVICES if (root / d.lstrip("/")).exists()]


def docker_devices(chosen: Sequence[int], root: Path = Path("/")) -> List[str]:
    """``--device`` values: the chosen davinci devices plus the control devices that exist."""
    return [davinci(n) for n in chosen] + control_devices(root)


def driver_mounts(root: Path = Path("/")) -> List[Tuple[str, str, bool]]:
    """Read-only bind mounts (host, container, True) for the driver files the host has."""
    return [(p, p, True) for p in DRIVER_MOUNTS if (root / p.lstrip("/")).exists()]


def missing_mounts(root: Path = Path("/")) -> List[str]:
    """The ``REQUIRED_MOUNTS`` this host lacks (paths as in the container).

    >>> missing_mounts(Path("/nonexistent"))
    ['/usr/local/Ascend/driver/lib64', '/usr/local/Ascend/driver/version.info']
    """
    return [p for p in REQUIRED_MOUNTS if not (root / p.lstrip("/")).exists()]


def run_argv(image: str, chosen: Sequence[int], command: Sequence[str] = (), root: Path = Path("/"),
             interactive: bool = True, env: Sequence[Tuple[str, str]] = (), firmware: bool = True) -> List[str]:
    """The ``docker run`` argv every Ascend project writes by hand, for the paths this host has.

    ``--ipc=host``: HCCL and the dataloader workers exchange tensors through
    shared memory, which Docker's default 64 MiB ``/dev/shm`` starves. ``env``: ``-e`` pairs.
    The image's ENTRYPOINT (the driver guard) stays: ``command`` is its argument. ``firmware``: mount
    ``FIRMWARE_INFO`` (when the host has it); False for an image stating no firmware minimum.

    >>> run_argv("img", [0], ["python"], root=Path("/nonexistent"), interactive=False)
    ['docker', 'run', '--rm', '--ipc=host', '--device', '/dev/davinci0', 'img', 'python']
    """
    argv = ["docker", "run", "--rm"] + (["-it"] if interactive else []) + ["--ipc=host"]
    for device in docker_devices(chosen, root):
        argv += ["--device", device]
    for host, container, read_only in driver_mounts(root):
        if firmware or host != FIRMWARE_INFO:
            argv += ["-v", f"{host}:{container}{':ro' if read_only else ''}"]
    for name, value in env:
        argv += ["-e", f"{name}={value}"]
    return argv + [image, *command]


def format_argv(argv: Sequence[str]) -> str:
    """One option per line, shell-quoted, ready to paste into a script or job spec.

    >>> print(format_argv(["docker", "run", "--rm", "--device", "/dev/davinci0", "img", "python"]))
    docker run \\
        --rm \\
        --device /dev/davinci0 \\
        img python
    """
    import shlex

    quoted = [shlex.quote(a) for a in argv]
    lines, i = [" ".join(quoted[:2])], 2
    while i < len(argv) and argv[i].startswith("-"):
        takes_value = argv[i] in ("--device", "-v", "-e")
        lines.append(" ".join(quoted[i:i + 1 + takes_value]))
        i += 1 + takes_value
    lines.append(" ".join(quoted[i:]))
    return " \\\n    ".join(lines)
