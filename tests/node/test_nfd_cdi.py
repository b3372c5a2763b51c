"""`ascend-build host --nfd` and `--cdi` on fixture nodes, through the real CLI.

- The feature file is read the way NFD's local source reads it (kubernetes-sigs/node-feature-discovery
  source/local/local.go at a650db05eccd1755417188498717f1e3f696cfb0: trimmed lines, ``#`` comments,
  ``key[=value]`` split at the first ``=``, files over 64 KiB ignored), and the node labels it
  makes are selected by the node affinity `k8s job` writes: only nodes whose driver suffices.
- The CDI spec validates against the CDI repository's own JSON schema (tests/fixtures/cdi/) and
  names exactly the devices and mounts `ascend-build run` passes to `docker run`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from builder import devices, versions
from builder.errors import UserError
from builder.node import cdi, nfd
from builder.node import labels as keys
from builder.node.host import HostInfo, probe
from tests.support.matrix import run_cli
from tests.support.node import DRIVER_INFO, SMI_910B3, board, make_node

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")  # k8s.io/apimachinery validation


def nfd_labels(text: str) -> Dict[str, str]:
    """The node labels NFD's local source makes of a feature file (source/local/local.go)."""
    assert len(text.encode()) <= nfd.MAX_FILE_BYTES  # else NFD ignores the file whole
    labels: Dict[str, str] = {}
    for raw in text.split("\n"):
        line = raw.strip()
        if not line or line.startswith("#"):
            assert not line.startswith("# +"), f"a directive NFD would parse: {line}"
            continue
        key, sep, value = line.partition("=")
        labels[key] = value if sep else "true"
    return labels


def fixture_node(root: Path, driver: str = "24.1.rc3", npus: int = 8) -> Path:
    smi = {"info": SMI_910B3["info"].replace("24.1.rc3", driver), "info -t board -i 0": board(driver, "7.5.0.1.129")}
    return make_node(root, driver=DRIVER_INFO.replace("24.1.rc3", driver), devices=npus, smi=smi)


def test_the_driver_label_has_one_spelling_the_drivers_own_whichever_way_it_was_read():
    # version.info says 24.1.rc3; a probe that read 24.1.RC3 (a release name) writes the same label value
    for read in ("24.1.rc3", "24.1.RC3", "24.1.Rc3"):
        pairs, _ = nfd.features(HostInfo(arch="aarch64", driver=read, soc="Ascend910B3"))
        assert dict(pairs)[keys.DRIVER_VERSION_LABEL] == "24.1.rc3", read
    pairs, _ = nfd.features(HostInfo(arch="aarch64", driver="25.0.RC1.1"))
    assert dict(pairs)[keys.DRIVER_VERSION_LABEL] == "25.0.rc1.1"


def test_host_nfd_writes_the_probed_facts_as_node_labels(tmp_path):
    root = fixture_node(tmp_path / "node")
    out = run_cli("host", "--root", root, "--nfd", "-")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[3:] == [
        "ascend-build.io/arch=aarch64",
        "ascend-build.io/npu.count=8",
        "ascend-build.io/npu.driver.ordinal=2400110030000000",
        "ascend-build.io/npu.firmware.version=7.5.0.1.129",
        "huawei.com/driver.version=24.1.rc3",
        "node.kubernetes.io/npu.chip.name=910B3",
        "# node.kubernetes.io/npu.chip.name: nfd-master publishes it only where its extraLabelNs lists node.kubernetes.io",
    ]
    labels = nfd_labels(out.stdout)
    assert all("/" in key for key in labels)  # NFD would move an unprefixed name under feature.node.kubernetes.io/
    assert all(len(v) <= 63 and LABEL_VALUE.fullmatch(v) for v in labels.values())
    # the same probe as `host`, no second reading
    info = probe(root)
    assert labels[keys.DRIVER_VERSION_LABEL] == info.driver
    assert labels[keys.DRIVER_ORDINAL_LABEL] == str(versions.driver_ordinal(info.driver))
    assert labels[keys.NPU_COUNT_LABEL] == str(len(info.devices))


def test_host_nfd_writes_a_file_in_place_and_leaves_no_temporary_file(tmp_path):
    root = fixture_node(tmp_path / "node")
    features = tmp_path / "features.d"
    features.mkdir()
    target = features / "ascend-build"
    target.write_text("stale\n")
    out = run_cli("host", "--root", root, "--nfd", target)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == f"wrote {target}\n"
    assert nfd_labels(target.read_text())[keys.CHIP_LABEL] == "910B3"
    assert [p.name for p in features.iterdir()] == ["ascend-build"]
    bad = run_cli("host", "--root", root, "--nfd", tmp_path / "missing" / "x")
    assert bad.returncode == 1 and "cannot write" in bad.stderr and "Traceback" not in bad.stderr


