"""A pool of NPU nodes -> the facts the image choice and the node affinity need.

With ``--nodes FILE`` the pool is what ``kubectl get nodes -o json`` printed (a ``List`` or
``NodeList`` of ``v1`` Nodes, or one Node), read through MindCluster's node labels
(`builder.node.labels`): arch, chip, driver, and ascend-build's own firmware label when
``host --nfd`` wrote it. One image must run on every node, so the pool is one arch and one
chip, and its **lowest** driver (and firmware) decides. A pool that mixes chips is refused,
unless ``--chip`` splits it: then only that chip's nodes are the pool, and the others are
named as left out. Without ``--nodes`` the pool is this host, as `pull` sees it.

Example:
    >>> pool = read_pool(open("nodes.json").read(), "nodes.json", chip=None)    # doctest: +SKIP
    >>> pool.node.driver, pool.weakest                                            # doctest: +SKIP
    ('24.1.RC3', 'npu-node-2')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from builder import documents, versions
from builder.errors import UserError
from builder.node import labels as keys
from builder.node.host import HostInfo, chip_of_soc, soc_name
from builder.k8s.pod import resource
from builder.node.pull import Node
from builder.vocabulary import CHIPS, normalize_arch

NODES_MAX = 64 << 20  # `kubectl get nodes -o json` of a few thousand nodes (about 10 KB each) stays below
LIST_ONLY_NPU_NODES = f"list only the NPU nodes: kubectl get nodes -l {keys.CHIP_LABEL} -o json > nodes.json"


@dataclass(frozen=True)
class NodeFacts:
    """One node as its labels describe it; ``chip_label`` is the chip label's value as written."""

    name: str
    arch: str
    chip: str
    chip_label: str
    driver: str
    firmware: Optional[str]
    npus: Optional[int] = None  # status.allocatable of the chip's device-plugin resource; None when not listed


@dataclass(frozen=True)
class Pool:
    """What an image must fit, and what the manifest's node affinity selects on.

    ``node`` is the weakest node's facts for `builder.node.pull` (lowest driver and firmware),
    ``names`` the nodes of the pool, ``weakest`` the one whose driver decides, ``chip_values``
    and ``drivers`` the chip and driver label values seen, ``left_out`` the nodes of the list
    that are not in the pool (another chip), each with why.
    """

    node: Node
    names: Tuple[str, ...]
    weakest: str
    chip_values: Tuple[str, ...]
    drivers: Tuple[str, ...]
    left_out: Tuple[str, ...] = ()
    allocatable: Tuple[Tuple[str, Optional[int]], ...] = ()  # (node, NPUs it can give a pod) of the pool's nodes


def _first_label(labels: Mapping[str, str], names: Sequence[str]) -> Tuple[Optional[str], Optional[str]]:
    """(key, value) of the first of ``names`` the node carries, current key first."""
    for name in names:
        value = labels.get(name)
        if isinstance(value, str) and value:
            return name, value
    return None, None


