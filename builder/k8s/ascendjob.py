"""MindCluster's own job kind: the Ascend Operator's ``mindxdl.gitee.com/v1`` ``AscendJob`` for PyTorch.

Read in Ascend/mind-cluster at commit 22bb3d987bc0208c3eb7395e222b661276133c58 (Helm chart
``ascend-operator-crds`` 26.1.0):

- the CRD: ``component/ascend-operator/build/ascend-operator.yaml`` (``ascendjobs.mindxdl.gitee.com``,
  version ``v1``), kept in ``tests/fixtures/mindcluster/``; the job's shape follows
  ``docs/en/scheduling/api/ascend_job.md`` (``pytorch_multinodes_acjob_910b.yaml``): labels
  ``framework: pytorch`` and ``ring-controller.atlas`` on the job and its pods,
  ``schedulerName: volcano`` with ``runPolicy.schedulingPolicy.minAvailable``, ``successPolicy:
  AllWorkers``, replica specs ``Master`` (1) and ``Worker`` (K - 1), the container named ``ascend``
  (``component/ascend-common/api/default_name.go``: ``DefaultContainerName``, "do not modify") with
  the port ``ascendjob-port``;
- what the operator appends to that container's env for PyTorch
  (``component/ascend-operator/pkg/controllers/v1/env.go``, ``setPytorchEnv``): ``MASTER_ADDR`` and
  ``MASTER_PORT`` (the Master's service: ``service.go``, ``getMngSvcIpAndPort``), ``RANK`` the pod's
  rank (``pod.go``: Master 0, Workers index + 1 when the Master has NPUs), ``WORLD_SIZE`` all NPUs
  of the job, ``LOCAL_WORLD_SIZE`` the pod's NPUs, ``LOCAL_RANK`` their list.

torchrun reads none of these, so its command gets ``--nnodes=K --node-rank=$(RANK)
--master-addr=$(MASTER_ADDR) --master-port=$(MASTER_PORT)``: Kubernetes expands ``$(VAR)`` in a
container's command from its whole env, the operator's appended variables included (an env
value could not refer to them: they come after it). A plain python process per pod reads
``WORLD_SIZE`` as the process count, which the operator sets to the NPUs: it is wired only for
one NPU per pod, and refused otherwise.

Example:
    >>> spec = PodSpec(image="r/p@sha256:" + "0" * 64, chip="910b", arch="aarch64", npus=8,
    ...                command=("torchrun", "train.py"), min_driver="24.1.RC3", chip_values=("910B3",), drivers=())
    >>> doc = ascend_job("train", spec, 2, {})
    >>> doc["kind"], sorted(doc["spec"]["replicaSpecs"]), doc["metadata"]["labels"]["ring-controller.atlas"]
    ('AscendJob', ['Master', 'Worker'], 'ascend-910b')
    >>> doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"][1:5]
    ['torchrun', '--nnodes=2', '--node-rank=$(RANK)', '--master-addr=$(MASTER_ADDR)']
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, Mapping, Tuple

from builder.errors import UserError
from builder.k8s import launcher
from builder.k8s.job import MANAGED_BY, check_name
from builder.k8s.pod import MASTER_PORT, PodSpec, pod_spec, ring_controller

API_VERSION = "mindxdl.gitee.com/v1"
CONTAINER = "ascend"  # the operator finds the container by this name
FRAMEWORK = {"framework": "pytorch"}
JOB_NAME_LABEL = "job-name"  # as MindCluster's AscendJob examples select the job's pods


def command_for(spec: PodSpec, nodes: int) -> Tuple[Tuple[str, ...], launcher.Env]:
    """(command, env) wiring the command's launcher to what the operator injects."""
    kind = launcher.check(spec.command, nodes, "AscendJob")
    if kind == launcher.TORCHRUN:
        flags = [("--nnodes", str(nodes)), ("--node-rank", "$(RANK)"), ("--master-addr", "$(MASTER_ADDR)"),
                 ("--master-port", "$(MASTER_PORT)")]
        return launcher.torchrun_args(spec.command, flags), [{"name": "PET_NPROC_PER_NODE", "value": str(spec.npus)}]
    if kind == launcher.PYTHON and spec.npus != 1:
        raise UserError(f"--kind ascendjob with plain python and --npus {spec.npus}: the Ascend Operator sets "
                        f"WORLD_SIZE to the job's NPUs ({spec.npus * nodes}) and RANK to the pod's rank, so one "
                        "process per pod on env:// would wait for ranks that never come",
                        fix=f"start it with torchrun (-- torchrun --nproc_per_node {spec.npus} train.py), "
                            "or use --npus 1")
    return spec.command, []


def ascend_job(name: str, spec: PodSpec, nodes: int, annotations: Mapping[str, str],
               queue: str = "default") -> Dict[str, Any]:
    """The AscendJob manifest for ``nodes`` pods (``--nodes-count``): a Master and ``nodes - 1`` Workers."""
    check_name(name)
    if nodes < 1:
        raise UserError(f"--nodes-count {nodes}: a job needs at least one node", fix="--nodes-count 2 (or more)")
    command, env = command_for(spec, nodes)
    labels = {**MANAGED_BY, **FRAMEWORK, **ring_controller(spec)}

    def replica(count: int) -> Dict[str, Any]:
        pod = pod_spec(replace(spec, nodes=nodes), env, ports=(MASTER_PORT,), container_name=CONTAINER,
                       command=command)
        pod["affinity"]["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchExpressions": [{"key": JOB_NAME_LABEL, "operator": "In", "values": [name]}]},
            "topologyKey": "kubernetes.io/hostname"}]}
        return {"replicas": count, "restartPolicy": "Never",
                "template": {"metadata": {"labels": {k: v for k, v in labels.items() if k != "framework"}},
                             "spec": pod}}

    replicas = {"Master": replica(1)}
    if nodes > 1:
        replicas["Worker"] = replica(nodes - 1)
    return {
        "apiVersion": API_VERSION,
        "kind": "AscendJob",
        "metadata": {"name": name, "labels": labels, "annotations": dict(annotations)},
        "spec": {
            "schedulerName": "volcano",
            "runPolicy": {"schedulingPolicy": {"minAvailable": nodes, "queue": queue}},
            "successPolicy": "AllWorkers",
            "replicaSpecs": replicas,
        },
    }