def test_unknown_facts_are_left_out_with_a_comment_not_written_empty(tmp_path):
    root = make_node(tmp_path / "node", driver="Version=banana\n", firmware=None, devices=0, smi=None)
    text = run_cli("host", "--root", root, "--nfd", "-").stdout
    labels = nfd_labels(text)
    assert keys.DRIVER_VERSION_LABEL not in labels and keys.DRIVER_ORDINAL_LABEL not in labels
    assert labels[keys.NPU_COUNT_LABEL] == "0"
    assert "# not written: driver unknown" in text.splitlines()
    assert "# not written: chip unknown" in text.splitlines()
    # a value no label may hold is left out too, and a line break in it cannot forge a feature
    pairs, missing = nfd.features(HostInfo(root="/x\nforged=1", arch="aarch64", soc="Ascend910B3 x"))
    assert (keys.CHIP_LABEL, "910B3 x") not in pairs and "chip '910B3 x' is no valid label value" in missing
    assert "forged=1" not in nfd_labels(nfd.features_text(HostInfo(root="/x\nforged=1")))


def test_the_ordinal_labels_select_only_nodes_whose_driver_suffices(tmp_path):
    """The labels of three fixture nodes, as NFD publishes them (plus the kubelet's arch label),
    against the node affinity `k8s job` writes for an image needing 25.0.RC1."""
    from tests.support.k8s import admitted

    from builder.k8s.pod import PodSpec, affinity

    cluster = []
    for name, driver in (("old", "24.1.rc3"), ("at", "25.0.rc1"), ("new", "25.2.0")):
        text = run_cli("host", "--root", fixture_node(tmp_path / name, driver), "--nfd", "-").stdout
        labels = {**nfd_labels(text), keys.KUBE_ARCH_LABEL: "arm64"}
        cluster.append({"metadata": {"name": name, "labels": labels}})
    spec = PodSpec(image="r/p@sha256:" + "0" * 64, chip="910b", arch="aarch64", npus=8, command=("true",),
                   min_driver="25.0.RC1", chip_values=("910B3",), drivers=())  # the ordinal alone decides
    assert admitted({"affinity": affinity(spec)}, cluster) == ["at", "new"]


def _validator() -> jsonschema.Draft7Validator:
    schema = json.loads((FIXTURES / "cdi" / "schema.json").read_text())
    defs = json.loads((FIXTURES / "cdi" / "defs.json").read_text())
    registry = Registry().with_resource("defs.json", Resource.from_contents(defs, default_specification=DRAFT7))
    return jsonschema.Draft7Validator(schema, registry=registry)


def test_host_cdi_validates_against_the_cdi_schema_and_names_what_run_passes(tmp_path):
    root = fixture_node(tmp_path / "node", npus=2)
    for extra in ("etc/hccn.conf", "usr/local/Ascend/driver/lib64/libascend_hal.so"):
        (root / extra).parent.mkdir(parents=True, exist_ok=True)
        (root / extra).write_text("")
    out = run_cli("host", "--root", root, "--cdi", "-")
    assert out.returncode == 0, out.stderr
    spec = json.loads(out.stdout)
    _validator().validate(spec)
    assert (spec["cdiVersion"], spec["kind"]) == ("0.5.0", "huawei.com/npu")
    assert [d["name"] for d in spec["devices"]] == ["0", "1", "all"]
    # what `run` passes: --device for each NPU and the control devices, -v for the driver files
    argv = devices.run_argv("img", [0, 1], root=root, interactive=False)
    run_devices = [argv[i + 1] for i, a in enumerate(argv) if a == "--device"]
    run_mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
    every = [n["path"] for n in spec["devices"][-1]["containerEdits"]["deviceNodes"]]
    shared = spec["containerEdits"]
    assert every + [n["path"] for n in shared["deviceNodes"]] == run_devices
    assert [f"{m['hostPath']}:{m['containerPath']}:ro" for m in shared["mounts"]] == run_mounts
    assert "/etc/hccn.conf:/etc/hccn.conf:ro" in run_mounts and all("ro" in m["options"] for m in shared["mounts"])
    assert spec["devices"][1]["containerEdits"] == {"deviceNodes": [{"path": "/dev/davinci1"}]}


def test_the_schema_check_can_fail():
    spec = cdi.cdi_spec([0], [], [])
    del spec["devices"][0]["containerEdits"]
    with pytest.raises(jsonschema.ValidationError):
        _validator().validate(spec)
    with pytest.raises(jsonschema.ValidationError):
        _validator().validate({**cdi.cdi_spec([0], [], [("/a", "/a", True)]), "containerEdits": {"mounts": [{"hostPath": "/a"}]}})


def test_a_node_without_npus_gets_no_cdi_spec_but_a_clear_error(tmp_path):
    root = make_node(tmp_path / "node", devices=0)
    out = run_cli("host", "--root", root, "--cdi", "-")
    assert out.returncode == 1 and "no /dev/davinciN device under" in out.stderr and out.stdout == ""
    with pytest.raises(UserError):
        cdi.node_spec(root)


def test_nfd_and_cdi_cannot_both_print(tmp_path):
    out = run_cli("host", "--root", fixture_node(tmp_path / "node"), "--nfd", "-", "--cdi", "-")
    assert out.returncode == 2 and "cannot both print to stdout" in out.stderr
