"""The manifests themselves: Kubernetes' and Volcano's schemas, the affinity against fixture nodes, mounts, env."""

from __future__ import annotations

from dataclasses import replace

import kubernetes_validate
import pytest
import yaml
from tests.support.k8s import (CLUSTER, IMAGE, VOLCANO_ENV_PLUGIN, admitted, go_constants, go_function, kept_source,
                               nodes, spec_for, validate_k8s, validate_volcano)

from builder import devices
from builder.errors import UserError
from builder.k8s import job, mounts, pod, manifest_yaml, volcano
from builder.node.labels import CHIP_LABELS, DRIVER_ORDINAL_LABEL, DRIVER_VERSION_LABELS
from builder.versions import driver_ordinal


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
    # by its ordinal label, and npu-c (no ordinal) is admitted by its version label
    newer = job.job("x", spec_for("25.0.RC1", drivers=("25.0.RC1", "25.2.0")), {})
    assert admitted(newer["spec"]["template"]["spec"], cluster) == ["npu-a", "npu-c"]


def test_the_ordinal_term_alone_admits_exactly_the_drivers_at_or_above_the_minimum():
    # nodes labelled only with the ordinal (the device plugin's driver label absent): Gt ordinal(min) - 1
    spec = spec_for("24.1.RC3", drivers=())
    cluster = [{"metadata": {"name": d, "labels": {"kubernetes.io/arch": "amd64", CHIP_LABELS[0]: "910B3",
                                                  DRIVER_ORDINAL_LABEL: str(driver_ordinal(d))}}}
               for d in ("24.1.RC2", "24.1.rc3", "24.1.RC3.b080", "24.1.0", "23.0.2.1")]
    assert admitted(pod.pod_spec(spec, []), cluster) == ["24.1.rc3", "24.1.RC3.b080", "24.1.0"]


def test_the_version_label_term_admits_both_spellings_of_a_driver_a_node_may_carry():
    # no ordinal label: only the device plugin's driver label, spelled as the driver spells it (24.1.rc3, what the
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


def test_the_affinity_selects_on_the_keys_the_device_plugin_writes():
    terms = pod.affinity(spec_for("24.1.RC3"))["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {t["matchExpressions"][1]["key"] for t in terms} == {"node.kubernetes.io/npu.chip.name"}
    assert [t["matchExpressions"][2]["key"] for t in terms] == [DRIVER_ORDINAL_LABEL, "huawei.com/driver.version"]


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


def mounts_of(pod_spec):
    """{mountPath: hostPath type} of the driver files, and the shm volume."""
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    mounts = {m["mountPath"]: m for m in pod_spec["containers"][0]["volumeMounts"]}
    assert all(m["readOnly"] for path, m in mounts.items() if path != "/dev/shm")
    assert volumes[mounts["/dev/shm"]["name"]] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
    return {path: volumes[m["name"]]["hostPath"]["type"] for path, m in mounts.items() if path != "/dev/shm"}


EVERY_NODE = {"/usr/local/Ascend/driver/lib64": "Directory", "/usr/local/Ascend/driver/version.info": "File",
              "/usr/local/Ascend/firmware/version.info": "File", "/etc/ascend_install.info": "File",
              "/usr/local/dcmi": "Directory", "/usr/local/bin/npu-smi": "File"}


def test_a_one_node_910b_job_mounts_what_every_npu_node_has_and_no_hccn_conf_or_topo():
    assert mounts_of(the_job()["spec"]["template"]["spec"]) == EVERY_NODE


def test_a_multi_node_910b_job_mounts_hccn_conf_for_hccl_across_servers():
    template = the_volcano(count=2)["spec"]["tasks"][0]["template"]["spec"]
    assert mounts_of(template) == {**EVERY_NODE, "/etc/hccn.conf": "File"}
    one = the_volcano(count=1)["spec"]["tasks"][0]["template"]["spec"]
    assert mounts_of(one) == EVERY_NODE


def test_a_310p_job_mounts_neither_hccn_conf_nor_topo_even_over_several_nodes():
    spec = spec_for("24.1.RC3", npus=2, path=CLUSTER, chip="310p", command=("python", "serve.py"))
    assert mounts_of(job.job("x", spec, {})["spec"]["template"]["spec"]) == EVERY_NODE
    several = volcano.volcano_job("x", spec, 2, {})["spec"]["tasks"][0]["template"]["spec"]
    assert mounts_of(several) == EVERY_NODE


def test_a_950_job_mounts_the_drivers_topo_folder():
    spec = replace(spec_for("24.1.RC3"), chip="950")
    assert mounts_of(job.job("x", spec, {})["spec"]["template"]["spec"]) == {
        **EVERY_NODE, "/usr/local/Ascend/driver/topo": "Directory"}


def test_every_mount_table_row_is_one_run_mounts():
    for chip in ("910", "910b", "a3", "310p", "950"):
        for count in (1, 2):
            paths = [p for p, _ in mounts.mounts(chip, count)]
            assert set(paths) <= set(devices.DRIVER_MOUNTS) - devices.SOME_HOSTS_ONLY
            assert set(devices.REQUIRED_MOUNTS) <= set(paths)


def env_of(manifest, path=("spec", "template", "spec")):
    spec = manifest
    for key in path:
        spec = spec[key]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in spec["containers"][0]["env"]}


def test_the_jobs_torchrun_gets_a_one_node_rendezvous_in_pet_variables():
    assert env_of(the_job()) == {"PET_NNODES": "1", "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "localhost",
                                 "PET_MASTER_PORT": "2222", "PET_NPROC_PER_NODE": "8"}


