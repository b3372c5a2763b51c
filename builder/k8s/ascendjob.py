"""MindCluster's own job kind: the Ascend Operator's ``mindxdl.gitee.com/v1`` ``AscendJob`` for PyTorch.

Read in Ascend/mind-cluster at commit 22bb3d987bc0208c3eb7395e222b661276133c58 (Helm chart
``ascend-operator-crds`` 26.1.0), the operator's sources under
``component/ascend-operator/pkg/controllers/v1/``, and in kubeflow/common v0.4.3 (commit
21f5ba8833a2e21df17601497a08396c9bae9ab2, the version the operator's ``go.mod`` requires), whose
``JobController`` the operator embeds (``ascendjob_controller.go:113``):

- the CRD: ``component/ascend-operator/build/ascend-operator.yaml`` (``ascendjobs.mindxdl.gitee.com``,
  version ``v1``), kept in ``tests/fixtures/mindcluster/``; the job's shape follows
  ``docs/en/scheduling/api/ascend_job.md`` (``pytorch_multinodes_acjob_910b.yaml``): labels
  ``framework: pytorch`` and ``ring-controller.atlas`` on the job and its pods,
  ``schedulerName: volcano`` with ``runPolicy.schedulingPolicy.minAvailable``, ``successPolicy:
  AllWorkers``, replica specs ``Master`` (1) and ``Worker`` (K - 1), the container named ``ascend``
  (``component/ascend-common/api/default_name.go``: ``DefaultContainerName``, "do not modify") with
  the port ``ascendjob-port``;
- the labels the operator puts on every pod it creates (``labels.go:25`` and ``:42-44``: the
  ``GenLabels`` of kubeflow/common's ``pkg/controller.v1/common/job_controller.go:209-217``), among
  them ``training.kubeflow.org/job-name`` = the job's name (``pkg/apis/common/v1/constants.go:28``;
  the deprecated ``job-name`` besides): the pod anti-affinity selects on it (``JOB_NAME_LABEL``);
  the pods are named ``JOB-master-0`` and ``JOB-worker-INDEX`` (``pod.go:733``, kubeflow's
  ``GenGeneralName``, ``util.go:50-53``);
- the Service the operator creates for the Master, named ``JOB-master-0`` (``jobinfo.go:168``,
  ``service.go:50``), a ClusterIP Service selecting the Master's pod on its ``ascendjob-port``;
- what the operator appends to the ``ascend`` container's env (``pod.go:760-787``, ``setEnv``):
  for every pod ``setCommonEnv`` (``env.go:168-186``: ``MINDX_TASK_ID``, ``MINDX_SERVER_IP``,
  ``MINDX_SERVER_DOMAIN``, ``HostNetwork``, ``REPLICA_TYPE``; ``ASCEND_VISIBLE_DEVICES`` and
  ``HCCL_LOGIC_SUPERPOD_ID`` only for a ``huawei.com/`` resource), then **only when the pods ask
  for NPUs** (``pod.go:772``: ``if pi.ctReq == 0 { return nil }``, ``ctReq`` being the NPUs of the
  ``ascend`` container, ``utils.go:106-118``) ``setPytorchEnv`` (``env.go:248-272``):
  ``MASTER_ADDR`` and ``MASTER_PORT`` (that Service's ClusterIP and port, ``service.go:95-112``),
  ``RANK`` the pod's rank (``pod.go:723-731``: Master 0, Workers index + 1 when the Master has
  NPUs), ``WORLD_SIZE`` all NPUs of the job, ``LOCAL_WORLD_SIZE`` the pod's NPUs, ``LOCAL_RANK``
  their list.

**The NPU image.** torchrun reads none of the operator's variables, so its command gets
``--nnodes=K --node-rank=$(RANK) --master-addr=$(MASTER_ADDR) --master-port=$(MASTER_PORT)``:
Kubernetes expands ``$(VAR)`` in a container's command from its whole env, the operator's
appended variables included (an env value could not refer to them: they come after it). A plain
python process per pod reads ``WORLD_SIZE`` as the process count, which the operator sets to the
NPUs: it is wired only for one NPU per pod, and refused otherwise.

**The CPU twin** (``--variant cpu``) asks for no NPU, so the operator appends no ``RANK``,
``WORLD_SIZE`` or ``MASTER_ADDR``; what a pod has is its own address (the downward API's
``status.podIP``) and the Master's Service name. torchrun's c10d rendezvous needs no node rank:
``--rdzv-backend=c10d --rdzv-endpoint=JOB-master-0:2222 --rdzv-id=JOB --nnodes=K``, the Master
hosting the rendezvous store (``--rdzv-conf=is_host=1``: the Workers, ``is_host=0``, connect to it
through the Service) and each pod announcing its own IP (``--local-addr=$(POD_IP)``): torch 2.13's
node rank 0 publishes ``--local-addr`` (else its host name, which no other pod resolves) as the
workers' ``MASTER_ADDR`` (``dynamic_rendezvous.py``: ``next_rendezvous``; ``api.py``: ``RendezvousStoreInfo.build``).
``read_timeout=600`` lets a Worker wait for the Master's store as long as the static rendezvous
does. Plain python on several pods cannot be wired (a Worker's rank would be its index + 1, and
Kubernetes cannot add) and is refused, with the fix; on one pod it gets rank 0 of 1.

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
from typing import Any, Dict, List, Mapping, Tuple

from builder.errors import UserError
from builder.k8s import launcher
from builder.k8s.job import MANAGED_BY, check_name
from builder.k8s.pod import MASTER_PORT, PodSpec, pod_spec, ring_controller
from builder.vocabulary import CPU

API_VERSION = "mindxdl.gitee.com/v1"
CONTAINER = "ascend"  # the operator finds the container by this name
FRAMEWORK = {"framework": "pytorch"}
# kubeflow/common v0.4.3 constants.go:28 (JobNameLabel), set by GenLabels on every pod of the job
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
MASTER, WORKER = "Master", "Worker"
POD_IP = "POD_IP"
# the torchrun flags the CPU twin's wiring gives besides launcher.RENDEZVOUS_FLAGS
C10D_FLAGS = ("--rdzv-conf", "--rdzv_conf", "--local-addr", "--local_addr")
STORE_WAIT = 600  # seconds a Worker waits for the Master's store: the static rendezvous's default


def master_service(name: str) -> str:
    """The Service the operator creates for the Master: ``GenGeneralName(job, "master", "0")``.

    >>> master_service("llama-sft")
    'llama-sft-master-0'
    """
    return f"{name}-{MASTER.lower()}-0"


def check(command: Tuple[str, ...], nodes: int, variant: str, npus: int) -> str:
    """The command's launcher, refused where an AscendJob of ``nodes`` pods cannot wire it (see the module).

    >>> try:
    ...     check(("python", "train.py"), 2, CPU, 1)
    ... except UserError as e:
    ...     print(e.fix)
    start it with torchrun (-- torchrun --nproc_per_node 1 train.py: the pods meet at the Master's Service through torchrun's c10d rendezvous), or use --kind volcano, or --nodes-count 1
    """
    kind = launcher.check(command, nodes, "AscendJob", wired=C10D_FLAGS if variant == CPU else ())
    if kind == launcher.PYTHON and variant == CPU and nodes > 1:
        raise UserError(f"--kind ascendjob --variant cpu with plain python over {nodes} pods: the CPU twin asks for "
                        "no NPU, so the Ascend Operator gives its pods no RANK, WORLD_SIZE or MASTER_ADDR (it sets "
                        "them only for pods that request a huawei.com/ resource), and no pod can know its rank",
                        fix=f"start it with torchrun (-- torchrun --nproc_per_node {npus} train.py: the pods "
                            "meet at the Master's Service through torchrun's c10d rendezvous), or use --kind volcano, "
                            "or --nodes-count 1")
    if kind == launcher.PYTHON and variant != CPU and npus != 1:
        raise UserError(f"--kind ascendjob with plain python and --npus {npus}: the Ascend Operator sets "
                        f"WORLD_SIZE to the job's NPUs ({npus * nodes}) and RANK to the pod's rank, so one "
                        "process per pod on env:// would wait for ranks that never come",
                        fix=f"start it with torchrun (-- torchrun --nproc_per_node {npus} train.py), "
                            "or use --npus 1")
    return kind


def command_for(spec: PodSpec, nodes: int, name: str = "", role: str = WORKER) -> Tuple[Tuple[str, ...], launcher.Env]:
    """(command, env) wiring the command's launcher to what the operator injects into ``role``'s pods."""
    kind = check(spec.command, nodes, spec.variant, spec.npus)
    if kind == launcher.TORCHRUN and spec.variant == CPU:  # no operator variable to read
        flags = [("--nnodes", str(nodes)), ("--rdzv-backend", "c10d"),
                 ("--rdzv-endpoint", f"{master_service(name)}:{MASTER_PORT}"), ("--rdzv-id", name),
                 ("--rdzv-conf", f"is_host={int(role == MASTER)},read_timeout={STORE_WAIT}"),
                 ("--local-addr", launcher.appended(POD_IP))]
        env: launcher.Env = [{"name": POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                             {"name": "PET_NPROC_PER_NODE", "value": str(spec.npus)}]
        return launcher.torchrun_args(spec.command, flags), env
    if kind == launcher.TORCHRUN:
        flags = [("--nnodes", str(nodes)), ("--node-rank", "$(RANK)"), ("--master-addr", "$(MASTER_ADDR)"),
                 ("--master-port", "$(MASTER_PORT)")]
        return launcher.torchrun_args(spec.command, flags), [{"name": "PET_NPROC_PER_NODE", "value": str(spec.npus)}]
    if kind == launcher.PYTHON and spec.variant == CPU:  # one pod: rank 0 of 1, as the operator gives none
        return launcher.rendezvous(spec.command, 1, spec.npus, "0", "localhost", str(MASTER_PORT), "AscendJob")
    return spec.command, []


def header(name: str, spec: PodSpec) -> List[str]:
    """The comment lines above the AscendJob: how its pods find each other.

    >>> twin = PodSpec("i", "910b", "x86_64", 2, ("torchrun", "t.py"), "", (), (), variant=CPU)
    >>> print(header("llama", twin)[0])
    the CPU twin asks for no NPU, so the Ascend Operator gives its pods no RANK or MASTER_ADDR: torchrun meets at the Master's Service llama-master-0:2222 (c10d rendezvous)
    """
    if spec.variant == CPU and launcher.kind_of(spec.command) == launcher.TORCHRUN:
        return [f"the CPU twin asks for no NPU, so the Ascend Operator gives its pods no RANK or MASTER_ADDR: "
                f"torchrun meets at the Master's Service {master_service(name)}:{MASTER_PORT} (c10d rendezvous)"]
    return []


def ascend_job(name: str, spec: PodSpec, nodes: int, annotations: Mapping[str, str],
               queue: str = "default") -> Dict[str, Any]:
    """The AscendJob manifest for ``nodes`` pods (``--nodes-count``): a Master and ``nodes - 1`` Workers."""
    check_name(name)
    if nodes < 1:
        raise UserError(f"--nodes-count {nodes}: a job needs at least one node", fix="--nodes-count 2 (or more)")
    labels = {**MANAGED_BY, **FRAMEWORK, **ring_controller(spec)}

    def replica(role: str, count: int) -> Dict[str, Any]:
        command, env = command_for(spec, nodes, name, role)
        pod = pod_spec(replace(spec, nodes=nodes), env, ports=(MASTER_PORT,), container_name=CONTAINER,
                       command=command)
        pod["affinity"]["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchExpressions": [{"key": JOB_NAME_LABEL, "operator": "In", "values": [name]}]},
            "topologyKey": "kubernetes.io/hostname"}]}
        return {"replicas": count, "restartPolicy": "Never",
                "template": {"metadata": {"labels": {k: v for k, v in labels.items() if k != "framework"}},
                             "spec": pod}}

    replicas = {MASTER: replica(MASTER, 1)}
    if nodes > 1:
        replicas[WORKER] = replica(WORKER, nodes - 1)
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