def node_facts(item: Any, where: str) -> NodeFacts:
    """Read one ``v1`` Node's labels; a UserError names the node and each label missing or unreadable.

    Parameters:
        item: one element of the list's ``items``.
        where: the file, for the messages.

    Examples:
        >>> node_facts({"metadata": {"name": "n1", "labels": {"kubernetes.io/arch": "arm64",
        ...     "node.kubernetes.io/npu.chip.name": "910B3", "huawei.com/driver.version": "24.1.RC3"}}}, "f")
        NodeFacts(name='n1', arch='aarch64', chip='910b', chip_label='910B3', driver='24.1.RC3', firmware=None, npus=None)
        >>> try:
        ...     node_facts({"metadata": {"name": "cpu-1", "labels": {"kubernetes.io/arch": "amd64"}}}, "f")
        ... except UserError as e:
        ...     print(e.message)
        f: node cpu-1: no chip label (node.kubernetes.io/npu.chip.name); no driver label (huawei.com/driver.version)
    """
    metadata = item.get("metadata") if isinstance(item, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise UserError(f"{where}: a node without metadata.name: not `kubectl get nodes -o json` output",
                        fix="write it with: kubectl get nodes -o json > nodes.json")
    assert isinstance(metadata, dict)  # a name was read from it
    labels = metadata.get("labels") or {}
    if not isinstance(labels, dict):
        raise UserError(f"{where}: node {name}: metadata.labels is not a mapping", fix=LIST_ONLY_NPU_NODES)
    problems: List[str] = []

    arch_key, arch_text = _first_label(labels, (keys.KUBE_ARCH_LABEL, keys.ARCH_LABEL))
    from_host_arch = {v: k for k, v in keys.HOST_ARCH_VALUES.items()}
    arch = normalize_arch(arch_text) or from_host_arch.get(arch_text or "")
    if arch_key is None:
        problems.append(f"no arch label ({keys.KUBE_ARCH_LABEL} or {keys.ARCH_LABEL})")
    elif arch is None:
        problems.append(f"{arch_key}={arch_text} is no arch ascend-build builds for (arm64, amd64)")

    chip_key, chip_text = _first_label(labels, keys.CHIP_LABELS)
    chip = chip_of_soc(soc_name(chip_text)) if chip_text else None
    if chip_key is None:
        problems.append(f"no chip label ({' or '.join(keys.CHIP_LABELS)})")
    elif chip is None:
        problems.append(f"{chip_key}={chip_text} names no chip ascend-build builds for ({', '.join(CHIPS)})")

    driver_key, driver = _first_label(labels, keys.DRIVER_VERSION_LABELS)
    if driver_key is None:
        problems.append(f"no driver label ({' or '.join(keys.DRIVER_VERSION_LABELS)})")
    elif versions.lenient("hdk", driver) is None:
        problems.append(f"{driver_key}={driver} is not an HDK driver version")

    firmware = labels.get(keys.FIRMWARE_VERSION_LABEL) or None
    if firmware is not None and versions.lenient("firmware", firmware) is None:
        problems.append(f"{keys.FIRMWARE_VERSION_LABEL}={firmware} is not an NPU firmware version")

    npus = None
    if chip is not None:
        status = item.get("status")
        allocatable = status.get("allocatable") if isinstance(status, dict) else None
        listed = allocatable.get(resource(chip)) if isinstance(allocatable, dict) else None
        if listed is not None:
            npus = int(listed) if isinstance(listed, (str, int)) and str(listed).isdigit() else None
            if npus is None:
                problems.append(f"status.allocatable[{resource(chip)}]={listed!r} is not a count of NPUs")

    if problems:
        raise UserError(f"{where}: node {name}: " + "; ".join(problems),
                        fix="the Ascend Device Plugin labels NPU nodes with these; " + LIST_ONLY_NPU_NODES)
    assert arch and chip and chip_text and driver  # the problems above say why otherwise
    return NodeFacts(name, arch, chip, chip_text, driver, firmware, npus)


def _items(text: str, where: str) -> List[Any]:
    try:
        data = documents.load_json(text, where)  # bounded: nesting past any Node's is refused, not a RecursionError
    except documents.Refused:
        raise
    except ValueError as exc:
        raise UserError(f"{where}: not JSON ({exc})", fix="write it with: kubectl get nodes -o json > nodes.json") from None
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "Node":
        return [data]
    if kind not in ("List", "NodeList") or not isinstance(data.get("items"), list):
        raise UserError(f"{where}: not a list of nodes (kind {kind!r}; expected List or NodeList with items)",
                        fix="write it with: kubectl get nodes -o json > nodes.json")
    foreign = sorted({str(i.get("kind")) for i in data["items"] if isinstance(i, dict) and i.get("kind") not in (None, "Node")})
    if foreign:
        raise UserError(f"{where}: the list holds {', '.join(foreign)}, not only Nodes",
                        fix="write it with: kubectl get nodes -o json > nodes.json")
    if not data["items"]:
        raise UserError(f"{where}: the list has no nodes", fix=LIST_ONLY_NPU_NODES)
    return data["items"]


def read_pool(text: str, where: str, chip: Optional[str] = None) -> Pool:
    """The pool of ``kubectl get nodes -o json`` output ``text`` (from file ``where``).

    Every node must carry MindCluster's arch, chip and driver labels: a node without them is
    named with each label it lacks (list only the NPU nodes). Nodes of several chips are refused,
    since one image is built for one chip, unless ``chip`` keeps that chip's nodes (the others are
    named in ``left_out``). One arch only: an image is for one arch.

    Examples:
        >>> import json
        >>> def n(name, chip, driver):
        ...     return {"kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/arch": "arm64",
        ...             "node.kubernetes.io/npu.chip.name": chip, "huawei.com/driver.version": driver}}}
        >>> nodes = json.dumps({"kind": "List", "items": [n("a", "910B3", "25.0.RC1"), n("b", "910B3", "24.1.RC3"),
        ...                     n("c", "310P3", "24.1.RC3")]})
        >>> pool = read_pool(nodes, "nodes.json", chip="910b")
        >>> pool.node.driver, pool.weakest, pool.names, pool.left_out
        ('24.1.RC3', 'b', ('a', 'b'), ('c: chip 310p',))
    """
    facts = [node_facts(item, where) for item in _items(text, where)]
    chips = sorted({f.chip for f in facts})
    if chip is not None:
        if chip not in CHIPS:
            raise UserError(f"--chip {chip!r} is none of {', '.join(CHIPS)}", fix=f"--chip {' or '.join(CHIPS)}")
        kept = [f for f in facts if f.chip == chip]
        if not kept:
            raise UserError(f"{where}: no node has chip {chip} (the nodes have {', '.join(chips)})",
                            fix=f"--chip {' or '.join(chips)}", exit_code=1)
    elif len(chips) > 1:
        by_chip = "; ".join(f"{c}: {', '.join(f.name for f in facts if f.chip == c)}" for c in chips)
        raise UserError(f"{where}: the nodes have {len(chips)} chips ({by_chip}); an image is built for one chip",
                        fix=f"pass --chip {chips[0]} (or another) to run on that chip's nodes only", exit_code=1)
    else:
        kept = facts
    archs = sorted({f.arch for f in kept})
    if len(archs) > 1:
        by_arch = "; ".join(f"{a}: {', '.join(f.name for f in kept if f.arch == a)}" for a in archs)
        raise UserError(f"{where}: the nodes have {len(archs)} archs ({by_arch}); an image is for one arch",
                        fix="list one arch's nodes: kubectl get nodes -l kubernetes.io/arch=arm64 -o json", exit_code=1)
    weakest = min(kept, key=lambda f: (versions.hdk(f.driver), f.name))
    firmwares = [f.firmware for f in kept if f.firmware]
    lowest_firmware = min(firmwares, key=versions.firmware) if len(firmwares) == len(kept) else None
    node = Node(arch=archs[0], chip=kept[0].chip, driver=weakest.driver, firmware=lowest_firmware,
                unchecked=() if lowest_firmware else ("firmware",))
    return Pool(node=node, names=tuple(f.name for f in kept), weakest=weakest.name,
                chip_values=tuple(sorted({f.chip_label for f in kept})),
                drivers=tuple(sorted({f.driver for f in kept}, key=versions.hdk)),
                left_out=tuple(f"{f.name}: chip {f.chip}" for f in facts if f.chip != kept[0].chip),
                allocatable=tuple((f.name, f.npus) for f in kept))


def check_npus(pool: Pool, npus: int, pods: int = 1) -> None:
    """Refuse ``npus`` per pod (``pods`` of them, each on its own node) that fewer than ``pods``
    nodes of the pool can give: the scheduler would leave such a pod Pending, with no word here.

    A node that does not list the resource in ``status.allocatable`` (a node list trimmed to
    labels, or this host) cannot be judged and counts as able to.

    Example:
        >>> pool = Pool(Node("aarch64", "910b", "24.1.RC3", None), ("a", "b"), "b", ("910B3",), ("24.1.RC3",),
        ...             allocatable=(("a", 8), ("b", 8)))
        >>> try:
        ...     check_npus(pool, 16)
        ... except UserError as e:
        ...     print(e.message)
        --npus 16: no node of the pool can give a pod that many (allocatable NPUs: a 8, b 8)
    """
    able = [name for name, count in pool.allocatable if count is None or count >= npus]
    if not pool.allocatable or len(able) >= pods:
        return
    listed = ", ".join(f"{name} {count if count is not None else '?'}" for name, count in pool.allocatable)
    most = max((count for _, count in pool.allocatable if count is not None), default=0)
    if not able:
        raise UserError(f"--npus {npus}: no node of the pool can give a pod that many (allocatable NPUs: {listed})",
                        fix=f"--npus {most} or fewer per pod; for more NPUs, more pods: --kind volcano --nodes-count N",
                        exit_code=1)
    raise UserError(f"--npus {npus} on {pods} pods: only {len(able)} node(s) of the pool can give a pod that many "
                    f"({', '.join(able)}; allocatable NPUs: {listed})",
                    fix=f"--nodes-count {len(able)} or fewer, or fewer NPUs per pod", exit_code=1)


def host_pool(info: HostInfo, arch: str, chip: Optional[str] = None) -> Pool:
    """This host as a pool of one (no ``--nodes``): the choice is `pull`'s for this node.

    The chip label values are the SoC name in both spellings MindCluster uses (``910B3`` for
    the 910 family, ``Ascend950PR`` for the 950), since this host's own label is not read.
    """
    if chip is not None and chip != info.chip:
        raise UserError(f"--chip {chip}: this host's chip is {info.chip or 'unknown'}", exit_code=1,
                        fix="leave --chip out, or pass --nodes (kubectl get nodes -o json) to describe the pool")
    values = {info.soc, keys.chip_label_value(info.soc)}
    node = Node(arch=arch, chip=info.chip, driver=info.driver, firmware=info.firmware)
    return Pool(node=node, names=("this host",), weakest="this host", chip_values=tuple(sorted(v for v in values if v)),
                drivers=(info.driver,) if info.driver else ())


def describe(pool: Pool) -> str:
    """The pool in a few words, for messages: ``3 nodes, lowest driver on b; ``.

    >>> describe(Pool(Node("aarch64", "910b", "24.1.RC3", None), ("a", "b"), "b", ("910B3",), ("24.1.RC3",)))
    '2 nodes, lowest driver on b; '
    """
    if pool.names == ("this host",):
        return ""
    count = len(pool.names)
    return f"{count} node{'s' if count != 1 else ''}, lowest driver on {pool.weakest}; "

