"""A Volcano ``batch.volcano.sh/v1alpha1`` Job: one pod of N NPUs on each of K nodes, gang-scheduled.

As Volcano's user guides set up distributed training: the ``svc`` plugin gives every pod a
stable host name ``JOB-TASK-INDEX.JOB`` (its hostname and a headless service named after the
job), the ``env`` plugin its index; ``minAvailable`` = K starts all pods or none. The rendezvous
is pod 0 of the task; each pod's node rank is its task index; the command's launcher gets them
as it reads them (`builder.k8s.launcher`: ``PET_*`` for torchrun, ``RANK``/``WORLD_SIZE`` per
pod for plain python). A pod anti-affinity puts the pods on different nodes, as MindCluster's
Volcano examples do, and the Job and its pods carry MindCluster's ``ring-controller.atlas``.

What Volcano does, read in volcano-sh/volcano at commit ed72c7c815a9fd547a787134676f73d42e9d049c
(the main branch after v1.16.0-alpha.1) and at its tags v1.0.0, v1.7.0 and v1.9.0:

- ``pkg/controllers/job/helpers/helpers.go``: a pod is named ``MakePodName`` = ``"%s-%s-%d"``
  (job, task, index);
- ``pkg/controllers/job/plugins/svc/svc.go`` ``OnPodCreate``: ``pod.Spec.Hostname = pod.Name``,
  ``pod.Spec.Subdomain = job.Name``, and a headless service named after the job, so pod 0 is
  ``JOB-TASK-0.JOB``; ``GenerateHosts`` also lists the hosts in ``VC_WORKER_HOSTS``/``VC_WORKER_NUM`` (``VC_%s_HOSTS``);
- ``pkg/controllers/job/plugins/env/env.go`` ``OnPodCreate``: appends ``VK_TASK_INDEX`` and
  ``VC_TASK_INDEX`` (the pod's index; ``env/const.go``: ``TaskIndex = "VC_TASK_INDEX"``) to each
  container's env, the same at every tag read (v1.0.0 to the main branch);
- ``pkg/controllers/job/job_controller_util.go`` ``createJobPod``: the annotation and label
  ``volcano.sh/task-index`` with that index, **only from v1.9.0** (absent at v1.7.0 and v1.8.2;
  MindCluster 26.1's installation guide deploys Volcano 1.7.0, and its Volcano plugin supports
  1.7.0 and 1.9.0: Ascend/mind-cluster,
  ``docs/en/scheduling/developer_guide/installation_deployment/manual_installation/05_volcano.md``).

The node rank is therefore read from the env plugin's ``VC_TASK_INDEX``, which every Volcano from
1.0 sets, not from the annotation. The plugin *appends* it after the template's variables, and
Kubernetes expands ``$(VAR)`` in an env value only from variables defined before it, so it is read
in the command (`builder.k8s.launcher.rendezvous`): ``torchrun --node-rank=$(VC_TASK_INDEX)``, or
``env RANK=$(VC_TASK_INDEX) python ...``. Volcano 1.0 or newer runs the Job (``MIN_VERSION``):
the fields it uses are in the Job CRD there and the two plugins do the above there.

Example:
    >>> spec = PodSpec(image="r/p@sha256:" + "0" * 64, chip="910b", arch="aarch64", npus=8,
    ...                command=("python", "train.py"), min_driver="24.1.RC3", chip_values=("910B3",), drivers=())
    >>> doc = volcano_job("train", spec, 2, {})
    >>> doc["spec"]["minAvailable"], doc["spec"]["plugins"], doc["spec"]["tasks"][0]["replicas"]
    (2, {'env': [], 'svc': []}, 2)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List, Mapping

from builder.errors import UserError
from builder.k8s.job import MANAGED_BY, check_name
from builder.k8s import launcher
from builder.k8s.pod import MASTER_PORT, PodSpec, pod_spec, ring_controller

TASK = "worker"
JOB_NAME_LABEL = "volcano.sh/job-name"
TASK_INDEX = "VC_TASK_INDEX"  # the env plugin's, appended to the container's env (env/const.go)
MIN_VERSION = "1.0"


def header(name: str) -> List[str]:
    """The comment lines above the Job: which Volcano runs it, and how to see which one a cluster has.

    >>> header("llama")[0]
    'needs Volcano 1.0 or newer (its env plugin gives each pod VC_TASK_INDEX, its svc plugin the host llama-worker-INDEX.llama)'
    """
    return [f"needs Volcano {MIN_VERSION} or newer (its env plugin gives each pod {TASK_INDEX}, its svc plugin "
            f"the host {name}-{TASK}-INDEX.{name})",
            "which Volcano runs: kubectl get deployments -A -l app=volcano-controller "
            "-o jsonpath='{..containers[*].image}'"]


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
    command, env = launcher.rendezvous(spec.command, nodes, spec.npus, launcher.appended(TASK_INDEX),
                                       master_address(name), str(MASTER_PORT), "Volcano")
    pod = pod_spec(replace(spec, nodes=nodes), env, ports=(MASTER_PORT,), command=command)
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
