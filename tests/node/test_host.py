"""builder.node.host against fixture nodes built from the real file samples.

Every sample in ascend-compat.yaml ``version_files`` is read from the data file itself
(so the fixtures cannot drift from it); the npu-smi outputs below are public dumps
(trimmed). Tests named ``fake_npu`` put a shell script printing those dumps at
``usr/local/bin/npu-smi`` of the fixture root: they mock the NPU hardware.

The fixture nodes and samples live in helpers_node.py.
"""

from __future__ import annotations

import json
import os
import platform
import re
import stat
from pathlib import Path

import pytest

from builder.node import host as hostmod
from builder import knowledge
from builder.node.host import format_host, probe

from tests.support.node import (COMPAT, SAMPLES, DRIVER_INFO, INSTALL_INFO, VERSION_CFG, TOOLKIT_INSTALL, SUBPACKAGE_INFO, BOARD_25_5_2, SUMMARY_HEADER, TABLE_910B3, TABLE_A3, CHIP_A2, CHIP_A3, TABLE_310P3, TABLE_950, BOARD_950, TABLE_910PROB, board, write, fake_npu_smi, make_node, SMI_910B3)
from tests.support.promptly import promptly



# ---------------------------------------------------------------------------------------
# files


def test_samples_are_all_in_the_data():
    assert set(SAMPLES) == {"cann_toolkit.cfg", "cann_toolkit.install", "cann_subpackage", "npu_driver",
                            "npu_firmware", "install_registry", "npu_smi_board", "npu_smi_summary"}


def test_full_node_from_the_real_samples(tmp_path):
    info = probe(make_node(tmp_path), run_npu_smi=False)
    assert info.driver == "24.1.rc3" and info.driver_file == "/usr/local/Ascend/driver/version.info"
    assert info.driver_fw_ranges == [["7.0.0", "7.5.99"]]
    assert info.firmware == "7.5.0.1.129"
    assert info.firmware_drv_ranges == [["23.0.0", "23.0.0."], ["24.0", "24.0."], ["24.1", "24.1."]]
    assert info.devices == list(range(8))
    assert info.cann == "8.0.0" and info.cann_file and info.cann_file.endswith("latest/version.cfg")
    assert info.arch == "aarch64"
    assert info.shm_bytes and info.shm_bytes > 0
    assert info.problems == []
    json.dumps(info.to_dict())  # --json must serialise


def test_install_path_param_moves_the_driver_root(tmp_path):
    install = INSTALL_INFO.replace("Driver_Install_Path_Param=/usr/local/Ascend",
                                   "Driver_Install_Path_Param=/opt/Ascend")
    make_node(tmp_path, install=install, driver=None)
    write(tmp_path / "opt/Ascend/driver/version.info", DRIVER_INFO.replace("24.1.rc3", "25.0.rc1.1"))
    info = probe(tmp_path, run_npu_smi=False)
    assert info.driver == "25.0.rc1.1" and info.driver_file == "/opt/Ascend/driver/version.info"
    assert info.firmware_file == "/usr/local/Ascend/firmware/version.info"


def test_missing_everything_is_unknown_never_an_exception(tmp_path):
    info = probe(tmp_path, run_npu_smi=True)
    assert (info.driver, info.firmware, info.cann, info.arch, info.chip, info.shm_bytes) == (None,) * 6
    assert info.devices == [] and info.npu_smi is None
    text = " | ".join(info.problems)
    for needle in ("no driver version.info", "no firmware version.info", "no /dev/davinciN",
                   "arch unknown", "/dev/shm not found", "npu-smi not found"):
        assert needle in text
    assert "unknown" in format_host(info)


@pytest.mark.parametrize("content, note", [
    (b"\x00\x01\x02\xff\xfe garbage", "not a text file"),
    ("hello world\nno keys here\n", "no Version= line"),
    ("Version=%%%not-a-version\n", "is not a valid driver version"),
    ("Version=\n", "no Version= line"),
    ("", "no Version= line"),
])
def test_garbage_driver_file(tmp_path, content, note):
    make_node(tmp_path, driver=None)
    write(tmp_path / "usr/local/Ascend/driver/version.info", content)
    info = probe(tmp_path, run_npu_smi=False)
    assert info.driver is None
    assert any(note in p for p in info.problems), info.problems
    assert info.firmware == "7.5.0.1.129"  # one bad file spoils only its own field


