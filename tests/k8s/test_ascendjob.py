"""`--kind ascendjob`: the Ascend Operator's AscendJob, against its CRD and the operator's sources
kept in tests/fixtures/mindcluster (the operator's controller files and the kubeflow/common files it
builds on), for the NPU image and for the CPU twin, whose pods ask for no NPU."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from tests.support.images import ROOT
from tests.support.k8s import (CLUSTER, KUBEFLOW_COMMON, POOL_910B, OPERATOR_COMMON_ENV, OPERATOR_SOURCES, go_constants,
                               go_function, kept_source, spec_for, validate_ascendjob)

from builder.errors import UserError
from builder.k8s import ascendjob
from builder.vocabulary import CPU

CLI = [str(Path(sys.executable).with_name("ascend-build"))]


def the_ascendjob(count=2, **over):
    return ascendjob.ascend_job("llama-sft", spec_for("24.1.RC3", **over), count, {"ascend-build.io/image-tag": "t"})


def the_twin(count=2, **over):
    """`k8s job --kind ascendjob --variant cpu --npus 2`: the CPU twin's AscendJob."""
    return the_ascendjob(count, variant=CPU, npus=2, **{"command": ("torchrun", "train.py"), **over})


def container_of(doc, role):
    return doc["spec"]["replicaSpecs"][role]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("count", [1, 2, 3])
def test_the_ascendjob_validates_against_the_operators_crd_and_its_pods_against_kubernetes(count):
    validate_ascendjob(the_ascendjob(count))


def test_the_ascendjob_check_refuses_what_the_api_server_would_prune():
    bad = the_ascendjob()
    bad["spec"]["replicaSpec"] = bad["spec"].pop("replicaSpecs")
    with pytest.raises(jsonschema.ValidationError):
        validate_ascendjob(bad)
    bad = the_ascendjob()
    bad["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] = "2"
    with pytest.raises(jsonschema.ValidationError):
        validate_ascendjob(bad)


def test_a_master_and_k_minus_1_workers_gang_scheduled_with_mindclusters_labels():
    doc = the_ascendjob(3)
    assert (doc["apiVersion"], doc["kind"]) == ("mindxdl.gitee.com/v1", "AscendJob")
    assert doc["metadata"]["labels"]["framework"] == "pytorch"
    assert doc["metadata"]["labels"]["ring-controller.atlas"] == "ascend-910b"
    spec = doc["spec"]
    assert spec["schedulerName"] == "volcano" and spec["runPolicy"]["schedulingPolicy"]["minAvailable"] == 3
    assert {k: v["replicas"] for k, v in spec["replicaSpecs"].items()} == {"Master": 1, "Worker": 2}
    for replica in spec["replicaSpecs"].values():
        assert replica["template"]["metadata"]["labels"]["ring-controller.atlas"] == "ascend-910b"
        container = replica["template"]["spec"]["containers"][0]
        assert container["name"] == "ascend"  # the operator injects its env into this container only
        assert container["ports"] == [{"name": "ascendjob-port", "containerPort": 2222}]
    assert set(the_ascendjob(1)["spec"]["replicaSpecs"]) == {"Master"}


def test_torchrun_is_told_the_operators_rank_and_master_in_its_arguments():
    container = the_ascendjob(2)["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["command"][1:] == ["torchrun", "--nnodes=2", "--node-rank=$(RANK)", "--master-addr=$(MASTER_ADDR)",
                                        "--master-port=$(MASTER_PORT)", "--nproc_per_node", "8", "train.py"]
    assert container["env"] == [{"name": "PET_NPROC_PER_NODE", "value": "8"}]


def test_plain_python_is_wired_only_with_one_npu_per_pod():
    container = the_ascendjob(2, npus=1, command=("python", "train.py"))["spec"]["replicaSpecs"]["Master"]
    assert container["template"]["spec"]["containers"][0]["command"][1:] == ["python", "train.py"]
    with pytest.raises(UserError) as info:
        the_ascendjob(2, command=("python", "train.py"))
    assert "the Ascend Operator sets WORLD_SIZE to the job's NPUs (16)" in info.value.message
    assert "-- torchrun --nproc_per_node 8 train.py" in info.value.fix


def test_a_310p_ascendjob_is_labelled_as_mindcluster_labels_310p():
    doc = ascendjob.ascend_job("x", spec_for("24.1.RC3", npus=1, path=CLUSTER, chip="310p"), 2, {})
    assert doc["metadata"]["labels"]["ring-controller.atlas"] == "ascend-310P"
    validate_ascendjob(doc)


@pytest.mark.parametrize("build, message", [
    (lambda: the_ascendjob(0), "--nodes-count 0"),
    (lambda: the_ascendjob(2, command=("sh", "-c", "torchrun t.py")), "cannot tell 'sh' how the 2 pods"),
])
def test_bad_input_is_a_clear_error(build, message):
    with pytest.raises(UserError) as info:
        build()
    assert message in info.value.message


# --- what the operator's source says, kept in tests/fixtures/mindcluster ---------------------------


def test_the_anti_affinity_selects_on_the_job_name_label_the_operator_puts_on_every_pod():
    # labels.go: setPodLabels copies GenLabels(job.Name) onto the pod's labels...
    set_labels = go_function(kept_source(OPERATOR_SOURCES / "labels.go"), "func (r *ASJobReconciler) setPodLabels(")
    assert "labelsMap := r.GenLabels(job.Name)" in set_labels and "podTemplate.Labels[key] = value" in set_labels
    # ...kubeflow/common's GenLabels maps JobNameLabel to the job's name...
    gen = go_function(kept_source(KUBEFLOW_COMMON / "job_controller.go"), "func (jc *JobController) GenLabels(")
    assert re.search(r"apiv1\.JobNameLabel:\s+jobName,", gen)
    # ...whose key is the one the anti-affinity selects on
    label = go_constants(kept_source(KUBEFLOW_COMMON / "constants.go"))["JobNameLabel"]
    assert ascendjob.JOB_NAME_LABEL == label == "training.kubeflow.org/job-name"
    for doc in (the_ascendjob(3), the_twin(3)):
        for replica in doc["spec"]["replicaSpecs"].values():
            anti = replica["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert anti == [{"labelSelector": {"matchExpressions": [
                {"key": label, "operator": "In", "values": ["llama-sft"]}]}, "topologyKey": "kubernetes.io/hostname"}]


