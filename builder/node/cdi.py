"""A CDI spec for this node's NPUs: containerd, CRI-O and podman then inject them by name.

Why: the Container Device Interface lets a runtime add devices and mounts to a container from
a JSON file in ``/etc/cdi/`` (``podman run --device huawei.com/npu=0``, a Kubernetes device
plugin answering with CDI names), instead of every user writing ``--device`` and ``-v`` by hand.
The spec is built from the same lists ``ascend-build run`` passes to ``docker run``
(`builder.devices`): one device per ``/dev/davinciN`` present and ``all``, and, for any of
them, the control devices and read-only bind mounts of the driver files the node has.

Format: cncf-tags/container-device-interface SPEC.md. ``cdiVersion`` 0.5.0 is the lowest that
allows what is used (a device name that starts with a digit: ``0``), and nothing of 0.6.0 and
later is used (no annotations), so runtimes that read only older specs read it too. The tests
check the output against that repository's JSON schema (tests/fixtures/cdi/).

Example:
    >>> spec = cdi_spec([0, 1], ["/dev/davinci_manager"], [("/etc/hccn.conf", "/etc/hccn.conf", True)])
    >>> [d["name"] for d in spec["devices"]], spec["kind"]
    (['0', '1', 'all'], 'huawei.com/npu')
    >>> spec["containerEdits"]["mounts"][0]["options"]
    ['ro', 'nosuid', 'nodev', 'bind']
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from builder import devices
from builder.errors import UserError

CDI_VERSION = "0.5.0"
KIND = "huawei.com/npu"
SPEC_DIR = "/etc/cdi"  # where containerd, CRI-O and podman look for specs (and /var/run/cdi)
ALL = "all"


def _nodes(paths: Sequence[str]) -> List[Dict[str, Any]]:
    return [{"path": path} for path in paths]


def cdi_spec(npus: Sequence[int], control: Sequence[str], mounts: Sequence[Tuple[str, str, bool]]) -> Dict[str, Any]:
    """The spec: a device per NPU index and ``all``, the control devices and mounts shared by all.

    Parameters:
        npus: the NPU indices (``/dev/davinciN``), as `builder.devices.npu_devices` lists them.
        control: the control device nodes (`builder.devices.control_devices`).
        mounts: (host, container, read_only) bind mounts (`builder.devices.driver_mounts`).

    Examples:
        >>> cdi_spec([3], [], [])["devices"][0]
        {'name': '3', 'containerEdits': {'deviceNodes': [{'path': '/dev/davinci3'}]}}
    """
    npu_devices = [{"name": str(n), "containerEdits": {"deviceNodes": _nodes([devices.davinci(n)])}} for n in npus]
    every = {"name": ALL, "containerEdits": {"deviceNodes": _nodes([devices.davinci(n) for n in npus])}}
    shared: Dict[str, Any] = {"deviceNodes": _nodes(control)}
    if mounts:
        shared["mounts"] = [{"hostPath": host, "containerPath": container,
                             "options": ["ro" if read_only else "rw", "nosuid", "nodev", "bind"]}
                            for host, container, read_only in mounts]
    return {"cdiVersion": CDI_VERSION, "kind": KIND, "devices": [*npu_devices, every], "containerEdits": shared}


def node_spec(root: Path = Path("/")) -> Dict[str, Any]:
    """The spec of the node under ``root`` (paths in it are the node's: ``root`` is where it is read).

    A node without ``/dev/davinciN`` gets a UserError: a CDI spec must name at least one device.
    """
    npus = devices.npu_devices(root)
    if not npus:
        raise UserError(f"no /dev/davinciN device under {root}: a CDI spec needs at least one NPU", exit_code=1,
                        fix="run it on the NPU node (or --root its files), after the driver is installed")
    return cdi_spec(npus, devices.control_devices(root), devices.driver_mounts(root))


def spec_text(spec: Dict[str, Any]) -> str:
    """The spec as the file holds it: JSON, keys in the spec's order, one trailing newline."""
    return json.dumps(spec, indent=2) + "\n"


__all__ = ["ALL", "CDI_VERSION", "KIND", "SPEC_DIR", "cdi_spec", "node_spec", "spec_text"]
