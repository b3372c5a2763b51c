"""The node label keys and values `host --nfd` writes and `k8s job` selects on are the ones
MindCluster's Ascend Device Plugin writes: read from its source, kept verbatim in
tests/fixtures/mindcluster/ (no engine, no cluster).

- the keys: the Go constants ``ChipNameLabel`` and ``DcmiDriverVersion`` of the device plugin's
  pkg/common/constants.go;
- the values: pkg/server/manager.go copies DCMI's chip name and DCMI's version string into them,
  unchanged; npu-smi prints that chip name as ``Chip Name`` (public dumps, tests/support/node.py),
  so a fixture node's chip label value must be the name its npu-smi prints.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Dict

import pytest

from builder.node import labels as keys
from builder.node.host import parse_board, parse_smi_table, probe
from tests.support.matrix import run_cli
from tests.support.node import (BOARD_950, CHIP_A2, CHIP_A3, DRIVER_INFO, TABLE_310P3, TABLE_910B3, TABLE_910PROB,
                                TABLE_950, TABLE_A3, board, make_node)

MINDCLUSTER = Path(__file__).resolve().parents[1] / "fixtures" / "mindcluster"
COMMIT = "22bb3d987bc0208c3eb7395e222b661276133c58"
SHA256 = {  # of each source file, as the fixtures' README.md gives them
    "device-plugin-constants.go": "0eb5d137f074aec11118254085740c88e12af7e901fd15bc63bc5344a524b26f",
    "device-plugin-manager.go": "b2975f4b5c77ba050462b92a58bb9fd2a2fcc71a10eea3ceb5ac471cea139bcd",
}


def kept(name: str, path: str) -> str:
    """A kept source file without its header line, after checking the header names its origin and
    the file is the one the README names."""
    header, _, body = (MINDCLUSTER / name).read_text().partition("\n")
    assert header == f"// Ascend/mind-cluster, {path} at commit {COMMIT} (2026-08-21), verbatim below", header
    assert hashlib.sha256(body.encode()).hexdigest() == SHA256[name] and SHA256[name] in (MINDCLUSTER / "README.md").read_text()
    return body


def go_constants(source: str) -> Dict[str, str]:
    """``Name = "value"`` string constants of a Go file."""
    return dict(re.findall(r'^\s*([A-Z]\w*)\s*=\s*"([^"]*)"', source, re.MULTILINE))


CONSTANTS = go_constants(kept("device-plugin-constants.go", "component/ascend-device-plugin/pkg/common/constants.go"))
MANAGER = kept("device-plugin-manager.go", "component/ascend-device-plugin/pkg/server/manager.go")


def test_the_keys_are_the_device_plugins_constants():
    assert keys.CHIP_LABEL == CONSTANTS["ChipNameLabel"] == "node.kubernetes.io/npu.chip.name"
    assert keys.DRIVER_VERSION_LABEL == CONSTANTS["DcmiDriverVersion"] == "huawei.com/driver.version"
    # every key a node is read through, and every key the affinity selects on, is one of them
    assert set(keys.CHIP_LABELS) | set(keys.DRIVER_VERSION_LABELS) <= set(CONSTANTS.values())


def test_the_lines_the_docs_name_are_where_the_device_plugin_writes_the_labels():
    constants = kept("device-plugin-constants.go", "component/ascend-device-plugin/pkg/common/constants.go")
    lines = constants.split("\n")
    # the header line aside the kept file is the source, line for line
    assert lines[102 - 1].strip() == 'ChipNameLabel = "node.kubernetes.io/npu.chip.name"'
    assert lines[362 - 1].strip() == 'DcmiDriverVersion = "huawei.com/driver.version"'
    manager = MANAGER.split("\n")
    assert manager[304 - 1].strip() == "driverVersion := hdm.manager.GetDmgr().GetDcmiVersion()"
    assert manager[306 - 1].strip() == "newLabelMap[common.DcmiDriverVersion] = driverVersion"
    assert manager[415 - 1].strip() == "newLabelMap[common.ChipNameLabel] = chipInfo.Name"
    # the values are copied as DCMI reports them: nothing rewrites them on the way
    assert MANAGER.count("common.ChipNameLabel]") == 1 and MANAGER.count("common.DcmiDriverVersion]") == 1


# fixture nodes whose npu-smi prints public dumps (the NPU is mocked): the chip name it prints, which
# DCMI reports and the device plugin copies into its label
SMI_NODES = {
    "910B3": {"info": TABLE_910B3, "info -t board -i 0": board("24.1.rc3", "7.5.0.1.129")},
    "910B4": {"info": TABLE_910B3, "info -t board -i 0": board("24.1.rc3", "7.5.0.1.129") + CHIP_A2},
    "Ascend910": {"info": TABLE_A3, "info -t board -i 0": board("24.1.rc3", "7.5.0.1.129"),
                  "info -t board -i 0 -c 0": CHIP_A3},
    "310P3": {"info": TABLE_310P3, "info -t board -i 0": board("24.1.rc3", "7.5.0.1.129")},
    "910ProB": {"info": TABLE_910PROB, "info -t board -i 0": board("24.1.rc3", "7.5.0.1.129")},
    "Ascend950PR": {"info": TABLE_950, "info -t board -i 0": BOARD_950},
}


def printed_chip_name(smi: Dict[str, str]) -> str:
    """The chip name npu-smi prints: the board's ``Chip Name`` (the chip query's, else the board's),
    else the table's name of the first NPU."""
    for query in ("info -t board -i 0 -c 0", "info -t board -i 0"):
        name = parse_board(smi.get(query, "")).get("Chip Name")
        if name:
            return name
    return parse_smi_table(smi["info"])[1][0][1]


@pytest.mark.parametrize("name", sorted(SMI_NODES))
def test_fake_npu_the_chip_label_value_is_the_chip_name_npu_smi_prints(tmp_path, name):
    smi = SMI_NODES[name]
    assert printed_chip_name(smi) == name
    info = probe(make_node(tmp_path / "node", smi=smi))
    assert keys.chip_label_value(info.soc) == name, info.soc


@pytest.mark.parametrize("name, driver", [("910B3", "24.1.rc3"), ("Ascend910", "24.1.rc3"), ("Ascend950PR", "25.7.rc1.6")])
def test_fake_npu_host_nfd_writes_the_device_plugins_keys_with_the_chip_model(tmp_path, name, driver):
    root = make_node(tmp_path / "node", smi=SMI_NODES[name], driver=DRIVER_INFO.replace("24.1.rc3", driver))
    out = run_cli("host", "--root", root, "--nfd", "-")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert f"huawei.com/driver.version={driver}" in lines
    assert f"node.kubernetes.io/npu.chip.name={name}" in lines
    assert not [line for line in lines if line.startswith("huawei.com/npu.")]  # keys no source writes
