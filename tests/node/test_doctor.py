"""builder.node.doctor: the pre-flight checklist on fixture nodes, and inside a real image.

Fixture nodes come from test_host.make_node (the real version-file samples); tests
named ``fake_npu`` add a fake npu-smi (mocked hardware). The in-image tests use a
fake engine that runs the real probe program with this interpreter, and, marked
``engine``, the real local/debian:12 image.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Dict, List

import pytest

from builder.node import doctor, explain
from builder import knowledge, versions
from builder.node.doctor import FAIL, OK, WARN, Check
from builder.engine import RunResult
from builder.node.host import HostInfo, probe
from tests.support.node import (DRIVER_INFO, FIRMWARE_INFO, TABLE_910B3, board, make_node, write)

GOOD_ENV = {"HCCL_CONNECT_TIMEOUT": "1800", "ASCEND_GLOBAL_LOG_LEVEL": "3",
            "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
# Firmware of HDK 25.0.RC1.1 next to the 24.1.rc3 driver: the driver accepts [7.0.0,7.5.99] only.
FIRMWARE_7_7 = FIRMWARE_INFO.replace("Version=7.5.0.1.129", "Version=7.7.0.1.231").replace(
    "package_version=24.1.rc3", "package_version=25.0.rc1.1").replace(
    "[24.1,24.1.]", "[24.1,24.1.],[25.0,25.0.]")


def by_name(checks, name) -> Check:
    [c] = [c for c in checks if c.name == name]
    return c


# ---------------------------------------------------------------------------------------
# host


def test_matching_node_is_all_ok(tmp_path):
    host = probe(make_node(tmp_path), run_npu_smi=False)
    host.shm_bytes = 16 << 30
    checks = doctor.run_host_checks(host, GOOD_ENV)
    statuses = {c.name: c.status for c in checks}
    assert statuses["driver"] == OK and statuses["firmware/driver pairing"] == OK
    assert statuses["devices"] == OK and statuses["/dev/shm"] == OK
    assert by_name(checks, "firmware/driver pairing").detail == (
        "driver 24.1.rc3 accepts firmware [7.0.0,7.5.99]: 7.5.0.1.129 inside; "
        "firmware 7.5.0.1.129 accepts driver 24.1.rc3")
    assert statuses["npu-smi"] == WARN and statuses["chip"] == WARN  # no npu-smi in this tree
    assert doctor.exit_code(checks) == 0


@pytest.mark.parametrize("make_smi, detail", [
    (lambda p: p.mkdir(parents=True), "npu-smi at /usr/local/bin/npu-smi is not an executable file"),
    (lambda p: write(p, "#!/bin/sh\necho x\n", 0o644), "npu-smi at /usr/local/bin/npu-smi is not an executable file"),
    (lambda p: write(p, "not a program at all", 0o755), "npu-smi info cannot run: Exec format error"),
    (lambda p: write(p, "#!/bin/sh\nexec yes\n", 0o755), f"npu-smi info printed more than {4 << 20} bytes; stopped"),
])
def test_an_npu_smi_that_cannot_answer_fails_the_check_naming_why(tmp_path, make_smi, detail):
    """Not "OK npu-smi ... NPU none": whatever sits at npu-smi's place and cannot answer is a failure."""
    make_node(tmp_path)
    make_smi(tmp_path / "usr/local/bin/npu-smi")
    check = by_name(doctor.run_host_checks(probe(tmp_path), GOOD_ENV), "npu-smi")
    assert (check.status, check.detail) == (FAIL, detail)
    if "cannot run" in detail or "not an executable" in detail:  # about this host's npu-smi, not an image's arch
        assert check.fix == "put the driver's npu-smi there (an executable file for this host), or mount it"


