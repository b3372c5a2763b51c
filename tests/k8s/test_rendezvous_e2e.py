"""The multi-node rendezvous for real: a Volcano Job's pods, instantiated for 2 and 3 ranks as
Volcano instantiates them, played by ``podman kube play`` with the CPU twin, train as one job.

What Volcano adds to each pod (volcano-sh/volcano at ed72c7c8, see `builder.k8s.volcano`):
the name ``JOB-TASK-INDEX`` (``MakePodName``), the annotation and label ``volcano.sh/task-index``
(``createJobPod``), ``hostname`` = the pod's name and ``subdomain`` = the job's (``svc`` plugin),
``VK_TASK_INDEX``/``VC_TASK_INDEX`` appended to the container's env (``env`` plugin) and
``VC_WORKER_HOSTS``/``VC_WORKER_NUM`` (``svc`` plugin, from its ConfigMap; literal values here).
The test adds exactly these to the rendered template, nothing else of the job's.

What stands in for the cluster, and why:

- **the network**: every pod runs with ``hostNetwork: true`` on this host's loopback, and a
  hosts file mounted at ``/etc/hosts`` maps each pod's host name, short and ``NAME.JOB`` (what
  the headless service's DNS and the kubelet's hosts file give a pod) to 127.0.0.1. podman 4.3
  ignores ``hostAliases`` on the host network, and pods on its bridge cannot know pod 0's
  address before it starts; one pod with N containers would share one set of annotations, so
  the node rank (read from the pod's ``volcano.sh/task-index``) could not differ.
- **the port**: ``PET_MASTER_PORT``/``MASTER_PORT`` (2222 in the manifest) is a free port of
  this host, since the host's network is shared with whatever else runs here; the container's
  ``ports`` entry (informational) is dropped, since podman refuses port mappings on the host network.
- **the node**: no NPU and no driver here, so the driver hostPaths are left out (the guard then
  runs the command with its one-line note, as tests/node/test_driver_guard_e2e.py shows), and
  the check script comes from a hostPath.

The script does one ``all_reduce`` of ``rank + 1`` over gloo and gathers every rank's world size;
each rank prints what it saw. Every rank must see the sum n(n+1)/2, the same world size n x
nproc, and a node rank equal to the ``VC_TASK_INDEX`` Volcano gave its pod.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any, Dict, List, Sequence

import pytest
import yaml

from tests.support.loopback_registry import free_port
from tests.support.podman import own_podman
from tests.support.pipeline import _torch_wheel, image_args, run_cli, write_matrix, CELL_ID, CLI, drop_images

REPO = f"ascend-build-test/jobs-rdzv-{uuid.uuid4().hex[:8]}"
MINIMUM = "25.2.RC1"  # the twin's NPU image's minimum driver (CANN 9.1.0)
SCRIPT = '''
import json, os, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
worlds = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
dist.all_gather(worlds, torch.tensor([world], dtype=torch.int64))
node_rank = os.environ.get("GROUP_RANK", os.environ["RANK"])  # torchrun: GROUP_RANK; plain python: RANK
# one write of the whole line: the local ranks of a pod share its stdout, and two print()s may interleave
os.write(1, ("RESULT " + json.dumps({"rank": rank, "world": world, "sum": total.item(), "worlds": [int(w) for w in worlds],
                                     "node_rank": int(node_rank), "vc_task_index": int(os.environ["VC_TASK_INDEX"])})
             + "\\n").encode())
dist.destroy_process_group()
'''


@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    """podman with storage of its own (nothing shared with other tests), reset at the module's end."""
    with own_podman(tmp_path_factory.mktemp("podman")) as run:
        yield run


@pytest.fixture(scope="module")
def twin_in_podman(engine, base_image, registry, podman, tmp_path_factory) -> str:
    """The shipped Debian 12 cell's CPU twin (torch 2.13.0, gloo), built and sealed by `image`,
    pushed to the loopback registry and pulled by digest into podman's storage."""
    if _torch_wheel() is None or not CLI.exists():
        pytest.skip("needs the torch 2.13.0 cp311 wheel in /opt/wheels and the ascend-build script")
    work = tmp_path_factory.mktemp("rdzv-twin")
    matrix_file = write_matrix(work, REPO)
    built = run_cli(image_args(matrix_file, work / "state", base_image, "--variant", "cpu"), cwd=work)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    ref = f"{registry.host}/{REPO}:rdzv"
    try:
        engine.tag(engine.image_id(f"{REPO}:{CELL_ID}-cpu"), ref)
        digest = engine.push(ref, username=registry.username, password=registry.password)
    finally:
        engine.untag(ref)
        drop_images(engine, REPO)
    image = f"{registry.host}/{REPO}@{digest}"
    pulled = podman("pull", "--tls-verify=false", "--creds", f"{registry.username}:{registry.password}", image,
                    timeout=600)
    assert pulled.returncode == 0, pulled.stderr
    return image