def test_garbage_firmware_and_cann(tmp_path):
    make_node(tmp_path, firmware="Version=7.5.0.1\n", cann_cfg="toolkit_running_version=[garbage]\n")
    info = probe(tmp_path, run_npu_smi=False)
    assert info.firmware is None and info.cann is None
    assert any("not a valid firmware version" in p for p in info.problems)
    assert any("no valid toolkit_running_version" in p for p in info.problems)


def test_unreadable_file_chmod_000(tmp_path):
    make_node(tmp_path)
    path = write(tmp_path / "usr/local/Ascend/driver/version.info", DRIVER_INFO, 0o000)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as root: chmod 000 does not stop root from reading "
                        "(the unreadable branch is covered by test_a_file_where_a_folder_goes_cannot_be_read)")
        info = probe(tmp_path, run_npu_smi=False)
        assert info.driver is None and any("cannot read" in p for p in info.problems)
    finally:
        path.chmod(0o644)


def test_a_file_where_a_folder_goes_cannot_be_read(tmp_path):
    """open() fails with an OSError (not a directory) even for root: the branch a chmod 000 file takes."""
    make_node(tmp_path, install=None)
    write(tmp_path / "etc", "a file, not the folder /etc")
    info = probe(tmp_path, run_npu_smi=False)
    assert "cannot read /etc/ascend_install.info: Not a directory" in info.problems


def test_unreadable_file_is_a_directory(tmp_path):
    """A directory where a file goes is refused like a FIFO: no regular file, nothing read."""
    make_node(tmp_path, driver=None)
    (tmp_path / "usr/local/Ascend/driver/version.info").mkdir(parents=True)
    info = probe(tmp_path, run_npu_smi=False)
    assert info.driver is None
    assert "/usr/local/Ascend/driver/version.info is not a regular file: not read" in info.problems


@pytest.mark.parametrize("observed, cann", [
    ("[7.3.0.1.231:8.0.RC2]", "8.0.RC2"), ("[7.5.0.1.129:8.0.RC3]", "8.0.RC3"),
    ("[7.2.T11.0.B218:8.0.RC2.alpha001]", "8.0.RC2.alpha001"), ("[1.84.15.1.310:6.0.1]", "6.0.1"),
    ("[7.6.T13.0.B094:8.0.T63]", "8.0.T63"),
])
def test_every_observed_version_cfg(tmp_path, observed, cann):
    assert observed in COMPAT["version_files"][0]["other_observed"]
    make_node(tmp_path, cann_cfg=VERSION_CFG.replace("[7.6.0.1.220:8.0.0]", observed))
    assert probe(tmp_path, run_npu_smi=False).cann == cann


def test_toolkit_install_info_of_cann_8_5_layout(tmp_path):
    """CANN >= 8.5: no version.cfg, <home>/<arch>-linux/ascend_toolkit_install.info; arch from it."""
    make_node(tmp_path, cann_cfg=None, arch=None)
    write(tmp_path / "usr/local/Ascend/cann-8.5.0/aarch64-linux/ascend_toolkit_install.info", TOOLKIT_INSTALL)
    info = probe(tmp_path, run_npu_smi=False)
    assert info.cann == "8.5.0" and info.cann_file == "/usr/local/Ascend/cann-8.5.0/aarch64-linux/ascend_toolkit_install.info"
    assert info.arch == "aarch64"  # no proc/sys/kernel/arch: taken from the install info


@pytest.mark.parametrize("line", COMPAT["version_files"][1]["other_observed"])
def test_every_observed_toolkit_install_info(tmp_path, line):
    make_node(tmp_path, cann_cfg=None)
    text = "\n".join(line.split(" ")) + "\n"
    found = re.search(r"version=(\S+)", line)
    assert found, line
    want = found.group(1)
    write(tmp_path / "usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info", text)
    assert probe(tmp_path, run_npu_smi=False).cann == want


def test_subpackage_version_info_is_the_last_resort(tmp_path):
    make_node(tmp_path, cann_cfg=None)
    write(tmp_path / "usr/local/Ascend/ascend-toolkit/latest/runtime/version.info", SUBPACKAGE_INFO)
    assert probe(tmp_path, run_npu_smi=False).cann == "8.2.RC1"


def test_ascend_home_path_from_the_environment_wins(tmp_path):
    make_node(tmp_path)
    write(tmp_path / "opt/cann/version.cfg", VERSION_CFG.replace("8.0.0]", "8.0.RC3]"))
    info = probe(tmp_path, run_npu_smi=False, environ={"ASCEND_HOME_PATH": "/opt/cann"})
    assert info.cann == "8.0.RC3"


