"""Each job kind's pods, instantiated as its controller instantiates them, train as one job on the
CPU twin: a plain Job's one pod (torchrun, a world of 2), a Volcano Job's and an AscendJob's 2 and
3 pods (torchrun, 2 processes each), plain python over a Volcano Job's 3 pods; and the NPU image's
AscendJob over 2 pods, its pods given what the operator gives pods that ask for NPUs.

The pods run from the twin the pipeline builds (torch 2.13.0, gloo), each as its own container
with its own address on a Docker network, by the stand-in kubelet of `tests.support.kubelet`:
env and command expanded as the kubelet expands them, the hosts file it writes, and only the
names the cluster's DNS would answer. Each kind's manifest is what `k8s job --variant cpu`
prints, its image replaced by the locally built twin; the test adds to each pod exactly what the
kind's controller adds, by its source:

- **Volcano** (volcano-sh/volcano, `builder.k8s.volcano`): the name ``JOB-TASK-INDEX``
  (``helpers.go`` ``MakePodName``), the label ``volcano.sh/job-name``
  (``job_controller_util.go`` ``createJobPod``), and the annotation and label
  ``volcano.sh/task-index`` only as Volcano 1.9.0 and newer add them: the 3-pod runs play
  Volcano 1.7.0 (the one MindCluster 26.1's installation guide deploys), which adds neither; ``hostname`` = the pod's name and
  ``subdomain`` = the job's, whose headless Service makes ``HOSTNAME.JOB`` resolve to the pod
  (``svc.go`` ``OnPodCreate``); ``VK_TASK_INDEX``/``VC_TASK_INDEX`` appended to the env
  (``env.go`` ``OnPodCreate``) and ``VC_WORKER_HOSTS``/``VC_WORKER_NUM`` (``svc.go``, from its
  ConfigMap: literal values here). The queue, group and version annotations, which nothing here
  reads, are left out.
- **AscendJob** (Ascend/mind-cluster at 22bb3d98, ``component/ascend-operator/pkg/controllers/v1/``;
  kubeflow/common v0.4.3 ``pkg/``), for pods that ask for **no NPU**, the CPU twin's:
  the Master's ClusterIP Service ``JOB-master-0`` on ``ascendjob-port``, made before any pod
  (``pod.go:98`` ``getMngSvcIpAndPort``, ``jobinfo.go:157-188``, ``service.go:40-63``); the names
  ``JOB-master-0`` and ``JOB-worker-INDEX`` (``pod.go:733``, ``controller.v1/common/util.go:50-53``);
  the labels of ``labels.go:22-45`` (``GenLabels``: ``controller.v1/common/job_controller.go:209-217``;
  replica type and index: ``util/labels/labels.go:41-60``; ``training.kubeflow.org/job-role:
  master`` on the Master; ``version: 0``); the annotation ``hccl/rankIndex`` = the replica index
  (``annotation.go:37-40``: the job's ``nonWorkerPodMountChipStatus`` is "false" when the Master
  asks for no NPU, ``job.go:249-254``) and the gang annotations (``pod.go:807-811``); and
  appended to the ``ascend`` container's env only ``setCommonEnv``'s (``env.go:168-186``:
  ``MINDX_TASK_ID``, ``MINDX_SERVER_IP``, ``MINDX_SERVER_DOMAIN``, ``HostNetwork``,
  ``REPLICA_TYPE``; no ``ASCEND_VISIBLE_DEVICES`` or ``HCCL_LOGIC_SUPERPOD_ID`` without a
  ``huawei.com/`` request), since ``setEnv`` returns before ``setPytorchEnv`` when the pods ask
  for no NPU (``pod.go:772``). ``MINDX_SERVER_IP`` is ClusterD's service address, its domain here
  (``service.go:130-137``: what the operator falls back to when ClusterD is not installed).
  For pods that ask for NPUs, besides: ``hccl/rankIndex`` and ``RANK`` = the Workers' index + 1
  (``annotation.go:43-50``, ``pod.go:723-731``), ``ASCEND_VISIBLE_DEVICES`` from the pod's
  device annotation (``env.go:188-202``: empty here, no device plugin), ``HCCL_LOGIC_SUPERPOD_ID``
  0 (no sp-block annotation: ``utils/superpod.go:52-57``), and ``setPytorchEnv``'s
  ``LOCAL_WORLD_SIZE``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` (the Service's ClusterIP),
  ``MASTER_PORT`` and ``RANK`` (``env.go:259-266``). That run's driver hostPaths are left out
  (no driver here) and its NPU requests are not allocated (no device plugin).
- **the plain Job**: nothing; its one pod's name is the Job's.

Every run starts rank 0's pod (Volcano's pod 0, the AscendJob's Master) last, so the others wait
for it as on a cluster where its node pulls the image last. The script does one ``all_reduce`` of
``rank + 1`` over gloo and gathers every rank's world size; every rank must see the sum
n(n+1)/2 and one world size, and each pod one node rank of its own: Volcano's ``VC_TASK_INDEX``;
the twin's AscendJob's, torchrun's c10d rendezvous's choice; the NPU image's, the operator's ``RANK``.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence

import pytest

from builder.k8s import ascendjob, job, volcano
from builder.k8s.pod import MASTER_PORT, PodSpec
from builder.vocabulary import CPU, NPU
from tests.support.k8s import OPERATOR_COMMON_ENV
from tests.support.kubelet import Cluster
from tests.support.pipeline import CELL_ID, CLI, _torch_wheel, drop_images, image_args, run_cli, write_matrix

REPO = f"ascend-build-test/jobs-rdzv-{uuid.uuid4().hex[:8]}"
SCRIPT = '''
import json, os, socket, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
worlds = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
dist.all_gather(worlds, torch.tensor([world], dtype=torch.int64))
node_rank = os.environ.get("GROUP_RANK", os.environ["RANK"])  # torchrun: GROUP_RANK; plain python: RANK
# one write of the whole line: the local ranks of a pod share its stdout, and two print()s may interleave
os.write(1, ("RESULT " + json.dumps({"rank": rank, "world": world, "sum": total.item(), "worlds": [int(w) for w in worlds],
                                     "node_rank": int(node_rank), "pod": socket.gethostname(),
                                     "vc_task_index": os.environ.get("VC_TASK_INDEX")}) + "\\n").encode())
dist.destroy_process_group()
'''
DEADLINE = 240  # seconds for every pod of a run to end: a run takes under 60 s on 2 busy cores
OPERATOR_NAME = "ascendjob-controller"  # ascend-common/api/default_name.go: ControllerName
GROUP_NAME = "mindxdl.gitee.com"  # ascendjob_controller.go: GetGroupNameLabelValue, the API group
CLUSTERD_DOMAIN = "clusterd-grpc-svc.mindx-dl.svc.cluster.local"  # consts.go: mindxDefaultServerDomain


@pytest.fixture(scope="module")
def twin(engine, base_image, tmp_path_factory) -> Iterator[str]:
    """The shipped Debian 12 cell's CPU twin (torch 2.13.0, gloo), built and sealed by `image`: its image ID."""
    if _torch_wheel() is None or not CLI.exists():
        pytest.skip("needs the torch 2.13.0 cp311 wheel in /opt/wheels and the ascend-build script")
    work = tmp_path_factory.mktemp("rdzv-twin")
    matrix_file = write_matrix(work, REPO)
    built = run_cli(image_args(matrix_file, work / "state", base_image, "--variant", "cpu"), cwd=work)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    image = engine.image_id(f"{REPO}:{CELL_ID}-cpu")
    assert image
    yield image
    drop_images(engine, REPO)