def volcano_pods(name: str, image: str, command: Sequence[str], nodes: int, port: int, work: Path) -> List[Dict[str, Any]]:
    """The Pods Volcano would create from `k8s job --kind volcano`'s Job, with the stand-ins above."""
    from builder.k8s.pod import PodSpec
    from builder.k8s.volcano import JOB_NAME_LABEL, volcano_job

    spec = PodSpec(image=image, chip="910b", arch="x86_64", npus=2, command=tuple(command), min_driver=MINIMUM,
                   chip_values=("910B3",), drivers=())
    task = volcano_job(name, spec, nodes, {})["spec"]["tasks"][0]
    names = [f"{name}-{task['name']}-{i}" for i in range(nodes)]  # helpers.MakePodName
    hosts = work / "hosts"
    hosts.write_text("127.0.0.1 localhost " + " ".join(f"{n} {n}.{name}" for n in names) + "\n")
    (work / "check.py").write_text(SCRIPT)
    pods = []
    for index, pod_name in enumerate(names):
        template = copy.deepcopy(task["template"])
        pod = template["spec"]
        # Volcano's job controller, svc and env plugins
        labels = {**template["metadata"]["labels"], JOB_NAME_LABEL: name, "volcano.sh/task-index": str(index)}
        metadata = {"name": pod_name, "labels": labels,
                    "annotations": {"volcano.sh/task-index": str(index), "volcano.sh/job-name": name}}
        pod["hostname"], pod["subdomain"] = pod_name, name
        container = pod["containers"][0]
        container["env"] += [{"name": "VK_TASK_INDEX", "value": str(index)}, {"name": "VC_TASK_INDEX", "value": str(index)},
                             {"name": "VC_WORKER_HOSTS", "value": ",".join(f"{n}.{name}" for n in names)},
                             {"name": "VC_WORKER_NUM", "value": str(nodes)}]
        # the stand-ins: the host's loopback for the cluster network, a free port, no driver files
        pod["hostNetwork"] = True
        container.pop("ports")  # informational on the host network; podman refuses them there
        for variable in container["env"]:
            if variable["name"] in ("PET_MASTER_PORT", "MASTER_PORT"):
                variable["value"] = str(port)
        kept = {v["name"] for v in pod["volumes"] if "hostPath" not in v}
        pod["volumes"] = [v for v in pod["volumes"] if v["name"] in kept]
        container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] in kept]
        pod["volumes"] += [{"name": "hosts", "hostPath": {"path": str(hosts), "type": "File"}},
                           {"name": "check", "hostPath": {"path": str(work), "type": "Directory"}}]
        container["volumeMounts"] += [{"name": "hosts", "mountPath": "/etc/hosts", "readOnly": True},
                                      {"name": "check", "mountPath": "/check", "readOnly": True}]
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod})
    return pods


def results_in(text: str) -> List[Dict[str, Any]]:
    """Every RESULT object in a pod's log, also where two ranks' lines ran into one."""
    decoder = json.JSONDecoder()
    return [decoder.raw_decode(part)[0] for part in text.split("RESULT ")[1:] if part.startswith("{")]


def play(podman, pods: List[Dict[str, Any]], manifest: Path) -> List[Dict[str, Any]]:
    """Play the pods, wait for each, and return each one's RESULT line (asserting every pod exited 0)."""
    manifest.write_text(yaml.safe_dump_all(pods, sort_keys=False))
    try:
        played = podman("kube", "play", str(manifest), timeout=300)
        assert played.returncode == 0, played.stdout + played.stderr
        results = []
        for pod in pods:
            container = f"{pod['metadata']['name']}-main"
            waited = podman("wait", container, timeout=300)
            logs = podman("logs", container)
            assert waited.stdout.strip() == "0", f"{container} exited {waited.stdout.strip()}:\n{logs.stdout}\n{logs.stderr}"
            results += results_in(logs.stdout)
        return results
    finally:
        podman("kube", "down", str(manifest), timeout=120)


def check(results: List[Dict[str, Any]], nodes: int, nproc: int) -> None:
    world = nodes * nproc
    assert sorted(r["rank"] for r in results) == list(range(world)), results  # one job: every rank once
    for r in results:
        assert r["world"] == world and r["worlds"] == [world] * world, r
        assert r["sum"] == world * (world + 1) / 2, r
        assert r["node_rank"] == r["vc_task_index"], r  # the node rank is the task index Volcano gave the pod
    assert sorted({r["node_rank"] for r in results}) == list(range(nodes))


@pytest.mark.engine
@pytest.mark.parametrize("nodes", [2, 3])
def test_torchrun_pods_of_a_volcano_job_train_as_one(twin_in_podman, podman, tmp_path, nodes):
    name = f"rdzv{nodes}-{uuid.uuid4().hex[:6]}"
    command = ["torchrun", "--nproc_per_node", "2", "/check/check.py"]
    results = play(podman, volcano_pods(name, twin_in_podman, command, nodes, free_port(), tmp_path),
                   tmp_path / "pods.yaml")
    check(results, nodes, nproc=2)


@pytest.mark.engine
def test_plain_python_pods_of_a_volcano_job_are_one_process_each(twin_in_podman, podman, tmp_path):
    name = f"rdzvpy-{uuid.uuid4().hex[:6]}"
    results = play(podman, volcano_pods(name, twin_in_podman, ["python", "/check/check.py"], 3, free_port(), tmp_path),
                   tmp_path / "pods.yaml")
    check(results, 3, nproc=1)