def test_arch_of_the_real_root_is_this_machine():
    info = probe(Path("/"), run_npu_smi=False)
    assert info.arch == hostmod.normalize_arch(platform.machine())


def test_arch_aliases_and_unknown(tmp_path):
    make_node(tmp_path, arch="arm64")
    assert probe(tmp_path, run_npu_smi=False).arch == "aarch64"


def test_format_host_on_a_fixture_node(tmp_path):
    text = format_host(probe(make_node(tmp_path), run_npu_smi=False))
    assert "driver     24.1.rc3  /usr/local/Ascend/driver/version.info  accepts firmware 7.0.0..7.5.99" in text
    assert "accepts drivers 23.0.0*, 24.0*, 24.1*" in text
    assert "/dev/davinci0..7 (8)" in text and "CANN       8.0.0" in text
    assert "problems:" not in text


# ---------------------------------------------------------------------------------------
# npu-smi parsing and chips


@pytest.mark.parametrize("table, driver, rows", [
    (TABLE_910B3, "24.1.rc3", [(0, "910B3"), (1, "910B3")]),
    (TABLE_A3, "24.1.rc3.7", [(0, "Ascend910")]),
    (TABLE_310P3, "23.0.rc3", [(0, "310P3"), (64, "310P3")]),
    (TABLE_950, "25.7.rc1.6", [(0, "Ascend950PR")]),
    (TABLE_910PROB, "24.1.0", [(0, "910ProB")]),
    (SUMMARY_HEADER, "23.0.rc2.3", []),
    ("dcmi module initialize failed. ret is -8005\n", None, []),
])
def test_parse_smi_table(table, driver, rows):
    assert hostmod.parse_smi_table(table) == (driver, rows)


def test_parse_board_sample():
    b = hostmod.parse_board(BOARD_25_5_2)
    assert (b["Software Version"], b["Firmware Version"], b["Compatibility"]) == ("25.5.2", "7.8.0.7.220", "OK")


@pytest.mark.parametrize("board_text, soc", [
    (CHIP_A2, "Ascend910B4"), (CHIP_A3, "Ascend910_9392"), (BOARD_950, "Ascend950PR"), (BOARD_25_5_2, None),
])
def test_soc_from_board(board_text, soc):
    assert hostmod.soc_from_board(hostmod.parse_board(board_text)) == soc


@pytest.mark.parametrize("soc, chip", [
    ("Ascend910B3", "910b"), ("Ascend910_9391", "a3"), ("Ascend310P3", "310p"), ("Ascend910A", "910"),
    ("Ascend910ProB", "910"), ("Ascend950", "950"), ("Ascend950PR", "950"), ("Ascend910", None),
    ("Ascend310B1", None), (None, None),
])
def test_chip_of_soc(soc, chip):
    assert hostmod.chip_of_soc(soc) == chip


def test_every_soc_name_in_the_data_maps_to_its_family():
    for family in COMPAT["chips"]["families"]:
        if family["id"] not in knowledge.CHIPS:
            continue
        for name in family["soc_names"]:
            soc = name.split(" (")[0]
            assert hostmod.chip_of_soc(soc) == family["id"], soc


# ---------------------------------------------------------------------------------------
# fake npu-smi (mocked hardware)


def test_fake_npu_910b3_node(tmp_path):
    info = probe(make_node(tmp_path, smi=SMI_910B3))
    assert info.npu_smi == "/usr/local/bin/npu-smi"
    assert info.npu_ids == [0, 1] and info.soc == "Ascend910B3" and info.chip == "910b"
    assert info.compatibility == "OK" and info.smi_driver == "24.1.rc3" and info.smi_firmware == "7.5.0.1.129"
    assert info.problems == []
    assert "chip       910b (Ascend910B3)" in format_host(info)


def test_fake_npu_a3_needs_the_chip_query(tmp_path):
    smi = {"info": TABLE_A3, "info -t board -i 0": board("24.1.rc3", "7.5.0.1.129"),
           "info -t board -i 0 -c 0": CHIP_A3}
    info = probe(make_node(tmp_path, smi=smi))
    assert (info.soc, info.chip) == ("Ascend910_9392", "a3")
    assert info.problems == []


def test_fake_npu_a3_without_chip_query_stays_unknown(tmp_path):
    smi = {"info": TABLE_A3, "info -t board -i 0": board("24.1.rc3", "7.5.0.1.129")}
    info = probe(make_node(tmp_path, smi=smi))
    assert info.soc == "Ascend910" and info.chip is None
    assert any("only 'Ascend910'" in p for p in info.problems)