def twin_spec(command: Sequence[str], processes: int) -> PodSpec:
    """What `k8s job --variant cpu --npus PROCESSES -- COMMAND` renders from (its image replaced below)."""
    return PodSpec(image="registry.example/team/pytorch@sha256:" + "0" * 64, chip="910b", arch="x86_64",
                   npus=processes, command=tuple(command), min_driver="25.2.RC1", chip_values=(), drivers=(),
                   variant=CPU)


def on_this_node(template: Dict[str, Any], image: str, work: Path) -> Dict[str, Any]:
    """The pod template with the stand-ins: the twin built here for the digest, the check script
    mounted, no driver file (this node has no NPU driver: the NPU image's hostPaths are left out)."""
    template = copy.deepcopy(template)
    pod = template["spec"]
    container, = pod["containers"]
    container["image"] = image
    drivers = {v["name"] for v in pod["volumes"] if "hostPath" in v}
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] not in drivers]
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] not in drivers]
    pod["volumes"].append({"name": "check", "hostPath": {"path": str(work), "type": "Directory"}})
    container["volumeMounts"].append({"name": "check", "mountPath": "/check", "readOnly": True})
    return template


def job_pods(name: str, manifest: Dict[str, Any], image: str, work: Path) -> List[Dict[str, Any]]:
    """The one Pod of a batch/v1 Job (its name stands in for the Job controller's ``NAME-RANDOM``)."""
    template = on_this_node(manifest["spec"]["template"], image, work)
    return [{"metadata": {"name": name, "labels": template["metadata"]["labels"]}, "spec": template["spec"]}]


