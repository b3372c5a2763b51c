"""A node-feature-discovery local feature file from what ``host`` probed: node labels a scheduler selects on.

Why: Kubernetes places a Pod by node labels, and MindCluster's device plugin labels the driver
only as a dotted version, which no label selector can compare. ``ascend-build host --nfd`` writes
the facts `builder.node.host.probe` read (no second reading of the node) as the file NFD's
``local`` source reads from ``/etc/kubernetes/node-feature-discovery/features.d/``; nfd-worker
turns each line into a node label. Among them the driver's ordinal
(`builder.versions.driver_ordinal`), an integer a node affinity compares with ``Gt``.

The format, as kubernetes-sigs/node-feature-discovery documents and parses it
(docs/usage/customization-guide.md "Local feature source", source/local/local.go): one
``<namespace>/<name>[=<value>]`` per line, ``#`` starts a comment and ``# +`` a directive
(``expiry-time``, ``no-label``, ``no-feature``), a file over 64 KiB is ignored, a name without
a namespace is put under ``feature.node.kubernetes.io/``, and files whose name starts with a dot
are skipped, so a file is written as a dot file and renamed into place (`write_atomically`).
Every value here is a valid Kubernetes label value (63 characters of ``[A-Za-z0-9._-]``, starting
and ending alphanumeric); a fact that is unknown or would not be one is left out, with a comment
saying why.

The keys are `builder.node.labels`'s: the Ascend Device Plugin's for the two facts it labels
(``node.kubernetes.io/npu.chip.name``, ``huawei.com/driver.version``), with the values it writes
(the chip name as DCMI reports it, `labels.chip_label_value`; the driver's own spelling), so a
selector written for MindCluster's nodes selects these too; ascend-build's own (``ascend-build.io/...``)
for the ordinal, firmware, NPU count and arch.

nfd-master publishes a label in a ``kubernetes.io`` namespace only when its ``extraLabelNs`` lists
that namespace (node-feature-discovery at 76e6cc8cc0d54b8bce037098b72611ffdf66ef5a,
pkg/apis/nfd/validate/validate.go line 107 and pkg/nfd-master/nfd-master.go lines 538 and 539):
the chip line is published only with ``extraLabelNs: ["node.kubernetes.io"]``, and the file says so.
On a node where the device plugin runs, it labels the chip itself.

Example:
    >>> from builder.node.host import HostInfo
    >>> print(features_text(HostInfo(root="/", arch="aarch64", driver="24.1.rc3", soc="Ascend910B3",
    ...                              devices=[0, 1])).split("\\n", 3)[3], end="")
    ascend-build.io/arch=aarch64
    ascend-build.io/npu.count=2
    ascend-build.io/npu.driver.ordinal=2400110030000000
    huawei.com/driver.version=24.1.rc3
    node.kubernetes.io/npu.chip.name=910B3
    # node.kubernetes.io/npu.chip.name: nfd-master publishes it only where its extraLabelNs lists node.kubernetes.io
    # not written: firmware unknown
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import List, Tuple

from builder import versions, writes
from builder.errors import UserError
from builder.node import labels as keys
from builder.node.host import HostInfo

FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
MAX_FILE_BYTES = 65536  # NFD's MaxFeatureFileSize: a larger file is ignored whole
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)")  # Kubernetes' rule, 63 at most


def features(info: HostInfo) -> Tuple[List[Tuple[str, str]], List[str]]:
    """(label, value) pairs sorted by label, and why each fact left out was left out.

    Parameters:
        info: the probe of the node (`builder.node.host.probe`).

    Examples:
        >>> pairs, missing = features(HostInfo(arch="x86_64", driver="25.0.RC1", firmware="7.7.0.1.231"))
        >>> dict(pairs)["ascend-build.io/npu.driver.ordinal"], dict(pairs)["ascend-build.io/npu.count"]
        ('2500010010000000', '0')
        >>> dict(pairs)["huawei.com/driver.version"]  # the driver's own spelling, as the device plugin's label
        '25.0.rc1'
        >>> missing
        ['chip unknown']
    """
    pairs: List[Tuple[str, str]] = []
    missing: List[str] = []
    ordinal = None
    if info.driver:
        try:
            ordinal = str(versions.driver_ordinal(info.driver))
        except versions.VersionError as exc:  # a field wider than the ordinal holds
            missing.append(f"driver ordinal: {exc.message}")
    facts = (
        (keys.NFD_ARCH_LABEL, info.arch, "arch"),
        (keys.NPU_COUNT_LABEL, str(len(info.devices)), "NPU count"),
        (keys.DRIVER_VERSION_LABEL, keys.driver_label_value(info.driver), "driver"),
        (keys.DRIVER_ORDINAL_LABEL, ordinal, "driver ordinal" if info.driver else "driver"),
        (keys.FIRMWARE_VERSION_LABEL, info.firmware, "firmware"),
        (keys.CHIP_LABEL, keys.chip_label_value(info.soc), "chip"),
    )
    for key, value, what in facts:
        if value is None:
            if f"{what} unknown" not in missing and not any(m.startswith(what + ":") for m in missing):
                missing.append(f"{what} unknown")
        elif not _LABEL_VALUE.fullmatch(value):
            missing.append(f"{what} {value[:40]!r} is no valid label value")
        else:
            pairs.append((key, value))
    return sorted(pairs), missing


def features_text(info: HostInfo) -> str:
    """The feature file: a header naming its source, one ``key=value`` line per fact, then a
    comment for each fact left out (the same node gives the same bytes: no time in it)."""
    pairs, missing = features(info)
    lines = ["# node-feature-discovery local feature file (features.d), written by `ascend-build host --nfd`",
             f"# from the probe of {_comment(info.root)}; format: NFD docs/usage/customization-guide.md "
             "\"Local feature source\"",
             f"# install it as {FEATURES_DIR}/ascend-build (nfd-worker reads it on its next pass)"]
    lines += [f"{key}={value}" for key, value in pairs]
    lines += [f"# {key}: nfd-master publishes it only where its extraLabelNs lists {key.split('/')[0]}"
              for key, _ in pairs if _kubernetes_namespace(key)]
    lines += [f"# not written: {_comment(why)}" for why in missing]
    return "\n".join(lines) + "\n"


def _kubernetes_namespace(key: str) -> bool:
    """Whether ``key``'s namespace is one nfd-master denies unless ``extraLabelNs`` lists it
    (``kubernetes.io`` and its subdomains, NFD's own feature and profile namespaces aside)."""
    namespace = key.split("/")[0]
    own = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")
    return (namespace == "kubernetes.io" or namespace.endswith(".kubernetes.io")) and \
        not any(namespace == n or namespace.endswith("." + n) for n in own)


def _comment(text: str) -> str:
    """``text`` fit for one comment line: no line break (a new line would be read as a feature)."""
    return re.sub(r"[\r\n]+", " ", text)


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` by a dot file in the same folder renamed over it: a reader
    (nfd-worker, containerd) never sees half a file, and NFD skips dot files.

    A UserError says what could not be written; nothing is left behind then.
    """
    path = Path(path)
    try:
        staged = writes.stage(path, text.encode("utf-8"))  # a dot file, created exclusively, never through a link
        os.chmod(staged, 0o644)  # read by nfd-worker and the container runtime, not secret
        os.replace(staged, path)
    except OSError as exc:
        writes.temporary_name(path).unlink(missing_ok=True)
        raise UserError(f"cannot write {path}: {exc.strerror or exc}",
                        fix="give a file in an existing folder you can write (or - for stdout)", exit_code=1) from None


__all__ = ["FEATURES_DIR", "MAX_FILE_BYTES", "features", "features_text", "write_atomically"]