def test_the_masters_service_is_named_as_the_operator_names_it():
    gen_service = go_function(kept_source(OPERATOR_SOURCES / "service.go"), "func (r *ASJobReconciler) genService(")
    assert 'Name:   common.GenGeneralName(job.GetName(), strings.ToLower(string(rtype)), "0"),' in gen_service
    general = go_function(kept_source(KUBEFLOW_COMMON / "util.go"), "func GenGeneralName(")
    assert 'n := jobName + "-" + strings.ToLower(rtype) + "-" + index' in general
    assert ascendjob.master_service("llama-sft") == "llama-sft-" + ascendjob.MASTER.lower() + "-0"


def test_a_pod_asking_no_npu_gets_the_common_env_only_so_the_twin_reads_no_operator_rank():
    """pod.go's setEnv returns after setCommonEnv when the pods ask for no NPU; the twin's commands
    then refer to no variable but their own, while the NPU image's read what setPytorchEnv appends."""
    set_env = go_function(kept_source(OPERATOR_SOURCES / "pod.go"), "func (r *ASJobReconciler) setEnv(")
    common, early, pytorch = (set_env.index("r.setCommonEnv(pi, podTemplate)"),
                              set_env.index("if pi.ctReq == 0 {\n\t\treturn nil\n\t}"),
                              set_env.index("r.setPytorchEnv(pi, podTemplate)"))
    assert common < early < pytorch
    env_go = kept_source(OPERATOR_SOURCES / "env.go")
    constants = {**go_constants(kept_source(OPERATOR_SOURCES / "consts.go")), **go_constants(env_go)}
    set_common = go_function(env_go, "func (r *ASJobReconciler) setCommonEnv(")
    appended = [constants[name] for name in re.findall(r"addEnvValue\(podTemplate, (\w+),", set_common)]
    assert tuple(appended) == OPERATOR_COMMON_ENV  # what the rendezvous test gives the twin's pods
    set_pytorch = go_function(env_go, "func (r *ASJobReconciler) setPytorchEnv(")
    given_npu = {constants[name] for name in re.findall(r"addEnvValue\(podTemplate, (\w+),", set_pytorch)
                 if name in constants}
    assert {"MASTER_ADDR", "MASTER_PORT", "RANK"} <= given_npu
    for doc, allowed in ((the_twin(3), set()), (the_ascendjob(3), given_npu)):
        for role in ("Master", "Worker"):
            container = container_of(doc, role)
            referred = set(re.findall(r"\$\((\w+)\)", " ".join(container["command"])))
            assert referred <= {e["name"] for e in container["env"]} | allowed, (role, referred)
    assert "$(RANK)" not in " ".join(container_of(the_twin(3), "Worker")["command"])


# --- the CPU twin: torchrun's c10d rendezvous at the Master's Service ------------------------------


@pytest.mark.parametrize("count", [1, 2, 3])
def test_the_twins_ascendjob_validates_and_asks_for_no_npu(count):
    doc = the_twin(count)
    validate_ascendjob(doc)
    for replica in doc["spec"]["replicaSpecs"].values():
        assert "resources" not in replica["template"]["spec"]["containers"][0]
        assert "ring-controller.atlas" not in replica["template"]["metadata"]["labels"]


