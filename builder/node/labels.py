"""Kubernetes node label keys for Ascend NPU nodes: MindCluster's device plugin's, and ascend-build's own.

MindCluster's Ascend Device Plugin labels every NPU node it runs on; ``k8s job`` reads these labels
from ``kubectl get nodes -o json`` and selects on them, and ``host --nfd`` writes the same two
facts under the same keys, with the same values, next to ascend-build's own. The keys and values,
as the device plugin writes them (Ascend/mind-cluster at 22bb3d987bc0208c3eb7395e222b661276133c58,
kept verbatim in tests/fixtures/mindcluster/):

- ``node.kubernetes.io/npu.chip.name`` (``ChipNameLabel``,
  component/ascend-device-plugin/pkg/common/constants.go line 102): the chip name DCMI reports,
  copied as it is (pkg/server/manager.go line 415, ``newLabelMap[common.ChipNameLabel] =
  chipInfo.Name``; ``chipInfo.Name`` is DCMI's ``chip_name``, component/ascend-common/devmanager/dcmi/dcmi.go
  lines 1703 and 1708), which ``npu-smi info -t board`` prints as ``Chip Name``: ``910B3``, ``310P3``,
  ``910ProB``, ``Ascend910`` (A3), ``Ascend950PR`` (`chip_label_value`);
- ``huawei.com/driver.version`` (``DcmiDriverVersion``, constants.go line 362): the version string
  DCMI reports (manager.go lines 304 to 306), the driver's own spelling (`driver_label_value`);
- ``host-arch``: ``huawei-arm`` or ``huawei-x86`` (labelled for Volcano); Kubernetes' own
  ``kubernetes.io/arch`` (``arm64``, ``amd64``) is on every node.

The device plugin's ``accelerator`` and ``accelerator-type`` name the product line and the server
form, not the chip model; ``k8s job`` does not read them.

A label selector compares dotted versions only as text, so no selector can say "driver
at least 24.1.RC3". ascend-build's own ``DRIVER_ORDINAL_LABEL`` holds
`builder.versions.driver_ordinal` of the node's driver, an integer a node affinity can
compare with ``Gt``.

Example:
    >>> CHIP_LABEL, DRIVER_VERSION_LABEL
    ('node.kubernetes.io/npu.chip.name', 'huawei.com/driver.version')
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

# The Ascend Device Plugin's keys (see above); tests/node/test_labels.py reads them from its source.
CHIP_LABEL = "node.kubernetes.io/npu.chip.name"
DRIVER_VERSION_LABEL = "huawei.com/driver.version"
# Volcano's arch key, values HOST_ARCH_VALUES; Kubernetes' own is KUBE_ARCH_LABEL.
ARCH_LABEL = "host-arch"
KUBE_ARCH_LABEL = "kubernetes.io/arch"

# The keys each fact is read from: only the device plugin writes either fact, under one key each.
DRIVER_VERSION_LABELS = (DRIVER_VERSION_LABEL,)
CHIP_LABELS = (CHIP_LABEL,)

# matrix arch -> the values of ARCH_LABEL (MindCluster/Volcano) and KUBE_ARCH_LABEL (GOARCH)
HOST_ARCH_VALUES = {"aarch64": "huawei-arm", "x86_64": "huawei-x86"}
KUBE_ARCH_VALUES = {"aarch64": "arm64", "x86_64": "amd64"}



_RC = re.compile(r"\.rc(?=\d)", re.IGNORECASE)


def driver_label_value(driver: Optional[str]) -> Optional[str]:
    """A driver (HDK) version as the driver label's value: the driver's own spelling, ``rc`` in
    lower case (``24.1.RC3`` -> ``24.1.rc3``), whichever way it was read.

    That is the spelling the device plugin's label carries: it copies the DCMI version string as
    the driver reports it into ``huawei.com/driver.version`` (manager.go lines 304 to 306; its test
    mock: ``mockDcmiVersion = "24.0.rc2"``, component/ascend-common/devmanager/devmanager_test.go),
    and the driver's ``version.info`` and ``npu-smi`` print ``24.1.rc3``. A Kubernetes ``In`` term
    compares bytes, so a reader lists every spelling a node may carry (:func:`driver_label_spellings`).

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
    """A SoC name (`builder.node.host.soc_name`) as the chip label's value: the chip name DCMI
    reports, which the device plugin copies (manager.go line 415) and ``npu-smi info -t board``
    prints as ``Chip Name``.

    `builder.node.host` spells a SoC name from that chip name: ``Ascend`` put before a name that
    starts with a digit (``910B3`` -> ``Ascend910B3``, ``310P3``, ``910ProB``), and on an A3 the
    ``NPU Name`` put after ``Ascend910`` (``Ascend910_9392``); a name that starts with ``Ascend``
    (``Ascend950PR``) is kept. This undoes that, so the value is DCMI's: the 910 and 310 families
    without ``Ascend``, an A3 ``Ascend910``, the 950 ``Ascend950PR`` (the values MindCluster's
    docs/en/scheduling/api/k8s.md "Node Labels" lists; tests/node/test_labels.py checks each
    against the ``Chip Name`` of a public npu-smi dump).

    Examples:
        >>> [chip_label_value(s) for s in ("Ascend910B3", "Ascend310P3", "Ascend910_9392", "Ascend950PR", None)]
        ['910B3', '310P3', 'Ascend910', 'Ascend950PR', None]
    """
    if not soc:
        return None
    if re.fullmatch(r"Ascend910(_\d+)?", soc):  # an A3 (its table says only Ascend910)
        return "Ascend910"
    return soc[len("Ascend"):] if re.match(r"Ascend[39]10", soc) else soc


__all__ = [
    "ARCH_LABEL", "ASCEND_BUILD_PREFIX", "CHIP_LABEL", "CHIP_LABELS", "chip_label_value", "driver_label_spellings",
    "driver_label_value", "DRIVER_ORDINAL_LABEL", "DRIVER_VERSION_LABEL", "DRIVER_VERSION_LABELS",
    "FIRMWARE_VERSION_LABEL", "HOST_ARCH_VALUES",
    "KUBE_ARCH_LABEL", "KUBE_ARCH_VALUES", "NFD_ARCH_LABEL", "NPU_COUNT_LABEL",
]