def volcano_pods(name: str, manifest: Dict[str, Any], image: str, work: Path, version: str) -> List[Dict[str, Any]]:
    """The Pods Volcano ``version`` ("1.7.0" or "1.9.0": the task-index annotation or not) makes of the Job."""
    task = manifest["spec"]["tasks"][0]
    names = [f"{name}-{task['name']}-{i}" for i in range(task["replicas"])]  # helpers.MakePodName
    pods = []
    for index, pod_name in enumerate(names):
        template = on_this_node(task["template"], image, work)
        labels = {**template["metadata"]["labels"], volcano.JOB_NAME_LABEL: name}
        annotations = {"volcano.sh/job-name": name, "volcano.sh/task-spec": task["name"]}
        if version != "1.7.0":
            labels["volcano.sh/task-index"] = annotations["volcano.sh/task-index"] = str(index)
        pod = template["spec"]
        pod["hostname"], pod["subdomain"] = pod_name, name  # the svc plugin
        pod["containers"][0]["env"] += [  # the env plugin, then the svc plugin's hosts
            {"name": "VK_TASK_INDEX", "value": str(index)}, {"name": "VC_TASK_INDEX", "value": str(index)},
            {"name": "VC_WORKER_HOSTS", "value": ",".join(f"{n}.{name}" for n in names)},
            {"name": "VC_WORKER_NUM", "value": str(len(names))}]
        pods.append({"metadata": {"name": pod_name, "labels": labels, "annotations": annotations}, "spec": pod})
    return pods