def test_the_twins_torchrun_meets_at_the_masters_service_with_the_master_hosting_the_store():
    doc = the_twin(3)
    common = ["torchrun", "--nnodes=3", "--rdzv-backend=c10d", "--rdzv-endpoint=llama-sft-master-0:2222",
              "--rdzv-id=llama-sft"]
    master, worker = container_of(doc, "Master"), container_of(doc, "Worker")
    assert master["command"][1:] == [*common, "--rdzv-conf=is_host=1,read_timeout=600", "--local-addr=$(POD_IP)",
                                     "train.py"]
    assert worker["command"][1:] == [*common, "--rdzv-conf=is_host=0,read_timeout=600", "--local-addr=$(POD_IP)",
                                     "train.py"]
    for container in (master, worker):
        assert container["env"] == [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                                    {"name": "PET_NPROC_PER_NODE", "value": "2"}]
        assert container["ports"] == [{"name": "ascendjob-port", "containerPort": 2222}]  # the Service's port
    assert ascendjob.header("llama-sft", spec_for("24.1.RC3", variant=CPU))[0].endswith(
        "torchrun meets at the Master's Service llama-sft-master-0:2222 (c10d rendezvous)")


def test_plain_python_over_several_pods_of_the_twin_is_refused_and_one_pod_is_rank_0_of_1():
    with pytest.raises(UserError) as info:
        the_twin(2, command=("python", "train.py"))
    assert "the Ascend Operator gives its pods no RANK, WORLD_SIZE or MASTER_ADDR" in info.value.message
    assert "-- torchrun --nproc_per_node 2 train.py" in info.value.fix and "--kind volcano" in info.value.fix
    one = container_of(the_twin(1, command=("python", "train.py")), "Master")
    assert one["command"][1:] == ["python", "train.py"]
    assert {e["name"]: e["value"] for e in one["env"]} == {
        "MASTER_ADDR": "localhost", "MASTER_PORT": "2222", "WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1"}


@pytest.mark.parametrize("flag", ["--rdzv-conf=timeout=9", "--rdzv_conf=x=1", "--local-addr=10.0.0.1", "--local_addr=h"])
def test_a_twin_command_giving_what_its_rendezvous_gives_is_refused_on_several_pods(flag):
    with pytest.raises(UserError) as info:
        the_twin(2, command=("torchrun", flag, "train.py"))
    assert f"the command sets {flag.split('=')[0]} itself" in info.value.message
    assert container_of(the_ascendjob(2, command=("torchrun", flag, "train.py")), "Master")  # the NPU image's is static


# --- through the command line: a registry on loopback holding the twin (no engine) -----------------


@pytest.fixture(scope="module")
def twin_registry(tmp_path_factory):
    """A registry holding the CPU twin of the 8.0.RC3 cell, as the pipeline labels it: its REGISTRY/REPO."""
    from builder.registry import Registry
    from tests.support import mirror as hm
    from tests.support.images import cell_8_0_rc3, pipeline_labels

    if not Path(hm.REGISTRY_BIN).exists():
        pytest.skip("docker-registry missing")
    served = hm.serve(tmp_path_factory.mktemp("ascendjob") / "registry")
    cell = cell_8_0_rc3()
    hm.push_image(Registry(served.host), "team/pytorch", f"{cell.id}-cpu", pipeline_labels(cell, variant=CPU), b"twin")
    yield f"{served.host}/team/pytorch"
    served.stop()


def k8s_job(registry, *args):
    return subprocess.run(CLI + ["k8s", "job", "--registry", registry, "--cann", "8.0.RC3", "--variant", "cpu",
                                 "--nodes", str(POOL_910B), "--name", "llama", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_k8s_job_prints_the_twins_ascendjob_saying_where_its_pods_meet(twin_registry):
    done = k8s_job(twin_registry, "--kind", "ascendjob", "--nodes-count", "2", "--npus", "2", "--", "torchrun", "t.py")
    assert done.returncode == 0, done.stderr
    doc = yaml.safe_load(done.stdout)
    validate_ascendjob(doc)
    assert "--rdzv-endpoint=llama-master-0:2222" in container_of(doc, "Worker")["command"]
    assert ("# the CPU twin asks for no NPU, so the Ascend Operator gives its pods no RANK or MASTER_ADDR: torchrun "
            "meets at the Master's Service llama-master-0:2222 (c10d rendezvous)") in done.stdout


def test_k8s_job_refuses_the_twins_plain_python_over_two_pods_before_asking_the_registry():
    done = k8s_job("127.0.0.1:9/nowhere", "--kind", "ascendjob", "--nodes-count", "2", "--", "python", "t.py")
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert "the Ascend Operator gives its pods no RANK, WORLD_SIZE or MASTER_ADDR" in done.stderr
    assert "fix: start it with torchrun (-- torchrun --nproc_per_node 1 train.py" in done.stderr
