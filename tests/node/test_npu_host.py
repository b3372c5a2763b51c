"""Tests that need a real Ascend NPU host: `pytest -m npu` on one (deselected elsewhere).

They build and validate a real NPU image of the shipped matrix on this host, run the
device tiers through `promote`, and check the host probe and doctor against the real
driver. Choose the cell with ASCEND_BUILD_NPU_CELL (an id from `ascend-build list`);
by default the first cell of the shipped matrix for this host's arch and chip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder import devices
from builder.node import doctor, host
from builder.images import matrix

pytestmark = [pytest.mark.npu, pytest.mark.engine]

ROOT = Path(__file__).resolve().parents[2]
CLI = [str(Path(sys.executable).with_name("ascend-build"))]


def cli(*args):
    return subprocess.run(CLI + list(args), capture_output=True, text=True, cwd=ROOT, timeout=7200)


@pytest.fixture(scope="module")
def node():
    info = host.probe()
    if not devices.npu_devices():
        pytest.fail("no /dev/davinci* here: run `pytest -m npu` on an Ascend NPU host")
    return info


@pytest.fixture(scope="module")
def cell(node):
    wanted = os.environ.get("ASCEND_BUILD_NPU_CELL")
    cells = matrix.load(ROOT / "matrix").cells
    if wanted:
        fits = [c for c in cells if c.id == wanted]
    else:
        fits = [c for c in cells if c.arch == node.arch and c.chip == node.chip]
    if not fits:
        pytest.skip(f"no cell of the shipped matrix for {node.arch}/{node.chip}: set ASCEND_BUILD_NPU_CELL")
    return fits[0]


def test_the_host_probe_reads_the_real_driver_firmware_and_chip(node):
    assert node.driver and node.firmware and node.chip, node.problems
    assert node.devices and node.compatibility == "OK", node.to_dict()


def test_doctor_finds_the_driver_and_firmware_paired(node):
    checks = {c.name: c for c in doctor.run_host_checks(node, os.environ)}
    assert checks["firmware/driver pairing"].status == "OK", checks["firmware/driver pairing"]


def test_the_npu_image_passes_every_tier_on_this_host(cell, tmp_path):
    done = cli("image", "--cell", cell.id, "--variant", "npu", "--state-dir", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr[-4000:]
    [outcome] = json.loads(done.stdout)
    tiers = {t["name"]: t["status"] for t in outcome["tiers"]}
    assert outcome["status"] == "passed" and outcome["tags"] == [cell.ref]
    assert all(tiers[t] == "passed" for t in ("versions", "libraries", "import", "device", "train")), tiers
    assert tiers["collective"] in ("passed", "skipped")


def test_a_candidate_from_a_build_machine_is_promoted_here(cell, tmp_path):
    built = cli("image", "--cell", cell.id, "--variant", "npu", "--no-device", "--state-dir", str(tmp_path), "--json")
    assert built.returncode == 0, built.stderr[-4000:]
    [outcome] = json.loads(built.stdout)
    assert outcome["status"] == "candidate" and outcome["tags"] == [f"{cell.ref}-candidate"]
    promoted = cli("promote", f"{cell.ref}-candidate", "--state-dir", str(tmp_path), "--json")
    assert promoted.returncode == 0, promoted.stderr[-4000:]
    assert json.loads(promoted.stdout)[0]["tags"] == [cell.ref]
