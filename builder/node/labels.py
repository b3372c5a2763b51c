"""Kubernetes node label keys for Ascend NPU nodes: MindCluster's, and ascend-build's own.

MindCluster's Ascend Device Plugin labels every NPU node; ``k8s job`` reads these labels
from ``kubectl get nodes -o json`` and selects on them, and ``host --nfd`` writes
ascend-build's own through node-feature-discovery. The keys, as MindCluster defines them
(Ascend/mind-cluster, ``component/ascend-common/api`` ``label`` package and its node
labelers in the device plugin; docs/en/scheduling/api/k8s.md "Node Labels"):

- ``huawei.com/npu.driver.version``: the HDK driver version as the driver spells it (``24.1.rc3``,
  `driver_label_value`); written
  together with the older ``huawei.com/driver.version`` during the migration ("dual-write
  in Phase 1, removed in Phase 2").
- ``huawei.com/npu.chip.name``: the chip name as npu-smi prints it (``910B3``, ``310P3``,
  ``Ascend950PR``); the older key is ``node.kubernetes.io/npu.chip.name``.
- ``host-arch``: ``huawei-arm`` or ``huawei-x86`` (labelled for Volcano); Kubernetes' own
  ``kubernetes.io/arch`` (``arm64``, ``amd64``) is on every node.
- ``accelerator``: ``huawei-Ascend910`` (910, 910B and A3), ``huawei-Ascend310P``, ...;
  ``accelerator-type``: the server form (``module-910b-8``, ``card``, ...). Both are
  listed as deprecated keys that were not migrated.

A label selector compares dotted versions only as text, so no selector can say "driver
at least 24.1.RC3". ascend-build's own ``DRIVER_ORDINAL_LABEL`` holds
`builder.versions.driver_ordinal` of the node's driver, an integer a node affinity can
compare with ``Gt``.

Example:
    >>> DRIVER_VERSION_LABEL, DRIVER_VERSION_LABELS
    ('huawei.com/npu.driver.version', ('huawei.com/npu.driver.version', 'huawei.com/driver.version'))
"""

from __future__ import annotations

import re
from typing import Optional, Tuple

# ascend-build's own keys, written by `ascend-build host --nfd` as a node-feature-discovery local
# feature file. The name carries its own prefix, else NFD would put it under feature.node.kubernetes.io;
# nfd-master (0.13 and later) accepts every namespace but kubernetes.io's by default (its denyLabelNs).
ASCEND_BUILD_PREFIX = "ascend-build.io/"
DRIVER_ORDINAL_LABEL = ASCEND_BUILD_PREFIX + "npu.driver.ordinal"
FIRMWARE_VERSION_LABEL = ASCEND_BUILD_PREFIX + "npu.firmware.version"
NPU_COUNT_LABEL = ASCEND_BUILD_PREFIX + "npu.count"  # the node's /dev/davinciN devices
# The arch in the matrix's words (aarch64, x86_64). Not ARCH_LABEL: NFD prefixes a name without a
# namespace with feature.node.kubernetes.io/, so host --nfd cannot write `host-arch` itself.
NFD_ARCH_LABEL = ASCEND_BUILD_PREFIX + "arch"

# MindCluster's current keys (Ascend Device Plugin)
DRIVER_VERSION_LABEL = "huawei.com/npu.driver.version"
CHIP_LABEL = "huawei.com/npu.chip.name"
# Volcano's arch key, values HOST_ARCH_VALUES; Kubernetes' own is KUBE_ARCH_LABEL.
ARCH_LABEL = "host-arch"
KUBE_ARCH_LABEL = "kubernetes.io/arch"

# MindCluster's deprecated keys, still written next to the current ones on older device plugins
DRIVER_VERSION_LABEL_DEPRECATED = "huawei.com/driver.version"
CHIP_LABEL_DEPRECATED = "node.kubernetes.io/npu.chip.name"
ACCELERATOR_LABEL_DEPRECATED = "accelerator"
ACCELERATOR_TYPE_LABEL_DEPRECATED = "accelerator-type"

