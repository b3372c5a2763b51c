"""A Volcano ``batch.volcano.sh/v1alpha1`` Job: one pod of N NPUs on each of K nodes, gang-scheduled.

As Volcano's user guides set up distributed training: the ``svc`` plugin gives every pod a
stable host name ``JOB-TASK-INDEX.JOB`` (its hostname and a headless service named after the
job), the ``env`` plugin its index; ``minAvailable`` = K starts all pods or none. The rendezvous
is pod 0 of the task; each pod's node rank is its task index; the command's launcher gets them
as it reads them (`builder.k8s.launcher`: ``PET_*`` for torchrun, ``RANK``/``WORLD_SIZE`` per
pod for plain python). A pod anti-affinity puts the pods on different nodes, as MindCluster's
Volcano examples do, and the Job and its pods carry MindCluster's ``ring-controller.atlas``.

What Volcano does, read in volcano-sh/volcano at commit ed72c7c815a9fd547a787134676f73d42e9d049c:

- ``pkg/controllers/job/helpers/helpers.go``: a pod is named ``MakePodName`` = ``"%s-%s-%d"``
  (job, task, index);
- ``pkg/controllers/job/plugins/svc/svc.go`` ``OnPodCreate``: ``pod.Spec.Hostname = pod.Name``,
  ``pod.Spec.Subdomain = job.Name``, and a headless service named after the job, so pod 0 is
  ``JOB-TASK-0.JOB``; ``GenerateHosts`` also lists the hosts in ``VC_WORKER_HOSTS``/``VC_WORKER_NUM`` (``VC_%s_HOSTS``);
- ``pkg/controllers/job/plugins/env/env.go`` ``OnPodCreate``: appends ``VK_TASK_INDEX`` and
  ``VC_TASK_INDEX`` (the pod's index) to each container's env;
- ``pkg/controllers/job/job_controller_util.go`` ``createJobPod``: the pod's annotation
  ``volcano.sh/task-index`` is that same index.

The node rank is read from the annotation (``fieldRef``), not as ``$(VC_TASK_INDEX)``: the env
plugin *appends* its variables after the template's, and Kubernetes expands ``$(VAR)`` in an env
value only from variables defined before it.

Example:
    >>> spec = PodSpec(image="r/p@sha256:" + "0" * 64, chip="910b", arch="aarch64", npus=8,
    ...                command=("python", "train.py"), min_driver="24.1.RC3", chip_values=("910B3",), drivers=())
    >>> doc = volcano_job("train", spec, 2, {})
    >>> doc["spec"]["minAvailable"], doc["spec"]["plugins"], doc["spec"]["tasks"][0]["replicas"]
    (2, {'env': [], 'svc': []}, 2)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, Mapping

from builder.errors import UserError
from builder.k8s.job import MANAGED_BY, check_name
from builder.k8s import launcher
from builder.k8s.pod import MASTER_PORT, PodSpec, pod_spec, ring_controller

TASK = "worker"
JOB_NAME_LABEL = "volcano.sh/job-name"
TASK_INDEX = "metadata.annotations['volcano.sh/task-index']"


def master_address(name: str) -> str:
    """Pod 0's host name under the ``svc`` plugin: ``JOB-TASK-0.JOB``.

    >>> master_address("llama-sft")
    'llama-sft-worker-0.llama-sft'
    """
    return f"{name}-{TASK}-0.{name}"


def volcano_job(name: str, spec: PodSpec, nodes: int, annotations: Mapping[str, str],
                queue: str = "default") -> Dict[str, Any]:
    """The Volcano Job manifest for ``nodes`` pods (``--nodes-count``)."""
    check_name(name)
    if nodes < 1:
        raise UserError(f"--nodes-count {nodes}: a job needs at least one node", fix="--nodes-count 2 (or more)")
    env = launcher.rendezvous_env(spec.command, nodes, spec.npus, {"fieldRef": {"fieldPath": TASK_INDEX}},
                                  master_address(name), str(MASTER_PORT), "Volcano")
    pod = pod_spec(replace(spec, nodes=nodes), env, ports=(MASTER_PORT,))
    pod["affinity"]["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchExpressions": [{"key": JOB_NAME_LABEL, "operator": "In", "values": [name]}]},
        "topologyKey": "kubernetes.io/hostname"}]}
    labels = {**MANAGED_BY, **ring_controller(spec)}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "labels": dict(labels), "annotations": dict(annotations)},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": nodes,
            "queue": queue,
            "plugins": {"env": [], "svc": []},
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "tasks": [{"name": TASK, "replicas": nodes,
                       "template": {"metadata": {"labels": dict(labels)}, "spec": pod}}],
        },
    }