def test_mismatched_firmware_fails_with_the_fix(tmp_path):
    host = probe(make_node(tmp_path, firmware=FIRMWARE_7_7), run_npu_smi=False)
    c = by_name(doctor.run_host_checks(host, GOOD_ENV), "firmware/driver pairing")
    assert c.status == FAIL
    assert "7.7.0.1.231 outside" in c.detail and "accepts driver 24.1.rc3" in c.detail
    assert c.fix == explain.fix_for("firmware-driver-mismatch", host, driver_fw_range="[7.0.0,7.5.99]") + \
        " (driver 24.1.rc3 shipped with firmware 7.5.0.1.129)"
    assert "firmware first, then driver" in c.fix and "accepts firmware [7.0.0,7.5.99]" in c.fix


def test_fake_npu_compatibility_nok_fails(tmp_path):
    smi = {"info": TABLE_910B3, "info -t board -i 0": board("24.1.rc3", "7.5.0.1.129", "NOK")}
    host = probe(make_node(tmp_path, smi=smi))
    c = by_name(doctor.run_host_checks(host, GOOD_ENV), "firmware/driver pairing")
    assert c.status == FAIL and c.detail.startswith("npu-smi Compatibility NOK")
    assert "firmware first" in c.fix


def test_fake_npu_mismatched_node_end_to_end(tmp_path):
    smi = {"info": TABLE_910B3, "info -t board -i 0": board("24.1.rc3", "7.7.0.1.231", "NOK")}
    checks = doctor.run_doctor(root=make_node(tmp_path, firmware=FIRMWARE_7_7, smi=smi), environ=GOOD_ENV)
    assert by_name(checks, "firmware/driver pairing").status == FAIL
    assert by_name(checks, "chip").detail == "910b (Ascend910B3)"
    assert by_name(checks, "npu-smi").status == OK
    assert doctor.exit_code(checks) == 1
    text = doctor.format_checks(checks)
    assert "FAIL  firmware/driver pairing" in text and "fix: Install firmware and driver from one HDK release" in text


def test_fake_npu_dcmi_error_is_explained(tmp_path):
    from tests.support.node import fake_npu_smi
    make_node(tmp_path)
    fake_npu_smi(tmp_path, {"info": "dcmi model initialized failed, because the device is used. ret is -8020\n"},
                 exit_code=255)
    c = by_name(doctor.run_host_checks(probe(tmp_path), GOOD_ENV), "npu-smi")
    assert c.status == FAIL and c.fix == explain.explain(c.detail, probe(tmp_path))[0].fix
    assert "Stop the other container" in c.fix


@pytest.mark.parametrize("driver, firmware, drv_ranges, fw_ranges, status", [
    ("24.1.rc3", "7.5.0.1.129", [["7.0.0", "7.5.99"]], [["24.1", "24.1."]], OK),
    ("24.1.rc1", "7.3.0.1.231", [["7.0.0", "7.2.99"]], [], FAIL),        # the reported rc2.2 conflict
    ("25.0.rc1.1", "7.7.0.1.231", [["6.4.0", "6.4.99"], ["7.0.0", "7.7.99"]],
     [["23.0.0", "23.0.0."], ["24.0", "24.0."], ["24.1", "24.1."], ["25.0", "25.0."]], OK),
    ("25.3.rc1", "7.5.0.1.129", [["7.0.0", "8.9.9"]], [["24.1", "24.1."]], FAIL),  # firmware too old for it
    ("24.1.rc3", "7.5.0.1.129", [], [], OK),                          # ranges from the knowledge base
    ("26.1.0", "8.1.0.1.100", [], [], WARN),                          # nothing known to decide
])
def test_pairing_from_observed_pairs(driver, firmware, drv_ranges, fw_ranges, status):
    host = HostInfo(driver=driver, firmware=firmware, driver_fw_ranges=drv_ranges, firmware_drv_ranges=fw_ranges)
    assert doctor.check_pairing(host).status == status