def test_fake_npu_310p3_first_npu_id_is_used(tmp_path):
    smi = {"info": TABLE_310P3, "info -t board -i 0": board("24.1.rc3", "7.5.0.1.129")}
    info = probe(make_node(tmp_path, smi=smi))
    assert info.npu_ids == [0, 64] and info.chip == "310p"


def test_fake_npu_950_board_names_the_chip(tmp_path):
    smi = {"info": TABLE_950, "info -t board -i 0": BOARD_950}
    driver = DRIVER_INFO.replace("24.1.rc3", "25.7.rc1.6")
    info = probe(make_node(tmp_path, smi=smi, driver=driver, firmware=None))
    assert (info.soc, info.chip, info.compatibility) == ("Ascend950PR", "950", "OK")
    assert info.firmware == "9.0.0.105.229"  # firmware version.info missing: taken from npu-smi, with a note
    assert any("taken from npu-smi" in p for p in info.problems)


def test_fake_npu_disagreeing_driver_is_noted(tmp_path):
    smi = {"info": TABLE_910B3, "info -t board -i 0": BOARD_25_5_2}
    info = probe(make_node(tmp_path, smi=smi))
    assert info.driver == "24.1.rc3"  # the file wins; the disagreement is reported
    assert any("npu-smi says 25.5.2" in p for p in info.problems)


def test_fake_npu_dcmi_failure(tmp_path):
    make_node(tmp_path)
    fake_npu_smi(tmp_path, {"info": "dcmi module initialize failed. ret is -8005\n",
                            "info -t board -i 0": "dcmi module initialize failed. ret is -8005\n"}, exit_code=255)
    info = probe(tmp_path)
    assert info.chip is None and info.compatibility is None
    assert any(p.startswith("npu-smi info failed (exit 255): dcmi module initialize failed") for p in info.problems)


def test_fake_npu_hangs_and_times_out(tmp_path, monkeypatch):
    monkeypatch.setattr(hostmod, "NPU_SMI_TIMEOUT", 0.3)
    make_node(tmp_path)
    fake_npu_smi(tmp_path, SMI_910B3, sleep=5)
    info = probe(tmp_path)
    assert info.chip is None
    assert [p for p in info.problems if "did not answer" in p] == ["npu-smi info did not answer within 0.3 s"]


def test_fake_npu_in_sbin_not_executable_bin(tmp_path):
    make_node(tmp_path, smi=SMI_910B3)
    (tmp_path / "usr/local/sbin").mkdir(parents=True)
    (tmp_path / "usr/local/bin/npu-smi").rename(tmp_path / "usr/local/sbin/npu-smi")
    write(tmp_path / "usr/local/bin/npu-smi", "not a program", stat.S_IRUSR | stat.S_IWUSR)
    info = probe(tmp_path)
    assert info.npu_smi == "/usr/local/sbin/npu-smi" and info.chip == "910b"


def _script_smi(root, body: str):
    path = root / "usr/local/bin/npu-smi"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def test_fake_npu_smi_printing_forever_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(hostmod, "NPU_SMI_MAX_BYTES", 1 << 20)
    make_node(tmp_path)
    _script_smi(tmp_path, "exec yes 'NPU     Name      | Health'\n")
    info = probe(tmp_path)
    assert info.chip is None
    assert f"npu-smi info printed more than {1 << 20} bytes; stopped" in info.problems


def test_fake_npu_smi_leaving_a_child_holding_the_pipe_stops_at_the_timeout(tmp_path, monkeypatch):
    import time
    monkeypatch.setattr(hostmod, "NPU_SMI_TIMEOUT", 1.0)
    make_node(tmp_path)
    _script_smi(tmp_path, "sleep 60 &\necho '| npu-smi 24.1.rc3   Version: 24.1.rc3 |'\nexit 0\n")
    started = time.monotonic()
    info = probe(tmp_path)
    assert "npu-smi info did not answer within 1 s" in info.problems
    assert time.monotonic() - started < 20  # one timeout, not one per npu-smi call or the child's 60 s


# --- a hostile root: nothing outside it is read, nothing blocks ---------------------------------


