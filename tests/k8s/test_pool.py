"""Reading a node pool from `kubectl get nodes -o json`: MindCluster's labels, the lowest driver, bad input."""

from __future__ import annotations

import json

import pytest
from tests.support.k8s import CLUSTER, POOL_910B, nodes
from tests.support.promptly import refused_promptly

from builder.errors import UserError
from builder.k8s.pool import describe, host_pool, node_facts, read_pool
from builder.node.host import HostInfo
from builder.node.labels import DRIVER_ORDINAL_LABEL, DRIVER_VERSION_LABELS
from builder.node.pull import Node
from builder.versions import driver_ordinal


def as_list(items) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def test_the_fixture_ordinals_are_the_drivers_ordinals():
    # the fixtures stand for what `host --nfd` writes; they must not drift from driver_ordinal
    for node in nodes(CLUSTER):
        labels = node["metadata"]["labels"]
        if DRIVER_ORDINAL_LABEL in labels:
            driver = next(labels[k] for k in DRIVER_VERSION_LABELS if k in labels)
            assert labels[DRIVER_ORDINAL_LABEL] == str(driver_ordinal(driver))


def test_the_lowest_driver_of_the_pool_decides():
    pool = read_pool(POOL_910B.read_text(), "pool-910b.json")
    assert pool.node.driver == "24.1.RC3" and pool.weakest == "npu-b"
    assert (pool.node.arch, pool.node.chip) == ("x86_64", "910b")
    assert pool.names == ("npu-a", "npu-b", "npu-c")
    assert pool.chip_values == ("910B3", "910B4") and pool.drivers == ("24.1.RC3", "25.0.RC1", "25.2.0")
    assert describe(pool) == "3 nodes, lowest driver on npu-b; "


def test_a_node_is_read_through_the_device_plugins_keys():
    facts = node_facts(nodes(CLUSTER)[1], "cluster.json")  # npu-b
    assert (facts.name, facts.chip, facts.chip_label, facts.driver) == ("npu-b", "910b", "910B3", "24.1.RC3")


def test_firmware_is_unchecked_unless_every_node_carries_its_label():
    pool = read_pool(POOL_910B.read_text(), "pool-910b.json")
    assert pool.node.firmware is None and pool.node.unchecked == ("firmware",)
    only_a = read_pool(as_list(nodes(POOL_910B)[:1]), "a.json")
    assert only_a.node.firmware == "7.7.0.1.231" and only_a.node.unchecked == ()


def test_mixed_chips_are_refused_naming_each_chips_nodes():
    with pytest.raises(UserError) as info:
        read_pool(CLUSTER.read_text(), "cluster.json")
    assert info.value.message == ("cluster.json: the nodes have 2 chips (310p: npu-d; 910b: npu-a, npu-b, npu-c, npu-e); "
                                  "an image is built for one chip")
    assert "--chip 310p" in info.value.fix and info.value.exit_code == 1


def test_chip_splits_the_pool_and_names_the_nodes_left_out():
    pool = read_pool(CLUSTER.read_text(), "cluster.json", chip="910b")
    assert pool.names == ("npu-a", "npu-b", "npu-c", "npu-e") and pool.left_out == ("npu-d: chip 310p",)
    assert pool.node.driver == "23.0.RC3" and pool.weakest == "npu-e"
    small = read_pool(CLUSTER.read_text(), "cluster.json", chip="310p")
    assert small.names == ("npu-d",) and small.node.chip == "310p"


def test_a_chip_no_node_has_is_refused():
    with pytest.raises(UserError, match="no node has chip a3 .the nodes have 310p, 910b."):
        read_pool(CLUSTER.read_text(), "cluster.json", chip="a3")
    with pytest.raises(UserError, match="--chip '910B' is none of"):
        read_pool(CLUSTER.read_text(), "cluster.json", chip="910B")


def test_mixed_archs_are_refused():
    items = nodes(POOL_910B)
    items[2]["metadata"]["labels"]["kubernetes.io/arch"] = "arm64"
    with pytest.raises(UserError, match=r"2 archs \(aarch64: npu-c; x86_64: npu-a, npu-b\)"):
        read_pool(as_list(items), "f.json")


