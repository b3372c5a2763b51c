"""The Pod template every manifest shares: what makes a pod run the validated image safely.

- ``image``: the validated image **by digest**, so what runs is what was checked.
- ``command``: the user's command behind the image's driver guard (``GUARD_PATH``), so the
  check of the mounted driver's ``version.info`` holds even when Kubernetes starts the pod.
- ``resources``: the device plugin's resource for the chip, limits = requests = N.
- ``affinity``: only nodes of the image's arch and chip whose driver is at least the image's
  minimum: the device plugin's chip label (``node.kubernetes.io/npu.chip.name``) one of the pool's
  chip names, and ascend-build's driver ordinal label (``Gt`` ordinal - 1, since selectors compare
  only integers) or the device plugin's driver label (``huawei.com/driver.version``) one of the
  pool's versions that suffice: one term per driver test, since terms are ORed.
- ``volumes``: read-only hostPath mounts of the driver files the chip and the job's shape need
  (`builder.k8s.mounts`: ``hccn.conf`` only for multi-node training, the driver's ``topo`` only
  on the 950); and a memory-backed ``/dev/shm`` (the container runtime's default is 64 MiB,
  which HCCL and dataloaders starve on).
- ``env``: what the command's launcher reads to find the other pods (`builder.k8s.launcher`),
  given by the job kind. ``ASCEND_VISIBLE_DEVICES`` is not set: the device plugin's Allocate
  answer sets it; an empty one from a missing annotation would mount no NPU.
- the label ``ring-controller.atlas`` (`ring_controller`), which MindCluster's Volcano plugin,
  device plugin and Ascend Operator read to know an Atlas pod and its chip.

Example:
    >>> spec = PodSpec(image="r/p@sha256:" + "0" * 64, chip="910b", arch="aarch64", npus=8,
    ...                command=("python", "train.py"), min_driver="24.1.RC3",
    ...                chip_values=("910B3",), drivers=("24.1.RC3",))
    >>> pod_spec(spec, [])["containers"][0]["command"]
    ['/usr/local/bin/ascend-driver-guard', 'python', 'train.py']
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from builder import versions
from builder.errors import UserError
from builder.k8s import mounts as driver_mounts
from builder.node import labels as keys
from builder.vocabulary import CPU, NPU

# The driver guard inside every NPU image (helper "node" builds it): checks the mounted driver's
# version.info against the image's requirement, then execs the command.
GUARD_PATH = "/usr/local/bin/ascend-driver-guard"

# The Ascend Device Plugin's resource per chip (Ascend/mind-cluster, ascend-common/api/default_name.go:
# huawei.com/Ascend910 for 910, 910B and A3; huawei.com/Ascend310P; docs/en/release_notes.md: the
# Atlas 350/850/950 products request huawei.com/npu).
NPU_RESOURCES = {"910": "huawei.com/Ascend910", "910b": "huawei.com/Ascend910", "a3": "huawei.com/Ascend910",
                 "310p": "huawei.com/Ascend310P", "950": "huawei.com/npu"}

# Ascend Operator's MASTER_PORT default for PyTorch jobs (its "ascendjob-port"; Ascend/mind-cluster,
# component/ascend-operator/pkg/api/v1/constants.go: DefaultPort = 2222), used by every kind.
MASTER_PORT = 2222
CONTAINER = "main"
# MindCluster's label for an Atlas pod and its chip (Ascend/mind-cluster at 22bb3d98,
# component/ascend-for-volcano/common/util/constants.go: JobKind910Value "ascend-910",
# JobKind910BValue "ascend-910b", JobKind310PValue "ascend-310P"; docs/en/scheduling/api/volcano.md
# lists "ascend-npu" besides). No source names A3's value: ascend-build gives it the 910B's; the 950 "ascend-npu".
RING_CONTROLLER = "ring-controller.atlas"
RING_CONTROLLER_VALUES = {"910": "ascend-910", "910b": "ascend-910b", "a3": "ascend-910b", "310p": "ascend-310P",
                          "950": "ascend-npu"}
SHM_VOLUME = "dshm"

Env = List[Dict[str, Any]]


@dataclass(frozen=True)
class PodSpec:
    """What the Pod template is made of: the image by digest and what it needs of a node."""

    image: str
    chip: str
    arch: str
    npus: int
    command: Tuple[str, ...]
    min_driver: str
    chip_values: Tuple[str, ...]
    drivers: Tuple[str, ...]
    shm_size: str = "16Gi"
    nodes: int = 1  # pods of the job: which driver files a pod needs depends on it (hccn.conf)
    # npu, or cpu: the CPU twin (`k8s job --variant cpu`), which asks for no NPU, mounts no driver
    # file and selects nodes by arch alone; ``npus`` is then its processes (WORLD_SIZE's share)
    variant: str = NPU


def resource(chip: str) -> str:
    """The device plugin's resource name for ``chip``.

    >>> resource("910b"), resource("310p")
    ('huawei.com/Ascend910', 'huawei.com/Ascend310P')
    """
    try:
        return NPU_RESOURCES[chip]
    except KeyError:
        raise UserError(f"no Ascend device plugin resource is known for chip {chip!r}",
                        fix=f"one of {', '.join(NPU_RESOURCES)}") from None


def volume_name(path: str) -> str:
    """A DNS-1123 label for a host path: ``/etc/hccn.conf`` -> ``etc-hccn-conf``.

    >>> volume_name("/usr/local/Ascend/driver/lib64")
    'usr-local-ascend-driver-lib64'
    """
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")[:63]


def driver_floor(min_driver: str) -> versions.AscendVersion:
    """The lowest HDK version the image's min-driver label stands for (a line name's first release)."""
    floor = versions.minimum("hdk", min_driver)
    if floor is None:
        raise UserError(f"the image's minimum driver {min_driver!r} is not an HDK version or line",
                        fix="rebuild the image with ascend-build (it writes the label)", exit_code=1)
    return floor


def affinity(spec: PodSpec) -> Dict[str, Any]:
    """Required node affinity: arch AND chip AND driver at least the image's minimum.

    ``nodeSelectorTerms`` are ORed and a term's expressions ANDed, so each way to show the driver
    (ascend-build's ordinal label, the device plugin's version label) is one term, with the arch
    and the chip label (`builder.node.labels`: the keys the device plugin writes).
    """
    arch_only = {"key": keys.KUBE_ARCH_LABEL, "operator": "In", "values": [keys.KUBE_ARCH_VALUES[spec.arch]]}
    if spec.variant == CPU:  # the twin needs no NPU node: any node of its arch
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [arch_only]}]}}}
    floor = driver_floor(spec.min_driver)
    # every spelling of each: a node's label may say 24.1.rc3 (the driver's, the device plugin's) or 24.1.RC3; In compares bytes
    sufficient = list(dict.fromkeys(spelled for d in spec.drivers if versions.meets_minimum("hdk", d, spec.min_driver)
                                    for spelled in keys.driver_label_spellings(d)))
    driver_tests: List[Dict[str, Any]] = [
        {"key": keys.DRIVER_ORDINAL_LABEL, "operator": "Gt", "values": [str(versions.driver_ordinal(floor) - 1)]}]
    if sufficient:
        driver_tests += [{"key": key, "operator": "In", "values": sufficient} for key in keys.DRIVER_VERSION_LABELS]
    arch = {"key": keys.KUBE_ARCH_LABEL, "operator": "In", "values": [keys.KUBE_ARCH_VALUES[spec.arch]]}
    terms = [{"matchExpressions": [arch, {"key": chip_key, "operator": "In", "values": list(spec.chip_values)}, test]}
             for chip_key in keys.CHIP_LABELS for test in driver_tests]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def ring_controller(spec: PodSpec) -> Dict[str, str]:
    """The ``ring-controller.atlas`` label for the pods and jobs of ``spec``'s chip; none for
    the CPU twin, which asks for no NPU (MindCluster's scheduling keys on it).

    >>> ring_controller(PodSpec("i", "910b", "x86_64", 8, ("python",), "", (), ()))
    {'ring-controller.atlas': 'ascend-910b'}
    >>> ring_controller(PodSpec("i", "310p", "x86_64", 1, ("python",), "", (), (), variant=CPU))
    {}
    """
    if spec.variant == CPU:
        return {}
    resource(spec.chip)  # an unknown chip is refused there, with the chips known
    return {RING_CONTROLLER: RING_CONTROLLER_VALUES[spec.chip]}


def volumes(spec: PodSpec) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(volumes, volumeMounts): read-only hostPaths of the driver files the chip and the job's
    shape need (`builder.k8s.mounts`), and ``/dev/shm`` in memory.

    A hostPath says File or Directory, so a node without a path every such node has fails the
    pod's start with the path named; a path only some nodes have is not mounted.
    """
    vols: List[Dict[str, Any]] = []
    mounts: List[Dict[str, Any]] = []
    for path, kind in (driver_mounts.mounts(spec.chip, spec.nodes) if spec.variant != CPU else ()):
        vols.append({"name": volume_name(path), "hostPath": {"path": path, "type": kind}})
        mounts.append({"name": volume_name(path), "mountPath": path, "readOnly": True})
    vols.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}})
    mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    return vols, mounts