def test_range_helpers():
    assert versions.firmware_in_ranges("7.5.0.1.129", [["7.0.0", "7.5.99"]]) is True
    assert versions.firmware_in_ranges("6.4.0.4.220", [["7.0.0", "7.5.99"]]) is False
    assert versions.firmware_in_ranges("garbage", [["7.0.0", "7.5.99"]]) is None
    assert versions.firmware_in_ranges("7.5.0.1.129", [["x", "y"]]) is None
    assert doctor.driver_in_ranges("23.0.0", [["23.0.0", "23.0.0."]]) is True
    assert doctor.driver_in_ranges("23.0.0.1", [["23.0.0", "23.0.0."]]) is True
    assert doctor.driver_in_ranges("23.0.3", [["23.0.0", "23.0.0."]]) is False
    assert doctor.driver_in_ranges("24.1.RC3", [["24.1", "24.1."]]) is True
    assert doctor.driver_in_ranges("24.1.rc3", [["24.1.rc1", "24.1.0"]]) is True
    assert doctor.driver_in_ranges("24.1.rc3", []) is None


def test_missing_driver_devices_and_small_shm(tmp_path):
    host = probe(make_node(tmp_path, driver=None, devices=0), run_npu_smi=False)
    host.shm_bytes = 64 << 20
    checks = doctor.run_host_checks(host, GOOD_ENV)
    assert by_name(checks, "driver").status == FAIL
    assert by_name(checks, "firmware/driver pairing").status == WARN
    dev = by_name(checks, "devices")
    assert dev.status == FAIL and "--device /dev/davinci_manager" in dev.fix
    shm = by_name(checks, "/dev/shm")
    assert shm.status == WARN and shm.detail.startswith("64 MiB") and "--shm-size" in shm.fix


def test_missing_control_devices_warn(tmp_path):
    make_node(tmp_path)
    (tmp_path / "dev/hisi_hdc").unlink()
    c = by_name(doctor.run_host_checks(probe(tmp_path, run_npu_smi=False), GOOD_ENV), "devices")
    assert c.status == WARN and c.fix == "pass --device /dev/hisi_hdc"


