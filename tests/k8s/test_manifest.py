"""The manifests themselves: Kubernetes' and Volcano's schemas, the affinity against fixture nodes, mounts, env."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict

import kubernetes_validate
import pytest
import yaml
from tests.support.k8s import CLUSTER, POOL_910B, admitted, nodes, validate_k8s, validate_volcano

from builder import devices
from builder.errors import UserError
from builder.k8s import job, pod, pool, manifest_yaml, volcano
from builder.node.labels import CHIP_LABELS, DRIVER_ORDINAL_LABEL, DRIVER_VERSION_LABELS
from builder.versions import driver_ordinal

DIGEST = "sha256:" + "ab" * 32
IMAGE = f"127.0.0.1:5000/ascend-build/pytorch@{DIGEST}"


def spec_for(min_driver: str, npus: int = 8, path=POOL_910B, chip=None, **over) -> pod.PodSpec:
    found = pool.read_pool(path.read_text(), path.name, chip)
    fields: Dict[str, Any] = dict(image=IMAGE, chip=found.node.chip, arch=found.node.arch, npus=npus,
                  command=("torchrun", "--nproc_per_node", str(npus), "train.py"), min_driver=min_driver,
                  chip_values=found.chip_values, drivers=found.drivers)
    fields.update(over)
    return pod.PodSpec(**fields)


def the_job(min_driver="24.1.RC3", **over):
    return job.job("llama-sft", spec_for(min_driver, **over), {"ascend-build.io/image-tag": "t"})


def the_volcano(min_driver="24.1.RC3", count=2, **over):
    return volcano.volcano_job("llama-sft", spec_for(min_driver, **over), count, {"ascend-build.io/image-tag": "t"})


def test_the_job_validates_against_kubernetes_schemas():
    validate_k8s(the_job())


def test_the_schema_check_can_fail():
    # the strict schemas refuse a misspelt field and a wrong type: the check above is not vacuous
    bad = the_job()
    bad["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_k8s(bad)
    bad = the_job()
    bad["spec"]["backoffLimit"] = "none"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_k8s(bad)


def test_the_volcano_job_validates_against_volcanos_crd_and_its_pod_against_kubernetes():
    validate_volcano(the_volcano())


def test_the_volcano_check_refuses_what_volcano_would_prune():
    import jsonschema

    bad = the_volcano()
    bad["spec"]["plugin"] = bad["spec"].pop("plugins")  # Kubernetes would drop it silently: no svc, no env
    with pytest.raises(jsonschema.ValidationError):
        validate_volcano(bad)


def test_the_affinity_admits_only_nodes_whose_driver_suffices_and_of_the_chip():
    cluster = nodes(CLUSTER)
    # the pool's lowest driver, 24.1.RC3: every 910B node but npu-e (23.0.RC3); never npu-d (310P)
    assert admitted(the_job()["spec"]["template"]["spec"], cluster) == ["npu-a", "npu-b", "npu-c"]
    # an image needing 25.0.RC1 (from a pool of npu-a and npu-c): npu-b's 24.1.RC3 is refused too,
    # by its ordinal label (it has only the deprecated driver key) and npu-c is admitted by its version label
    newer = job.job("x", spec_for("25.0.RC1", drivers=("25.0.RC1", "25.2.0")), {})
    assert admitted(newer["spec"]["template"]["spec"], cluster) == ["npu-a", "npu-c"]


def test_the_ordinal_term_alone_admits_exactly_the_drivers_at_or_above_the_minimum():
    # nodes labelled only with the ordinal (MindCluster's driver label absent): Gt ordinal(min) - 1
    spec = spec_for("24.1.RC3", drivers=())
    cluster = [{"metadata": {"name": d, "labels": {"kubernetes.io/arch": "amd64", CHIP_LABELS[0]: "910B3",
                                                  DRIVER_ORDINAL_LABEL: str(driver_ordinal(d))}}}
               for d in ("24.1.RC2", "24.1.rc3", "24.1.RC3.b080", "24.1.0", "23.0.2.1")]
    assert admitted(pod.pod_spec(spec, []), cluster) == ["24.1.rc3", "24.1.RC3.b080", "24.1.0"]


def test_the_version_label_term_admits_both_spellings_of_a_driver_a_node_may_carry():
    # no ordinal label: only MindCluster's driver label, spelled as the driver spells it (24.1.rc3, what the
    # device plugin copies from DCMI and host --nfd writes) or as release names do (24.1.RC3); In compares bytes
    spec = spec_for("24.1.RC3", drivers=("24.1.RC3", "25.0.rc1"))
    cluster = [{"metadata": {"name": f"{key}={d}", "labels": {"kubernetes.io/arch": "amd64", CHIP_LABELS[0]: "910B3",
                                                             key: d}}}
               for key in DRIVER_VERSION_LABELS for d in ("24.1.rc3", "24.1.RC3", "25.0.RC1", "25.0.rc1", "24.1.rc2")]
    assert admitted(pod.pod_spec(spec, []), cluster) == [f"{key}={d}" for key in DRIVER_VERSION_LABELS
                                                        for d in ("24.1.rc3", "24.1.RC3", "25.0.RC1", "25.0.rc1")]
    terms = pod.affinity(spec)["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[1]["matchExpressions"][2]["values"] == ["24.1.rc3", "24.1.RC3", "25.0.rc1", "25.0.RC1"]


def test_a_line_name_minimum_selects_from_the_lines_first_release():
    spec = spec_for("25.0.X", drivers=())
    terms = pod.affinity(spec)["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][2] == {"key": DRIVER_ORDINAL_LABEL, "operator": "Gt",
                                               "values": [str(driver_ordinal("25.0.RC1") - 1)]}


def test_both_chip_keys_are_listed():
    terms = pod.affinity(spec_for("24.1.RC3"))["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {t["matchExpressions"][1]["key"] for t in terms} == set(CHIP_LABELS)
    assert {t["matchExpressions"][2]["key"] for t in terms} == {DRIVER_ORDINAL_LABEL, "huawei.com/npu.driver.version",
                                                                 "huawei.com/driver.version"}


def test_the_container_runs_the_command_behind_the_guard_by_digest_with_the_chips_resource():
    container = the_job()["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert container["command"] == [pod.GUARD_PATH, "torchrun", "--nproc_per_node", "8", "train.py"]
    assert container["resources"] == {"limits": {"huawei.com/Ascend910": "8"}, "requests": {"huawei.com/Ascend910": "8"}}
    small = job.job("x", spec_for("24.1.RC3", npus=2, path=CLUSTER, chip="310p"), {})
    assert small["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"huawei.com/Ascend310P": "2"}


def test_the_kubernetes_python_client_reads_the_job_quantities_as_strings():
    """The kubernetes client's own deserializer (its models, as it reads an API answer) takes the Job
    whole: a resource quantity is a string in its model, and a bare 8 is refused."""
    import json

    from kubernetes.client import ApiClient

    client = ApiClient()
    made = yaml.safe_load(manifest_yaml.render(the_job()))  # as `k8s job` prints it
    read = client.deserialize(json.dumps(made), "V1Job", "application/json")
    assert read.spec.template.spec.containers[0].resources.limits == {"huawei.com/Ascend910": "8"}
    assert client.sanitize_for_serialization(read)["spec"]["template"]["spec"]["containers"][0]["command"][0] == \
        pod.GUARD_PATH
    bare = json.loads(json.dumps(made))
    bare["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] = 8
    with pytest.raises(Exception, match="valid string"):  # the check can fail
        client.deserialize(json.dumps(bare), "V1Job", "application/json")


def test_the_mounts_are_runs_list_read_only_with_shm_in_memory():
    spec = the_job()["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    expected = [p for p in devices.DRIVER_MOUNTS if p not in devices.SOME_HOSTS_ONLY]
    assert sorted(set(mounts) - {"/dev/shm"}) == sorted(expected)
    assert {"/etc/hccn.conf", "/usr/local/Ascend/driver/topo", "/usr/local/dcmi", "/usr/local/bin/npu-smi",
            "/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/version.info"} <= set(mounts)
    assert all(m["readOnly"] for path, m in mounts.items() if path != "/dev/shm")
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts["/usr/local/Ascend/driver/lib64"]["name"]]["hostPath"]["type"] == "Directory"
    assert volumes[mounts["/etc/hccn.conf"]["name"]]["hostPath"]["type"] == "File"
    assert volumes[mounts["/dev/shm"]["name"]] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}


def env_of(manifest, path=("spec", "template", "spec")):
    spec = manifest
    for key in path:
        spec = spec[key]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in spec["containers"][0]["env"]}


def test_the_jobs_hccl_env_is_one_pod_of_n_npus():
    assert env_of(the_job()) == {"MASTER_ADDR": "localhost", "MASTER_PORT": "2222", "WORLD_SIZE": "8", "RANK": "0",
                                 "LOCAL_WORLD_SIZE": "8"}


def test_the_volcano_job_spreads_k_pods_with_pod_zero_as_master():
    doc = the_volcano(count=2)
    task = doc["spec"]["tasks"][0]
    assert doc["spec"]["minAvailable"] == 2 and task["replicas"] == 2 and doc["spec"]["schedulerName"] == "volcano"
    assert doc["spec"]["plugins"] == {"env": [], "svc": []}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in task["template"]["spec"]["containers"][0]["env"]}
    assert env == {"MASTER_ADDR": "llama-sft-worker-0.llama-sft", "MASTER_PORT": "2222", "WORLD_SIZE": "16",
                   "RANK": {"fieldRef": {"fieldPath": "metadata.annotations['volcano.sh/task-index']"}},
                   "LOCAL_WORLD_SIZE": "8"}
    anti = task["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"


def test_rendering_is_deterministic_and_round_trips():
    first, second = manifest_yaml.render(the_volcano(), ["h"]), manifest_yaml.render(the_volcano(), ["h"])
    assert first == second and first.startswith("# h\napiVersion: batch.volcano.sh/v1alpha1\nkind: Job\n")
    assert yaml.safe_load(first) == the_volcano()
    assert "&id" not in first and "*id" not in first  # shared expressions are written out, not aliased


@pytest.mark.parametrize("build, message", [
    (lambda: the_job(npus=0), "--npus 0"),
    (lambda: the_job(command=()), "no command to run"),
    (lambda: the_job(shm_size="16g"), "--shm-size '16g' is not a Kubernetes quantity"),
    (lambda: job.job("Llama_SFT", spec_for("24.1.RC3"), {}), "--name 'Llama_SFT' is not a Kubernetes name"),
    (lambda: the_volcano(count=0), "--nodes-count 0"),
    (lambda: the_job(min_driver="soon"), "minimum driver 'soon'"),
    (lambda: job.job("x", replace(spec_for("24.1.RC3"), chip="310b"), {}),
     "no Ascend device plugin resource is known for chip '310b'"),
])
def test_bad_input_is_a_clear_error(build, message):
    with pytest.raises(UserError) as info:
        build()
    assert message in info.value.message
