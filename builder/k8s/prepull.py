"""Pre-pull the chosen image where the job will land: a DaemonSet, or an OpenKruise ImagePullJob.

- ``daemonset``: an ``apps/v1`` DaemonSet whose pods carry **the job's node affinity**
  (`builder.k8s.pod.affinity` of the same `PodSpec`), so the DaemonSet controller puts one pod
  on exactly the nodes the job may be scheduled on. Its one container is the image **by digest**
  with ``command: ["sleep", "infinity"]``: the command replaces the image's ENTRYPOINT (the
  driver guard), so nothing of the image's payload runs and no driver is read. ``sleep`` is the
  image's own GNU coreutils (Debian, Ubuntu and openEuler, the OSes ascend-build builds on, ship
  it; the engine test ran it on Debian). It asks for no NPU, 1m of CPU and 16Mi of memory, and
  runs as user 65534 with no capabilities, no privilege escalation and a read-only
  root file system. A pod is Ready once its container runs, which is only after the node holds
  the image: the DaemonSet's status (``numberReady`` of ``desiredNumberScheduled``; ``kubectl
  rollout status``) and each pod's Ready condition (``kubectl get pods -o wide``) say which
  nodes hold it.
- ``image_pull_job``: an OpenKruise ``apps.kruise.io/v1alpha1`` ImagePullJob that pulls the digest
  on the pool's nodes **by name** (``selector.names``): its selector is a label selector, which
  has no ``Gt`` and no OR of terms, so it cannot carry the job's affinity; each named node is one
  the affinity admits, since the image was chosen to fit the pool's lowest driver.

Example:
    >>> spec = PodSpec(image="r/p@sha256:" + "0" * 64, chip="910b", arch="aarch64", npus=8,
    ...                command=("python", "train.py"), min_driver="24.1.RC3", chip_values=("910B3",), drivers=())
    >>> doc = daemonset("train", spec, {})
    >>> doc["kind"], doc["metadata"]["name"], doc["spec"]["template"]["spec"]["containers"][0]["command"]
    ('DaemonSet', 'train-prepull', ['sleep', 'infinity'])
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

from builder.errors import UserError
from builder.k8s.job import MANAGED_BY, check_name
from builder.k8s.pod import PodSpec, affinity

SUFFIX = "-prepull"
PAUSE = ["sleep", "infinity"]
NOBODY = 65534
# A pull of a 20 GB image over a busy link takes longer than OpenKruise's default of 600 s.
PULL_TIMEOUT = 1800
PULL_RETRIES = 3


def prepull_name(name: str) -> str:
    """The pre-pull object's name for the job ``name``.

    >>> prepull_name("llama")
    'llama-prepull'
    """
    return check_name(name) + SUFFIX


def header(name: str) -> List[str]:
    """The comment lines above the DaemonSet: what it does and how to see which nodes hold the image.

    >>> header("llama")[1]
    'ready per node: kubectl rollout status daemonset/llama-prepull; kubectl get pods -l app.kubernetes.io/name=llama-prepull -o wide'
    """
    ds = prepull_name(name)
    return ["pre-pull: one pod on each node the job's affinity admits; it pulls the image by digest and sleeps",
            f"ready per node: kubectl rollout status daemonset/{ds}; kubectl get pods -l app.kubernetes.io/name={ds} -o wide"]


def pull_annotations(tag: str) -> Dict[str, str]:
    """The pre-pull object's annotations, the same from `k8s prepull` and `k8s job --prepull`: the image's tag.

    >>> pull_annotations("cell-cpu")
    {'ascend-build.io/image-tag': 'cell-cpu'}
    """
    return {"ascend-build.io/image-tag": tag}


def _labels(name: str) -> Dict[str, str]:
    return {**MANAGED_BY, "app.kubernetes.io/name": prepull_name(name)}


def daemonset(name: str, spec: PodSpec, annotations: Mapping[str, str]) -> Dict[str, Any]:
    """The DaemonSet that pulls ``spec.image`` onto every node the job's affinity admits."""
    labels = _labels(name)
    container: Dict[str, Any] = {
        "name": "prepull",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(PAUSE),
        "resources": {"requests": {"cpu": "1m", "memory": "16Mi"}, "limits": {"memory": "16Mi"}},
        "securityContext": {"runAsNonRoot": True, "runAsUser": NOBODY, "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": prepull_name(name), "labels": dict(labels), "annotations": dict(annotations)},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "affinity": affinity(spec),
                    "automountServiceAccountToken": False,
                    # sleep as PID 1 ignores SIGTERM: do not wait 30 s for it on a rollout or a delete
                    "terminationGracePeriodSeconds": 1,
                    "containers": [container],
                },
            },
        },
    }


def image_pull_job(name: str, image: str, nodes: Sequence[str], annotations: Mapping[str, str]) -> Dict[str, Any]:
    """The OpenKruise ImagePullJob that pulls ``image`` on ``nodes`` (all at once), three tries each.

    >>> doc = image_pull_job("train", "r/p@sha256:" + "0" * 64, ["n1", "n2", "n1"], {})
    >>> doc["spec"]["selector"], doc["spec"]["parallelism"]
    ({'names': ['n1', 'n2']}, 2)
    """
    names = list(dict.fromkeys(nodes))  # OpenKruise's webhook refuses a name listed twice
    if not names:
        raise UserError("an ImagePullJob needs the pool's node names", fix="pass --nodes (kubectl get nodes -o json)")
    return {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ImagePullJob",
        "metadata": {"name": prepull_name(name), "labels": _labels(name), "annotations": dict(annotations)},
        "spec": {
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "selector": {"names": names},
            "parallelism": len(names),
            "pullPolicy": {"backoffLimit": PULL_RETRIES, "timeoutSeconds": PULL_TIMEOUT},
            "completionPolicy": {"type": "Always"},
        },
    }