@pytest.mark.parametrize("env, name, status", [
    ({}, "HCCL_CONNECT_TIMEOUT", WARN),
    ({"HCCL_CONNECT_TIMEOUT": "1800"}, "HCCL_CONNECT_TIMEOUT", OK),
    ({"HCCL_CONNECT_TIMEOUT": "60"}, "HCCL_CONNECT_TIMEOUT", FAIL),
    ({"HCCL_CONNECT_TIMEOUT": "30m"}, "HCCL_CONNECT_TIMEOUT", FAIL),
    ({"HCCL_CONNECT_TIMEOUT": "9000"}, "HCCL_CONNECT_TIMEOUT", FAIL),
    ({}, "HCCL variables", OK),
    ({"HCCL_DETERMINISTIC": "true"}, "HCCL variables", WARN),
    ({"ASCEND_RT_VISIBLE_DEVICES": "0,1"}, "HCCL variables", OK),
    ({"ASCEND_RT_VISIBLE_DEVICES": "4,7"}, "HCCL variables", FAIL),
    ({}, "ASCEND_GLOBAL_LOG_LEVEL", OK),
    ({"ASCEND_GLOBAL_LOG_LEVEL": "0"}, "ASCEND_GLOBAL_LOG_LEVEL", WARN),
    ({"ASCEND_GLOBAL_LOG_LEVEL": "3"}, "ASCEND_GLOBAL_LOG_LEVEL", OK),
    ({"ASCEND_GLOBAL_LOG_LEVEL": "debug"}, "ASCEND_GLOBAL_LOG_LEVEL", WARN),
    ({}, "PYTORCH_NPU_ALLOC_CONF", WARN),
    ({"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}, "PYTORCH_NPU_ALLOC_CONF", OK),
])
def test_env_checks(env, name, status):
    host = HostInfo(devices=[0, 1, 2, 3])
    c = by_name(doctor.env_checks(env, host), name)
    assert c.status == status
    assert (c.fix == "") == (status == OK)


def test_visible_devices_fix_comes_from_the_explain_table():
    host = HostInfo(devices=[0, 1])
    c = by_name(doctor.env_checks({"ASCEND_RT_VISIBLE_DEVICES": "4,7"}, host), "HCCL variables")
    assert c.fix == explain.fix_for("no-valid-device", host)


def test_format_and_json():
    checks = [Check("driver", OK, "24.1.rc3"), Check("/dev/shm", WARN, "64 MiB", "--shm-size=16g")]
    text = doctor.format_checks(checks)
    assert text.splitlines() == ["OK    driver    24.1.rc3", "WARN  /dev/shm  64 MiB", "      fix: --shm-size=16g",
                                 "", "0 FAIL, 1 WARN, 1 OK"]
    assert json.loads(json.dumps(doctor.checks_to_dicts(checks)))[1]["fix"] == "--shm-size=16g"


# ---------------------------------------------------------------------------------------
# image: pure checks on labels + in-image facts


NPU_LABELS = {
    "io.ascend-build.cell": "cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64",
    "io.ascend-build.variant": "npu", "io.ascend-build.arch": "aarch64", "io.ascend-build.chip": "910b",
    "io.ascend-build.cann": "8.0.RC3", "io.ascend-build.torch-npu": "2.4.0", "io.ascend-build.torch": "2.4.0",
    "io.ascend-build.min-driver": "24.1.RC3", "io.ascend-build.min-firmware": "7.5.0.1.129",
    "io.ascend-build.validated": "true", "io.ascend-build.validated-tiers": "versions,libraries,import,device",
    "io.ascend-build.validated-device": "npu",
}
NPU_FACTS = {
    "python": "3.10.14", "executable": "/opt/venv/bin/python3", "prefix": "/opt/venv", "base_prefix": "/usr",
    "arch": "aarch64", "torch": "2.4.0", "torch_npu": "2.4.0",
    "cann": [{"path": "/usr/local/Ascend/ascend-toolkit/latest/version.cfg", "version": "8.0.RC3"}],
    "cann_looked": [], "manifest": True, "env": dict(GOOD_ENV),
}
HOST_910B = HostInfo(arch="aarch64", driver="24.1.rc3", firmware="7.5.0.1.129", chip="910b", soc="Ascend910B3")


def test_image_checks_all_ok():
    release = knowledge.load().releases.torch_npu("2.4.0")
    assert release and release.cann == "8.0.RC3"  # the fixture's own premise
    checks = doctor.image_checks(NPU_LABELS, NPU_FACTS, HOST_910B)
    bad = [c for c in checks if c.status != OK]
    assert bad == []
    names = [c.name for c in checks]
    for name in ("image: chip", "image: CANN", "image: driver vs CANN", "image: firmware",
                 "image: torch_npu vs CANN", "image: torch vs torch_npu", "image: Python env isolation",
                 "image: HCCL_CONNECT_TIMEOUT", "image: PYTORCH_NPU_ALLOC_CONF"):
        assert name in names


def test_image_needs_a_newer_driver():
    host = HostInfo(arch="aarch64", driver="23.0.3", firmware="7.5.0.1.129", chip="910b")
    c = by_name(doctor.image_checks(NPU_LABELS, NPU_FACTS, host), "image: driver vs CANN")
    assert c.status == FAIL and c.detail == "host driver 23.0.3 < 24.1.RC3 (CANN 8.0.RC3 needs it)"
    assert c.fix == explain.fix_for("driver-too-old", host, NPU_LABELS, image_min_driver="24.1.RC3",
                                    image_cann="8.0.RC3")
    assert "to at least 24.1.RC3" in c.fix and "host driver 23.0.3" in c.fix


def test_image_min_driver_from_the_knowledge_base_without_labels():
    facts = dict(NPU_FACTS, cann=[{"path": "x", "version": "8.0.RC3"}])
    c = by_name(doctor.image_checks({}, facts, HostInfo(driver="23.0.3")), "image: driver vs CANN")
    driver = knowledge.load().drivers.min_driver("8.0.RC3")
    assert driver and c.status == FAIL and driver in c.detail


def test_image_torch_npu_cann_mismatch_uses_the_explain_fix():
    # torch_npu 2.6.0.post5 (PTA 7.3.0) on CANN 8.0.RC2: the tables of 7.3.0 leave 8.0.RC2 out
    facts = dict(NPU_FACTS, torch_npu="2.6.0.post5", torch="2.6.0", cann=[{"path": "x", "version": "8.0.RC2"}])
    labels = {k: v for k, v in NPU_LABELS.items() if k != "io.ascend-build.cann"}
    c = by_name(doctor.image_checks(labels, facts, HOST_910B), "image: torch_npu vs CANN")
    assert c.status == FAIL and "pairs with CANN 8.5.0, the image has 8.0.RC2" in c.detail
    assert "a published table lists CANN 8.5.0, 8.3.RC1, 8.2.RC1, 8.1.RC1, 8.0.0 for its PTA 7.3.0" in c.detail
    assert c.fix == explain.fix_for("torch-npu-cann-mismatch", HOST_910B, labels, image_torch_npu="2.6.0.post5",
                                    image_cann="8.0.RC2")


def test_image_torch_npu_inside_a_published_compatibility_window_is_ok_as_validate_accepts_it():
    # torch_npu 2.5.1 (PTA 7.0.0, paired with 8.1.RC1) on CANN 8.0.RC3: TorchNPU 7.3.1's notes list it
    facts = dict(NPU_FACTS, torch_npu="2.5.1", torch="2.5.1", cann=[{"path": "x", "version": "8.0.RC3"}])
    c = by_name(doctor.image_checks({}, facts, HOST_910B), "image: torch_npu vs CANN")
    assert c.status == OK and "a published table of its PTA 7.0.0 lists it (Ascend/pytorch@v7.3.1" in c.detail, c
    outside = dict(facts, cann=[{"path": "x", "version": "8.5.0"}])
    assert by_name(doctor.image_checks({}, outside, HOST_910B), "image: torch_npu vs CANN").status == FAIL


# (torch_npu, the image's CANN): doctor's status and validate's cann-* rule for the same pair
FITS = [("2.4.0", "8.0.RC3", OK, []),                             # the published pair
        ("2.5.1", "8.0.RC3", OK, ["cann-window"]),                # TorchNPU 7.3.x's notes list it for PTA 7.0.0
        ("2.6.0.post3", "8.3.RC2", WARN, ["cann-adjacent"]),      # a later 8.3 than its 8.3.RC1
        ("2.10.0", "9.1.0-beta.1", WARN, ["cann-downstream"]),    # vllm-ascend's 310P image ships it
        ("2.4.0", "8.0.RC2", WARN, ["cann-uncovered"]),           # no table covers PTA 6.0.rc3
        ("2.9.0", "8.0.RC2", FAIL, ["cann-mismatch"])]            # the tables of PTA 7.3.0 leave it out


@pytest.mark.parametrize("torch_npu, cann, status, rules", FITS, ids=[f"{n}-on-{c}" for n, c, _, _ in FITS])
def test_doctor_refuses_exactly_the_pairs_validate_refuses(torch_npu, cann, status, rules, tmp_path):
    """What validate only warns of (adjacent release, downstream pair, no table) doctor warns of too; what
    validate refuses doctor fails: one decision (knowledge's cann_fit) for both."""
    from builder.images import checks, matrix
    from tests.support.matrix import write_cells

    path, _ = write_cells(tmp_path, {"os": "ubuntu22.04", "arch": "aarch64", "chip": "910b", "cann": cann,
                                     "python": "3.10", "torch_npu": torch_npu, "env": "conda"})
    found = sorted({f.rule for f in checks.check(matrix.load(path).cells) if f.rule.startswith("cann-")})
    assert found == rules
    facts = dict(NPU_FACTS, torch_npu=torch_npu, torch=torch_npu, cann=[{"path": "x", "version": cann}])
    c = by_name(doctor.image_checks({}, facts, HOST_910B), "image: torch_npu vs CANN")
    assert c.status == status, c
    assert (c.status == FAIL) == any(f == "cann-mismatch" for f in found)


def test_image_label_and_files_disagree_on_cann():
    facts = dict(NPU_FACTS, cann=[{"path": "x", "version": "8.0.RC2"}])
    assert by_name(doctor.image_checks(NPU_LABELS, facts, HOST_910B), "image: CANN").status == FAIL


def test_image_wrong_torch_python_and_unpublished_torch_npu():
    checks = doctor.image_checks(NPU_LABELS, dict(NPU_FACTS, torch="2.3.1", python="3.12.1"), HOST_910B)
    assert by_name(checks, "image: torch vs torch_npu").status == FAIL
    assert by_name(checks, "image: Python vs torch_npu").status == FAIL
    c = by_name(doctor.image_checks({}, dict(NPU_FACTS, torch_npu="2.1.0.post5", torch="2.1.0"), HOST_910B),
                "image: torch_npu vs CANN")
    assert c.status == FAIL and "2.1.0.post5" in c.detail


def test_image_arch_and_chip_mismatch():
    host = HostInfo(arch="x86_64", driver="24.1.rc3", chip="310p")
    assert by_name(doctor.image_checks(NPU_LABELS, NPU_FACTS, host), "image: chip").status == FAIL
    arch = by_name(doctor.launch_checks(host, doctor.Seen("img", "local", NPU_LABELS, "aarch64")), "image: arch")
    assert arch.status == FAIL and arch.fix == explain.fix_for("platform-mismatch", host, NPU_LABELS,
                                                               image_arch="aarch64")


# ---------------------------------------------------------------------------------------
# launch checks: the one function `run` refuses with and `doctor` reports


def test_launch_checks_refuse_another_arch_a_missing_image_and_an_index_without_this_arch():
    host = HostInfo(root="/nonexistent", arch="aarch64")
    other = doctor.launch_checks(host, doctor.Seen("img:1", "local", {}, "x86_64"))
    assert [(c.name, c.status) for c in other] == [("driver mounts", WARN), ("image: exists", OK), ("image: arch", FAIL)]
    assert by_name(other, "image: arch").detail == "image x86_64, host aarch64"
    missing = by_name(doctor.launch_checks(host, doctor.Seen("img:nope")), "image: exists")
    assert missing.status == FAIL and missing.detail == "img:nope: no such image in the Docker Engine"
    remote = by_name(doctor.launch_checks(host, doctor.Seen("h:5000/r:nope")), "image: exists")
    assert remote.detail == "h:5000/r:nope: no such image in the Docker Engine nor in its registry"
    index = by_name(doctor.launch_checks(host, doctor.Seen("h:5000/r:t", "registry h:5000", {}, "none of: amd64")),
                    "image: arch")
    assert index.status == FAIL and "none of: amd64" in index.detail
    same = doctor.launch_checks(host, doctor.Seen("img:1", "local", {}, "arm64"))
    assert by_name(same, "image: arch").status == OK


def test_driver_without_lib64_fails_doctor_and_the_launch_checks(tmp_path):
    node = make_node(tmp_path / "node", lib64=False)
    checks = doctor.run_doctor(root=node, environ=GOOD_ENV, run_npu_smi=False)
    mounts = by_name(checks, "driver mounts")
    assert mounts.status == FAIL and "/usr/local/Ascend/driver/lib64" in mounts.detail
    assert "reinstall the Ascend HDK driver" in mounts.fix
    assert doctor.exit_code(checks) == 1
    whole = by_name(doctor.run_doctor(root=make_node(tmp_path / "whole"), environ=GOOD_ENV, run_npu_smi=False),
                    "driver mounts")
    assert whole.status == OK


def test_a_node_without_any_driver_only_warns_about_mounts(tmp_path):
    """A CPU machine runs CPU twins: nothing to mount is no reason to refuse."""
    host = probe(make_node(tmp_path, driver=None, devices=0), run_npu_smi=False)
    assert doctor.mounts_check(host).status == WARN


def test_image_without_isolation_or_torch_npu():
    facts = dict(NPU_FACTS, prefix="/usr", base_prefix="/usr", torch_npu=None, cann=[], env={})
    checks = doctor.image_checks({}, facts, HOST_910B)
    assert by_name(checks, "image: Python env isolation").status == WARN
    assert by_name(checks, "image: torch_npu vs CANN").status == WARN
    assert by_name(checks, "image: built by ascend-build").status == WARN
    assert by_name(checks, "image: HCCL_CONNECT_TIMEOUT").status == WARN
    conda = dict(facts, env={"CONDA_DEFAULT_ENV": "ascend_train"})
    assert by_name(doctor.image_checks({}, conda, HOST_910B), "image: Python env isolation").status == OK
    npu_missing = by_name(doctor.image_checks(NPU_LABELS, facts, HOST_910B), "image: torch_npu vs CANN")
    assert npu_missing.status == FAIL and npu_missing.fix == explain.fix_for(
        "torch-npu-not-importable", HOST_910B, NPU_LABELS)


def test_unvalidated_candidate_warns():
    labels = dict(NPU_LABELS, **{"io.ascend-build.validated": ""})
    c = by_name(doctor.image_checks(labels, NPU_FACTS, HOST_910B), "image: validated")
    assert c.status == WARN and "promote" in c.fix


# ---------------------------------------------------------------------------------------
# image: the probe program


def test_probe_program_runs_with_this_python():
    proc = subprocess.run([sys.executable, "-c", doctor.probe_program()], capture_output=True, text=True,
                          env={"HCCL_CONNECT_TIMEOUT": "1800", "PATH": "/usr/bin:/bin"}, timeout=60)
    facts = doctor.parse_probe(proc.stdout)
    assert proc.returncode == 0 and facts is not None, proc.stderr
    assert facts["python"].count(".") == 2 and facts["env"] == {"HCCL_CONNECT_TIMEOUT": "1800"}
    assert isinstance(facts["cann"], list) and facts["cann_looked"]
    assert facts["prefix"] == sys.prefix


class FakeEngine:
    """labels() and run() as builder.engine.Engine has them; run executes the program locally."""

    def __init__(self, labels: Dict[str, str], fail: str = ""):
        self._labels, self.fail = labels, fail
        self.calls: List[tuple] = []

    def labels(self, ref):
        return dict(self._labels)

    def run(self, image, command, **kw):
        self.calls.append((image, command, kw))
        if self.fail:
            return RunResult(1, "", self.fail, 0.1)
        proc = subprocess.run([sys.executable, *command[1:]], capture_output=True, text=True, timeout=60)
        return RunResult(proc.returncode, proc.stdout, proc.stderr, 0.1)


def test_doctor_image_with_a_fake_engine():
    engine = FakeEngine({})
    checks = doctor.doctor_image(engine, "some/image:tag", HOST_910B)
    assert engine.calls[0][1][:2] == ["python3", "-c"]
    assert "image: probe" not in [c.name for c in checks]
    assert by_name(checks, "image: built by ascend-build").status == WARN


def test_doctor_image_failing_probe_is_explained():
    engine = FakeEngine(NPU_LABELS, fail="ImportError: libascend_hal.so: cannot open shared object file")
    c = by_name(doctor.doctor_image(engine, "img", HOST_910B), "image: probe")
    assert c.status == FAIL and c.fix == explain.explain(engine.fail, HOST_910B, NPU_LABELS)[0].fix


@pytest.mark.engine
def test_doctor_image_without_python_is_one_clear_failure(engine, base_image):
    """local/debian:12 is a debootstrap minbase: no python3. Doctor says so, once, and still checks labels."""
    checks = doctor.doctor_image(engine, base_image, HOST_910B)
    probe_check = by_name(checks, "image: probe")
    assert probe_check.status == FAIL and "python3" in probe_check.detail and "python3" in probe_check.fix
    assert by_name(checks, "image: built by ascend-build").status == WARN
    assert [c.name for c in checks if c.status == FAIL] == ["image: probe"]


@pytest.mark.parametrize("version, shown", [("9" * 5000 + ".1.rc3", "Version='" + "9" * 37 + "...'"),
                                            ("24.1.rc²", "Version='24.1.rc²'")])
def test_a_driver_version_info_that_holds_no_version_fails_saying_so(tmp_path, version, shown):
    make_node(tmp_path, driver=DRIVER_INFO.replace("Version=24.1.rc3", f"Version={version}"))
    check = by_name(doctor.run_host_checks(probe(tmp_path, run_npu_smi=False), GOOD_ENV), "driver")
    assert (check.status, check.detail) == (
        FAIL, f"/usr/local/Ascend/driver/version.info: {shown} is not a valid driver version")


def test_probe_output_nested_past_any_need_is_no_facts():
    assert doctor.parse_probe(doctor.MARK + "[" * 100000 + "]" * 100000 + "\n") is None
    assert doctor.parse_probe(doctor.MARK + '{"a": ' + "[" * 100 + "]" * 100 + "}\n") is None


@pytest.mark.parametrize("value", ["9" * 5000, "\u00b2", "\u0663\u0660\u0660"])  # 5000 digits, '²', Arabic-Indic 300
def test_an_hccl_timeout_of_any_length_or_script_fails_the_check_without_error(value):
    c = by_name(doctor.env_checks(dict(GOOD_ENV, HCCL_CONNECT_TIMEOUT=value)), "HCCL_CONNECT_TIMEOUT")
    assert c.status == FAIL and "is not an integer in [120, 7200] seconds" in c.detail


@pytest.mark.parametrize("value", ["9" * 5000, "\u00b2", "0,\u0663"])
def test_visible_devices_of_any_length_or_script_fail_the_check_without_error(value):
    host = HostInfo(devices=[0, 1])
    c = by_name(doctor.env_checks(dict(GOOD_ENV, ASCEND_RT_VISIBLE_DEVICES=value), host), "HCCL variables")
    assert c.status == FAIL and "ASCEND_RT_VISIBLE_DEVICES names" in c.detail


@pytest.mark.parametrize("table", ["", "garbage\n", "| npu-smi 24.1.rc3   Version: 24.1.rc3 |\n"])
def test_fake_npu_smi_that_answers_but_lists_no_npu_fails_where_devices_exist(tmp_path, table):
    """Not "OK ... NPU none": npu-smi exits 0 listing nothing while /dev/davinci0..7 are there."""
    from tests.support.node import fake_npu_smi
    make_node(tmp_path)
    fake_npu_smi(tmp_path, {"info": table, "info -t board -i 0": table, "info -t board -i 0 -c 0": table})
    c = by_name(doctor.run_host_checks(probe(tmp_path), GOOD_ENV), "npu-smi")
    assert c.status == FAIL
    assert c.detail == "/usr/local/bin/npu-smi: npu-smi info listed no NPU, though /dev/davinci0..7 (8) exist"
    assert "npu-smi info" in c.fix


def test_fake_npu_smi_listing_no_npu_on_a_node_without_devices_warns(tmp_path):
    from tests.support.node import fake_npu_smi
    make_node(tmp_path, devices=0)
    fake_npu_smi(tmp_path, {"info": "", "info -t board -i 0": "", "info -t board -i 0 -c 0": ""})
    c = by_name(doctor.run_host_checks(probe(tmp_path), GOOD_ENV), "npu-smi")
    assert c.status == WARN and c.detail == "/usr/local/bin/npu-smi: npu-smi info listed no NPU"