def ascendjob_pods(name: str, manifest: Dict[str, Any], image: str, work: Path,
                   service_ip: str) -> List[Dict[str, Any]]:
    """The Pods the Ascend Operator makes of an AscendJob (see the module), whose pods ask for NPUs
    or not (the CPU twin), and the ClusterIP it gives the Master's Service (``service_ip``)."""
    uid = str(uuid.uuid4())
    replicas = manifest["spec"]["replicaSpecs"]
    requests = replicas[ascendjob.MASTER]["template"]["spec"]["containers"][0].get("resources", {}).get("requests", {})
    npu = next((k for k in requests if k.startswith("huawei.com/")), None)  # utils.go:97-104
    chips = int(requests[npu]) if npu else 0  # ctReq; the Master asks as the Workers do: Workers' rank is index + 1
    pods_total = sum(r["replicas"] for r in replicas.values())
    pods = []
    for role, replica in replicas.items():
        for index in range(replica["replicas"]):
            template = on_this_node(replica["template"], image, work)
            container, = template["spec"]["containers"]
            rank = index + 1 if npu and role == ascendjob.WORKER else index  # pod.go:723-731, annotation.go:37-50
            labels = {**template["metadata"]["labels"], "version": "0",
                      "training.kubeflow.org/operator-name": OPERATOR_NAME, "group-name": GROUP_NAME,
                      ascendjob.JOB_NAME_LABEL: name, "job-name": name,
                      "training.kubeflow.org/replica-type": role.lower(), "replica-type": role.lower(),
                      "training.kubeflow.org/replica-index": str(index), "replica-index": str(index)}
            if role == ascendjob.MASTER:
                labels["training.kubeflow.org/job-role"] = "master"
            annotations = {"hccl/rankIndex": str(rank), "scheduling.k8s.io/group-name": f"{name}-{uid}",
                           "volcano.sh/task-spec": role.lower()}
            common = dict(zip(OPERATOR_COMMON_ENV, (uid, CLUSTERD_DOMAIN, CLUSTERD_DOMAIN, "false", role)))
            env = [{"name": k, "value": v} for k, v in common.items()]
            if npu:  # setAscendVisibleDevicesEnv first; HCCL_LOGIC_SUPERPOD_ID 0 without an sp-block annotation
                env.insert(0, {"name": "ASCEND_VISIBLE_DEVICES",
                               "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{npu}']"}}})
                env.insert(-1, {"name": "HCCL_LOGIC_SUPERPOD_ID", "value": "0"})
                env += [{"name": "LOCAL_WORLD_SIZE", "value": str(chips)},  # setPytorchEnv
                        {"name": "WORLD_SIZE", "value": str(chips * pods_total)},
                        {"name": "LOCAL_RANK", "value": ",".join(str(i) for i in range(chips))},
                        {"name": "MASTER_ADDR", "value": service_ip}, {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
                        {"name": "RANK", "value": str(rank)}]
            container["env"] += env
            pods.append({"metadata": {"name": f"{name}-{role.lower()}-{index}", "labels": labels,
                                      "annotations": annotations}, "spec": template["spec"]})
    return pods


def results_in(text: str) -> List[Dict[str, Any]]:
    """Every RESULT object in a pod's log, also where two ranks' lines ran into one."""
    decoder = json.JSONDecoder()
    return [decoder.raw_decode(part)[0] for part in text.split("RESULT ")[1:] if part.startswith("{")]


def play(cluster: Cluster, pods: List[Dict[str, Any]], first: Dict[str, Any], records=None,
         services=()) -> List[Dict[str, Any]]:
    """Start the Services, then every pod with ``first``'s last; wait for each (exit 0) and return their RESULTs."""
    addresses = {pod["metadata"]["name"]: cluster.address() for pod in pods}
    for name, port, pod_name, ip in services:
        cluster.service(name, port, addresses[pod_name], ip)
    for pod_name, names in (records or {}).items():
        for record in names:
            cluster.records[record] = addresses[pod_name]
    for pod in sorted(pods, key=lambda p: p is first):
        cluster.start(pod, addresses[pod["metadata"]["name"]])
    deadline = time.monotonic() + DEADLINE
    ended = [(pod["metadata"]["name"], *cluster.wait(pod["metadata"]["name"], deadline - time.monotonic()))
             for pod in pods]
    for name, code, _, _ in ended:
        assert code == 0, "\n".join([f"{name} {'ran past the deadline' if code is None else f'exited {code}'}"] +
                                    [f"--- {n} (exit {c}):\n{o[-2000:]}\n{e[-2000:]}" for n, c, o, e in ended])
    return [result for _, _, out, _ in ended for result in results_in(out)]


def check(results: List[Dict[str, Any]], pods: int, nproc: int) -> None:
    world = pods * nproc
    assert sorted(r["rank"] for r in results) == list(range(world)), results  # one job: every rank once
    for r in results:
        assert r["world"] == world and r["worlds"] == [world] * world, r
        assert r["sum"] == world * (world + 1) / 2, r
    node_ranks = {r["pod"]: r["node_rank"] for r in results}
    assert sorted(node_ranks.values()) == list(range(pods)), results  # a node rank of its own per pod
    assert all(node_ranks[r["pod"]] == r["node_rank"] for r in results), results  # one per pod


@pytest.mark.engine
def test_the_plain_jobs_pod_is_one_world_of_its_processes(engine, twin, tmp_path):
    (tmp_path / "check.py").write_text(SCRIPT)
    name = f"job-{uuid.uuid4().hex[:6]}"
    pods = job_pods(name, job.job(name, twin_spec(["torchrun", "/check/check.py"], 2), {}), twin, tmp_path)
    with Cluster(engine.client, twin) as cluster:
        results = play(cluster, pods, pods[0])
    check(results, 1, nproc=2)


@pytest.mark.engine
@pytest.mark.parametrize("nodes, version", [(2, "1.9.0"), (3, "1.7.0")])
def test_torchrun_pods_of_a_volcano_job_train_as_one(engine, twin, tmp_path, nodes, version):
    (tmp_path / "check.py").write_text(SCRIPT)
    name = f"vc{nodes}-{uuid.uuid4().hex[:6]}"
    manifest = volcano.volcano_job(name, twin_spec(["torchrun", "/check/check.py"], 2), nodes, {})
    pods = volcano_pods(name, manifest, twin, tmp_path, version)
    with Cluster(engine.client, twin) as cluster:
        results = play(cluster, pods, pods[0], records={p["metadata"]["name"]: [
            f"{p['metadata']['name']}.{name}", f"{p['metadata']['name']}.{name}.default.svc.cluster.local"]
            for p in pods})
    check(results, nodes, nproc=2)
    assert all(r["node_rank"] == int(r["vc_task_index"]) for r in results)  # the index Volcano gave the pod


@pytest.mark.engine
def test_plain_python_pods_of_a_volcano_1_7_job_are_one_process_each(engine, twin, tmp_path):
    (tmp_path / "check.py").write_text(SCRIPT)
    name = f"vcpy-{uuid.uuid4().hex[:6]}"
    manifest = volcano.volcano_job(name, twin_spec(["python", "/check/check.py"], 1), 3, {})
    pods = volcano_pods(name, manifest, twin, tmp_path, "1.7.0")
    with Cluster(engine.client, twin) as cluster:
        results = play(cluster, pods, pods[0], records={p["metadata"]["name"]: [f"{p['metadata']['name']}.{name}"]
                                                         for p in pods})
    check(results, 3, nproc=1)
    assert all(r["node_rank"] == int(r["vc_task_index"]) for r in results)


def play_ascendjob(engine, twin, work: Path, name: str, manifest: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The AscendJob's pods and its Master's Service, the Master started last."""
    service = ascendjob.master_service(name)
    with Cluster(engine.client, twin) as cluster:
        service_ip = cluster.address()
        pods = ascendjob_pods(name, manifest, twin, work, service_ip)
        master = next(p for p in pods if p["metadata"]["name"] == service)  # the Master pod's name is its Service's
        return play(cluster, pods, master, services=[(service, MASTER_PORT, service, service_ip)])


@pytest.mark.engine
@pytest.mark.parametrize("nodes", [2, 3])
def test_torchrun_pods_of_an_ascendjob_on_the_cpu_twin_train_as_one(engine, twin, tmp_path, nodes):
    (tmp_path / "check.py").write_text(SCRIPT)
    name = f"aj{nodes}-{uuid.uuid4().hex[:6]}"
    manifest = ascendjob.ascend_job(name, twin_spec(["torchrun", "/check/check.py"], 2), nodes, {})
    check(play_ascendjob(engine, twin, tmp_path, name, manifest), nodes, nproc=2)


@pytest.mark.engine
def test_torchrun_pods_of_an_ascendjob_asking_for_npus_train_as_one_fake_npu(engine, twin, tmp_path):
    """The NPU image's AscendJob (2 NPUs a pod), its pods given what the operator gives pods that
    ask for NPUs; the twin stands in for the NPU image, and no device plugin allocates the NPUs."""
    (tmp_path / "check.py").write_text(SCRIPT)
    name = f"ajnpu-{uuid.uuid4().hex[:6]}"
    spec = replace(twin_spec(["torchrun", "/check/check.py"], 2), variant=NPU, chip_values=("910B3",),
                   drivers=("25.2.rc1",))
    manifest = ascendjob.ascend_job(name, spec, 2, {})
    results = play_ascendjob(engine, twin, tmp_path, name, manifest)
    check(results, 2, nproc=2)
    ranks = {r["pod"]: r["node_rank"] for r in results}
    assert ranks == {f"{name}-master-0": 0, f"{name}-worker-0": 1}  # the operator's RANK: Master 0, Workers index + 1
