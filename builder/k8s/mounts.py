"""Which driver files a pod mounts from its node, per chip and job shape, and as which hostPath type.

A hostPath of type ``File`` or ``Directory`` fails the pod's start when the node lacks the path,
which is right for what every NPU node with a driver has and wrong for what only some have.
The rows, and where each comes from (Ascend/mind-cluster at commit
22bb3d987bc0208c3eb7395e222b661276133c58):

- the driver's ``lib64`` and ``version.info``: every node with a driver has both (`run` refuses a
  host without them, `builder.devices.REQUIRED_MOUNTS`); ``/usr/local/dcmi`` and
  ``/usr/local/bin/npu-smi`` are in Ascend Docker Runtime's own list of what every NPU container
  gets (``component/ascend-docker-runtime/build/scripts/base.list``); the firmware's
  ``version.info`` and ``/etc/ascend_install.info`` are written by the driver and firmware
  installers. Required on every chip and shape.
- ``/etc/hccn.conf``: the NPUs' own NIC addresses, which HCCL needs to reach NPUs of *other*
  servers (RoCE). Required for a training job over more than one node on the training chips
  (910, 910B, A3, 950). Not mounted for a one-node job (HCCL stays inside the server) nor on
  310P, an inference card whose nodes need not have it.
- the driver's ``topo`` folder: MindCluster mounts it only where it exists
  (``component/ascend-common/cdi/mount/provider.go``, ``appendTopology``: "when they exist on
  the host"; Ascend Docker Runtime only with its UB driver list), and the device plugin reads
  topology files from it for the 950 only (``component/ascend-device-plugin/pkg/common/
  constants_v2.go``: ``topo/950/*.json``). Required on 950 nodes, not mounted elsewhere.

No row uses ``FileOrCreate``/``DirectoryOrCreate``: those would write an empty file or folder
onto a node that lacks it (an empty ``/etc/hccn.conf`` is worse than none for ``hccn_tool``).

Example:
    >>> [path for path, _ in mounts("310p", 1)]
    ['/usr/local/Ascend/driver/lib64', '/usr/local/Ascend/driver/version.info', '/usr/local/Ascend/firmware/version.info', '/etc/ascend_install.info', '/usr/local/dcmi', '/usr/local/bin/npu-smi']
    >>> ("/etc/hccn.conf", "File") in mounts("910b", 2), ("/etc/hccn.conf", "File") in mounts("910b", 1)
    (True, False)
"""

from __future__ import annotations

from typing import Tuple

from builder import devices

HCCN_CONF = "/etc/hccn.conf"
TOPO = "/usr/local/Ascend/driver/topo"
# Chips whose multi-node jobs talk HCCL over the NPUs' own NICs (hccn.conf); 310P is an inference card.
TRAINING_CHIPS = frozenset({"910", "910b", "a3", "950"})
# Chips whose device plugin reads the driver's topo folder (topo/950/*.json).
TOPO_CHIPS = frozenset({"950"})


def needed(path: str, chip: str, nodes: int) -> bool:
    """Whether a pod of ``chip`` in a job of ``nodes`` pods mounts ``path`` (see the module)."""
    if path in devices.SOME_HOSTS_ONLY:
        return False
    if path == HCCN_CONF:
        return chip in TRAINING_CHIPS and nodes > 1
    if path == TOPO:
        return chip in TOPO_CHIPS
    return True


def mounts(chip: str, nodes: int) -> Tuple[Tuple[str, str], ...]:
    """(host path, hostPath type) of each driver file a pod mounts, in `builder.devices.DRIVER_MOUNTS`'s order."""
    return tuple((path, "Directory" if path in devices.DRIVER_DIRECTORIES else "File")
                 for path in devices.DRIVER_MOUNTS if needed(path, chip, nodes))