def test_a_fifo_where_a_host_file_goes_is_refused_not_waited_on(tmp_path):
    make_node(tmp_path, install=None)
    (tmp_path / "etc").mkdir(exist_ok=True)
    os.mkfifo(tmp_path / "etc/ascend_install.info")
    (tmp_path / "proc/sys/kernel/arch").unlink()
    os.mkfifo(tmp_path / "proc/sys/kernel/arch")
    info, _ = promptly(lambda: probe(tmp_path, run_npu_smi=False), tmp_path / "etc/ascend_install.info")  # a plain open() would block
    assert "/etc/ascend_install.info is not a regular file: not read" in info.problems
    assert info.driver == "24.1.rc3"  # the rest is still read


def test_an_install_path_climbing_out_of_root_stays_inside_it(tmp_path):
    root = tmp_path / "root"
    make_node(root, install="Driver_Install_Path_Param=/../..\n", driver=None)
    write(tmp_path / "driver/version.info", "Version=99.9.rc9\n")  # outside --root: must not be read
    write(root / "driver/version.info", "Version=24.1.rc2\n")       # /../.. inside the root is the root
    info = probe(root, run_npu_smi=False)
    assert info.driver == "24.1.rc2" and info.driver_file == "/driver/version.info"


def test_a_symlink_leading_out_of_root_is_not_followed(tmp_path):
    root = tmp_path / "root"
    make_node(root, driver=None)
    write(tmp_path / "elsewhere/version.info", "Version=99.9.rc9\n")
    (root / "usr/local/Ascend/driver").mkdir(parents=True, exist_ok=True)
    (root / "usr/local/Ascend/driver/version.info").symlink_to(tmp_path / "elsewhere/version.info")
    info = probe(root, run_npu_smi=False)
    assert info.driver is None
    assert f"/usr/local/Ascend/driver/version.info leads out of {root} (a symlink): not read" in info.problems


# --- numbers of any length: skipped or refused, never an int() error ------------------------------

HUGE = "9" * 5000  # Python refuses int() of more than 4300 digits


def test_parse_smi_table_skips_an_npu_id_of_any_length():
    table = TABLE_910B3.replace("| 1     910B3 ", f"| {HUGE}     910B3 ")
    assert hostmod.parse_smi_table(table)[1] == [(0, "910B3")]
    assert hostmod.parse_smi_table(TABLE_950.replace("| 0      | Ascend950PR", f"| {HUGE} | Ascend950PR"))[1] == []


def test_fake_npu_smi_printing_absurdly_long_numbers_is_read_without_error(tmp_path):
    from tests.support.matrix import run_cli
    make_node(tmp_path, smi={"info": TABLE_910B3.replace("| 0     910B3 ", f"| {HUGE}     910B3 "),
                             "info -t board -i 1": board("24.1.rc3", "7.5.0.1.129")})
    write(tmp_path / f"dev/davinci{HUGE[:200]}", "")  # a device name with too many digits is no device
    info = probe(tmp_path)
    assert info.npu_ids == [1] and info.chip == "910b" and info.devices == list(range(8))
    out = run_cli("host", "--root", tmp_path)
    assert out.returncode == 0 and "Traceback" not in out.stderr


def test_an_npu_smi_that_is_a_symlink_out_of_root_is_not_run(tmp_path):
    root = tmp_path / "root"
    make_node(root)
    ran = tmp_path / "ran"
    outside = write(tmp_path / "elsewhere/npu-smi", f"#!/bin/sh\ntouch {ran}\ncat <<'EOF'\n{TABLE_910B3}EOF\n", 0o755)
    (root / "usr/local/bin").mkdir(parents=True, exist_ok=True)
    (root / "usr/local/bin/npu-smi").symlink_to(outside)
    info = probe(root)
    assert not ran.exists()  # nothing outside --root ran
    assert info.chip is None and info.npu_ids == []
    assert f"npu-smi at /usr/local/bin/npu-smi leads out of {root} (a symlink): not run" in info.problems
    assert info.smi_error == f"npu-smi at /usr/local/bin/npu-smi leads out of {root} (a symlink): not run"


def test_an_npu_smi_that_is_a_symlink_inside_root_runs(tmp_path):
    """The driver installs /usr/local/bin/npu-smi as a link to driver/tools/npu-smi: inside the tree, it runs."""
    make_node(tmp_path, smi=SMI_910B3)
    tools = tmp_path / "usr/local/Ascend/driver/tools"
    tools.mkdir(parents=True)
    (tmp_path / "usr/local/bin/npu-smi").rename(tools / "npu-smi")
    (tmp_path / "usr/local/bin/npu-smi").symlink_to("../Ascend/driver/tools/npu-smi")
    info = probe(tmp_path)
    assert info.chip == "910b" and info.npu_smi == "/usr/local/bin/npu-smi"