def pod_spec(spec: PodSpec, env: Env, ports: Tuple[int, ...] = (), container_name: str = CONTAINER,
             command: Tuple[str, ...] = ()) -> Dict[str, Any]:
    """The Pod spec: one container named ``container_name`` running ``command`` (default
    ``spec.command``) behind the driver guard."""
    if spec.npus < 1:
        what = "process" if spec.variant == CPU else "NPU"
        raise UserError(f"--npus {spec.npus}: a training pod needs at least one {what}", fix="--npus 1 (or 2, 4, 8, 16)")
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?", spec.shm_size):
        raise UserError(f"--shm-size {spec.shm_size!r} is not a Kubernetes quantity", fix="e.g. --shm-size 16Gi (or 500Mi)")
    if not spec.command:
        raise UserError("no command to run", fix="put it after --, e.g. -- torchrun --nproc_per_node 8 train.py")
    vols, mounts = volumes(spec)
    container: Dict[str, Any] = {
        "name": container_name,
        "image": spec.image,
        "command": [GUARD_PATH, *(command or spec.command)],
        "env": env,
    }
    if spec.variant != CPU:  # the twin asks for no NPU
        name = resource(spec.chip)
        # quantities are strings in Kubernetes' model (the API server takes a number too; its clients do not)
        container["resources"] = {"limits": {name: str(spec.npus)}, "requests": {name: str(spec.npus)}}
    container["volumeMounts"] = mounts
    if ports:
        container["ports"] = [{"name": "ascendjob-port", "containerPort": port} for port in ports]
    return {"restartPolicy": "Never", "affinity": affinity(spec), "containers": [container], "volumes": vols}