# Each fact with its keys, current first: a reader takes the first one a node carries, a
# selector lists them all (nodeSelectorTerms are ORed, so either key admits a node).
DRIVER_VERSION_LABELS = (DRIVER_VERSION_LABEL, DRIVER_VERSION_LABEL_DEPRECATED)
CHIP_LABELS = (CHIP_LABEL, CHIP_LABEL_DEPRECATED)

# matrix arch -> the values of ARCH_LABEL (MindCluster/Volcano) and KUBE_ARCH_LABEL (GOARCH)
HOST_ARCH_VALUES = {"aarch64": "huawei-arm", "x86_64": "huawei-x86"}
KUBE_ARCH_VALUES = {"aarch64": "arm64", "x86_64": "amd64"}



_RC = re.compile(r"\.rc(?=\d)", re.IGNORECASE)


def driver_label_value(driver: Optional[str]) -> Optional[str]:
    """A driver (HDK) version as the driver label's value: the driver's own spelling, ``rc`` in
    lower case (``24.1.RC3`` -> ``24.1.rc3``), whichever way it was read.

    That is the spelling MindCluster's labels carry: its device plugin copies the DCMI version
    string as the driver reports it into ``huawei.com/driver.version``
    (Ascend/mind-cluster@22bb3d987bc0208c3eb7395e222b661276133c58:component/ascend-device-plugin/pkg/server/manager.go,
    ``newLabelMap[common.DcmiDriverVersion] = driverVersion``; its test mock: ``mockDcmiVersion = "24.0.rc2"``,
    component/ascend-common/devmanager/devmanager_test.go), and the driver's ``version.info`` and
    ``npu-smi`` print ``24.1.rc3``. A Kubernetes ``In`` term compares bytes, so a reader lists
    every spelling a node may carry (:func:`driver_label_spellings`).

    Examples:
        >>> driver_label_value("24.1.RC3"), driver_label_value("25.0.rc1.1"), driver_label_value("25.2.0")
        ('24.1.rc3', '25.0.rc1.1', '25.2.0')
    """
    return _RC.sub(".rc", driver) if driver else driver


def driver_label_spellings(driver: str) -> Tuple[str, ...]:
    """Every spelling of one driver version a node's label may carry: the driver's own (lower-case
    ``rc``, :func:`driver_label_value`), the release name's (``RC``, as Huawei's documents and the
    knowledge base write it), and the text as given, each once.

    Examples:
        >>> driver_label_spellings("24.1.RC3"), driver_label_spellings("25.2.0")
        (('24.1.rc3', '24.1.RC3'), ('25.2.0',))
    """
    return tuple(dict.fromkeys((_RC.sub(".rc", driver), _RC.sub(".RC", driver), driver)))


def chip_label_value(soc: Optional[str]) -> Optional[str]:
    """A SoC name (`builder.node.host.soc_name`) as the chip label's value, without ``Ascend``:
    ``Ascend910B3`` -> ``910B3``, MindCluster's spelling for the 910 family. For the 950 MindCluster
    is said to keep ``Ascend950PR``, which this does not give: a reader of this host takes both.

    Examples:
        >>> chip_label_value("Ascend910B3"), chip_label_value("Ascend950PR"), chip_label_value(None)
        ('910B3', '950PR', None)
    """
    if not soc:
        return None
    return soc[len("Ascend"):] if re.match(r"Ascend[0-9]", soc) else soc


__all__ = [
    "ACCELERATOR_LABEL_DEPRECATED", "ACCELERATOR_TYPE_LABEL_DEPRECATED", "ARCH_LABEL", "ASCEND_BUILD_PREFIX",
    "CHIP_LABEL", "CHIP_LABELS", "chip_label_value", "driver_label_spellings", "driver_label_value", "CHIP_LABEL_DEPRECATED", "DRIVER_ORDINAL_LABEL", "DRIVER_VERSION_LABEL",
    "DRIVER_VERSION_LABELS", "DRIVER_VERSION_LABEL_DEPRECATED", "FIRMWARE_VERSION_LABEL", "HOST_ARCH_VALUES",
    "KUBE_ARCH_LABEL", "KUBE_ARCH_VALUES", "NFD_ARCH_LABEL", "NPU_COUNT_LABEL",
]
