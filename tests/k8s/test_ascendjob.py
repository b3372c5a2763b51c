"""`--kind ascendjob`: the Ascend Operator's AscendJob, against its CRD (tests/fixtures/mindcluster)."""

from __future__ import annotations

import jsonschema
import pytest
from tests.support.k8s import CLUSTER, spec_for, validate_ascendjob

from builder.errors import UserError
from builder.k8s import ascendjob


def the_ascendjob(count=2, **over):
    return ascendjob.ascend_job("llama-sft", spec_for("24.1.RC3", **over), count, {"ascend-build.io/image-tag": "t"})


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