def test_the_jobs_plain_python_is_rank_0_of_1():
    doc = the_job(command=("python", "train.py"))
    assert env_of(doc) == {"MASTER_ADDR": "localhost", "MASTER_PORT": "2222", "WORLD_SIZE": "1", "RANK": "0",
                           "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    assert env_of(the_job(command=("./serve.sh",))) == {}


def test_the_volcano_job_spreads_k_pods_with_pod_zero_as_master():
    doc = the_volcano(count=2)
    task = doc["spec"]["tasks"][0]
    assert doc["spec"]["minAvailable"] == 2 and task["replicas"] == 2 and doc["spec"]["schedulerName"] == "volcano"
    assert doc["spec"]["plugins"] == {"env": [], "svc": []}
    container = task["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    # torchrun reads PET_*, the master is pod 0's svc host name; the node rank, the env plugin's task index
    assert env == {"PET_NNODES": "2", "PET_MASTER_ADDR": "llama-sft-worker-0.llama-sft",
                   "PET_MASTER_PORT": "2222", "PET_NPROC_PER_NODE": "8"}
    assert container["command"][1:] == ["torchrun", "--node-rank=$(VC_TASK_INDEX)", "--nproc_per_node", "8", "train.py"]
    anti = task["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"


def test_a_volcano_job_of_plain_python_is_one_process_per_pod():
    container = the_volcano(count=3, command=("python3", "train.py"))["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env == {"MASTER_ADDR": "llama-sft-worker-0.llama-sft", "MASTER_PORT": "2222", "WORLD_SIZE": "3",
                   "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    assert container["command"][1:] == ["env", "RANK=$(VC_TASK_INDEX)", "python3", "train.py"]


def test_the_node_rank_is_what_every_volcano_from_1_0_appends_and_never_the_1_9_annotation():
    """Volcano 1.0's env plugin (kept in tests/fixtures/volcano/env-plugin) appends VC_TASK_INDEX to
    every container; the task-index annotation came only with 1.9.0 (MindCluster 26.1 deploys 1.7.0)."""
    constants = go_constants(kept_source(VOLCANO_ENV_PLUGIN / "const.go"))
    on_create = go_function(kept_source(VOLCANO_ENV_PLUGIN / "env.go"), "func (ep *envPlugin) OnPodCreate(")
    assert "for i := range pod.Spec.Containers {" in on_create
    assert "pod.Spec.Containers[i].Env = append(pod.Spec.Containers[i].Env, v1.EnvVar{Name: TaskIndex, Value: index})" \
        in on_create
    assert constants["TaskIndex"] == volcano.TASK_INDEX == "VC_TASK_INDEX"
    for command in (("torchrun", "t.py"), ("python", "t.py")):
        text = manifest_yaml.render(the_volcano(count=3, command=command), volcano.header("llama-sft"))
        assert "$(VC_TASK_INDEX)" in text and "task-index" not in text
        assert "# needs Volcano 1.0 or newer" in text and "app=volcano-controller" in text


def test_the_job_the_volcano_job_and_their_pods_carry_mindclusters_ring_controller_label():
    for doc, template in ((the_job(), the_job()["spec"]["template"]),
                          (the_volcano(), the_volcano()["spec"]["tasks"][0]["template"])):
        assert doc["metadata"]["labels"]["ring-controller.atlas"] == "ascend-910b"
        assert template["metadata"]["labels"]["ring-controller.atlas"] == "ascend-910b"
    small = job.job("x", spec_for("24.1.RC3", npus=2, path=CLUSTER, chip="310p"), {})
    assert small["spec"]["template"]["metadata"]["labels"]["ring-controller.atlas"] == "ascend-310P"


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
    (lambda: the_volcano(command=("bash", "-c", "torchrun train.py")), "cannot tell 'bash' how the 2 pods find each other"),
    (lambda: the_volcano(command=("torchrun", "--nnodes", "2", "--master_port=1", "t.py")),
     "the command sets --master_port, --nnodes itself"),
    (lambda: the_job(min_driver="soon"), "minimum driver 'soon'"),
    (lambda: job.job("x", replace(spec_for("24.1.RC3"), chip="310b"), {}),
     "no Ascend device plugin resource is known for chip '310b'"),
])
def test_bad_input_is_a_clear_error(build, message):
    with pytest.raises(UserError) as info:
        build()
    assert message in info.value.message


@pytest.mark.parametrize("hostile", ["npu-a\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}",
                                     "npu-a\r\n---\r\nkind: ConfigMap", "npu-a\u2028---\u2029kind: ConfigMap",
                                     "npu-a\x85---\x85kind: ConfigMap", "key\x00path\x1b[2J", "/keys/team.pub\n# ok"])
def test_no_header_text_adds_a_line_or_a_document_to_a_manifest(hostile):
    """Header lines carry input (node names from --nodes, key paths): whatever they hold, the output
    is one comment line per header line and one YAML document, the manifest itself."""
    manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}
    text = manifest_yaml.render(manifest, ["chosen: the image", f"node: {hostile}"])
    assert list(yaml.safe_load_all(text)) == [manifest]
    lines = text.split("\n")
    assert lines[:2] == ["# chosen: the image", "# node: " + manifest_yaml.comment_text(hostile)]
    assert lines[2] == "apiVersion: batch/v1" and len(text.splitlines()) == len(lines) - 1  # no stray line break
