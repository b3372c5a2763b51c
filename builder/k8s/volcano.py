"""A Volcano ``batch.volcano.sh/v1alpha1`` Job: one pod of N NPUs on each of K nodes, gang-scheduled.

As Volcano's user guides set up distributed training: the ``svc`` plugin gives every pod a
stable host name ``JOB-TASK-INDEX.JOB`` (its hostname and a headless service named after the
job), the ``env`` plugin its index; ``minAvailable`` = K starts all pods or none. HCCL's master
is pod 0 of the task; each pod's ``RANK`` is its task index (the ``volcano.sh/task-index``
annotation Volcano's job controller writes), and a pod anti-affinity puts the pods on
different nodes, as MindCluster's Volcano examples do.

Example:
    >>> spec = PodSpec(image="r/p@sha256:" + "0" * 64, chip="910b", arch="aarch64", npus=8,
    ...                command=("python", "train.py"), min_driver="24.1.RC3", chip_values=("910B3",), drivers=())
    >>> doc = volcano_job("train", spec, 2, {})
    >>> doc["spec"]["minAvailable"], doc["spec"]["plugins"], doc["spec"]["tasks"][0]["replicas"]
    (2, {'env': [], 'svc': []}, 2)
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

from builder.errors import UserError
from builder.k8s.job import MANAGED_BY, check_name
from builder.k8s.pod import MASTER_PORT, PodSpec, hccl_env, pod_spec

TASK = "worker"
JOB_NAME_LABEL = "volcano.sh/job-name"
TASK_INDEX = "metadata.annotations['volcano.sh/task-index']"


def volcano_job(name: str, spec: PodSpec, nodes: int, annotations: Mapping[str, str],
                queue: str = "default") -> Dict[str, Any]:
    """The Volcano Job manifest for ``nodes`` pods (``--nodes-count``)."""
    check_name(name)
    if nodes < 1:
        raise UserError(f"--nodes-count {nodes}: a job needs at least one node", fix="--nodes-count 2 (or more)")
    env = hccl_env(spec.npus, nodes, f"{name}-{TASK}-0.{name}", rank={"fieldRef": {"fieldPath": TASK_INDEX}})
    pod = pod_spec(spec, env, ports=(MASTER_PORT,))
    pod["affinity"]["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchExpressions": [{"key": JOB_NAME_LABEL, "operator": "In", "values": [name]}]},
        "topologyKey": "kubernetes.io/hostname"}]}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "labels": dict(MANAGED_BY), "annotations": dict(annotations)},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": nodes,
            "queue": queue,
            "plugins": {"env": [], "svc": []},
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "tasks": [{"name": TASK, "replicas": nodes,
                       "template": {"metadata": {"labels": dict(MANAGED_BY)}, "spec": pod}}],
        },
    }