def test_host_arch_is_read_when_kubernetes_arch_is_absent():
    item = nodes(POOL_910B)[0]
    del item["metadata"]["labels"]["kubernetes.io/arch"]
    item["metadata"]["labels"]["host-arch"] = "huawei-arm"
    assert node_facts(item, "f").arch == "aarch64"


@pytest.mark.parametrize("text, message", [
    ("{not json", "f.json: not JSON"),
    ("[]", "f.json: not a list of nodes (kind None"),
    (json.dumps({"kind": "PodList", "items": []}), "kind 'PodList'"),
    (json.dumps({"kind": "List", "items": []}), "f.json: the list has no nodes"),
    (json.dumps({"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}}]}), "holds Pod, not only Nodes"),
    (json.dumps({"kind": "List", "items": [{"kind": "Node", "metadata": {}}]}), "a node without metadata.name"),
])
def test_bad_input_is_a_clear_error(text, message):
    with pytest.raises(UserError) as info:
        read_pool(text, "f.json")
    assert message in info.value.message and "kubectl get nodes" in info.value.fix


@pytest.mark.parametrize("text", [
    '{"kind": "List", "items": ' + "[" * 100_000 + "]" * 100_000 + "}",  # past Python's stack
    '{"kind": "List", "items": ' + "[" * 100 + "]" * 100 + "}",  # within it, past any Node's depth
])
def test_a_node_list_nested_past_any_nodes_depth_is_refused_not_a_recursion_error(text):
    with pytest.raises(UserError, match=r"f\.json is nested deeper than \d+ levels"):
        read_pool(text, "f.json")


@pytest.mark.parametrize("label, value, message", [
    ("node.kubernetes.io/npu.chip.name", "Ascend310B4", "node npu-c: node.kubernetes.io/npu.chip.name=Ascend310B4 names no"),
    ("huawei.com/driver.version", "24.1", "node npu-c: huawei.com/driver.version=24.1 is not an HDK driver version"),
    ("kubernetes.io/arch", "riscv64", "node npu-c: kubernetes.io/arch=riscv64 is no arch"),
    ("ascend-build.io/npu.firmware.version", "7.5", "node npu-c: ascend-build.io/npu.firmware.version=7.5 is not"),
])
def test_an_unreadable_label_names_the_node_the_label_and_the_value(label, value, message):
    item = nodes(POOL_910B)[2]
    item["metadata"]["labels"][label] = value
    with pytest.raises(UserError) as info:
        read_pool(as_list([item]), "f.json")
    assert message in info.value.message


def test_a_node_without_npu_labels_is_named_with_each_label_missing():
    control = {"kind": "Node", "metadata": {"name": "control-1", "labels": {"kubernetes.io/arch": "amd64"}}}
    with pytest.raises(UserError) as info:
        read_pool(as_list(nodes(POOL_910B) + [control]), "f.json")
    assert info.value.message == (
        "f.json: node control-1: no chip label (node.kubernetes.io/npu.chip.name); "
        "no driver label (huawei.com/driver.version)")
    assert "kubectl get nodes -l node.kubernetes.io/npu.chip.name -o json" in info.value.fix


def test_this_host_is_a_pool_of_one_with_both_spellings_of_its_chip():
    info = HostInfo(arch="aarch64", driver="24.1.rc3", firmware="7.5.0.1.129", soc="Ascend910B3", chip="910b")
    pool = host_pool(info, "aarch64")
    assert pool.node == Node("aarch64", "910b", "24.1.rc3", "7.5.0.1.129") and pool.node.unchecked == ()
    # MindCluster writes 910B3 for the 910 family and Ascend950PR for the 950: both are admitted
    assert pool.chip_values == ("910B3", "Ascend910B3") and pool.drivers == ("24.1.rc3",)
    assert describe(pool) == ""


def test_this_hosts_chip_is_not_overridden():
    info = HostInfo(arch="aarch64", driver="24.1.rc3", soc="Ascend910B3", chip="910b")
    with pytest.raises(UserError, match="--chip a3: this host's chip is 910b"):
        host_pool(info, "aarch64", chip="a3")
    assert host_pool(info, "aarch64", chip="910b").node.chip == "910b"


def test_the_pools_allocatable_npus_are_read_from_the_chips_resource():
    pool = read_pool(POOL_910B.read_text(), "pool.json")
    assert pool.allocatable == (("npu-a", 8), ("npu-b", 8), ("npu-c", 8))
    trimmed = [dict(n, status={}) for n in nodes(POOL_910B)]  # a list trimmed to labels: nothing to judge
    assert read_pool(as_list(trimmed), "pool.json").allocatable == (("npu-a", None), ("npu-b", None), ("npu-c", None))


@pytest.mark.parametrize("npus, pods, refusal", [
    (8, 1, None), (8, 3, None), (1, 2, None),
    (16, 1, "--npus 16: no node of the pool can give a pod that many (allocatable NPUs: npu-a 8, npu-b 8, npu-c 8)"),
    (9, 2, "--npus 9: no node of the pool can give a pod that many"),
])
def test_npus_per_pod_beyond_every_nodes_allocatable_is_refused_not_left_pending(npus, pods, refusal):
    from builder.k8s.pool import check_npus

    pool = read_pool(POOL_910B.read_text(), "pool.json")
    if refusal is None:
        check_npus(pool, npus, pods)
        return
    with pytest.raises(UserError) as refused:
        check_npus(pool, npus, pods)
    assert refused.value.message.startswith(refusal) and refused.value.exit_code == 1
    assert "--npus 8 or fewer per pod" in refused.value.fix


def test_pods_beyond_the_nodes_that_can_hold_them_are_refused_and_unknown_nodes_are_not_judged():
    from builder.k8s.pool import check_npus

    items = nodes(POOL_910B)
    items[0] = dict(items[0], status={"allocatable": {"huawei.com/Ascend910": "16"}})
    pool = read_pool(as_list(items), "pool.json")
    check_npus(pool, 16, 1)
    with pytest.raises(UserError) as refused:
        check_npus(pool, 16, 2)
    assert refused.value.message.startswith("--npus 16 on 2 pods: only 1 node(s) of the pool can give a pod that many (npu-a;")
    assert refused.value.fix.startswith("--nodes-count 1 or fewer")
    items[1] = dict(items[1], status={})  # npu-b lists no allocatable: it may hold 16
    check_npus(read_pool(as_list(items), "pool.json"), 16, 2)


def test_an_allocatable_that_is_no_count_is_named():
    items = nodes(POOL_910B)
    items[2] = dict(items[2], status={"allocatable": {"huawei.com/Ascend910": "8k"}})
    with pytest.raises(UserError, match=r"node npu-c: status.allocatable\[huawei.com/Ascend910\]='8k' is not a count of NPUs"):
        read_pool(as_list(items), "pool.json")


@pytest.mark.parametrize("plant, said", [
    ("fifo", "is not a regular file (a FIFO, a device or a folder): it is not read"),
    ("device", "is not a regular file (a FIFO, a device or a folder): it is not read"),
    ("folder", "is not a regular file (a FIFO, a device or a folder): it is not read"),
    ("huge", "is over 64 bytes: no such file is that large"),
    ("latin-1", "is not UTF-8 text (byte 0)"),
    ("missing", ": cannot read it (No such file or directory)"),
])
def test_a_nodes_file_that_is_no_regular_text_file_in_bounds_is_refused_never_waited_on(tmp_path, monkeypatch, plant, said):
    import os
    from pathlib import Path

    from builder.cli import k8s_choice
    from builder.k8s import pool as pool_module

    path = tmp_path / "nodes.json"
    if plant == "fifo":
        os.mkfifo(path)  # no writer: a plain open() would wait for ever
    elif plant == "device":
        path = Path("/dev/zero")  # would never end
    elif plant == "folder":
        path.mkdir()
    elif plant == "huge":
        monkeypatch.setattr(pool_module, "NODES_MAX", 64)
        path.write_text(CLUSTER.read_text())
    elif plant == "latin-1":
        path.write_bytes(b"\xe9" + CLUSTER.read_bytes())
    refused = refused_promptly(lambda: k8s_choice.read_pool(path, None, tmp_path), path)
    assert refused.message.startswith(f"--nodes {path}") and said in refused.message
    assert "kubectl get nodes -o json" in refused.fix
