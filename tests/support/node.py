"""Fixture nodes for the node wing's tests: the real version-file samples of the knowledge
base at their real paths, public npu-smi dumps, and a fake ``npu-smi``.

Every sample in ascend-compat.yaml ``version_files`` is read from the data file itself
(so the fixtures cannot drift from it); the npu-smi outputs are public dumps (trimmed).
Tests using ``fake_npu_smi`` put a shell script printing those dumps at
``usr/local/bin/npu-smi`` of a fixture root: they mock the NPU hardware, and say so in
their names (``fake_npu``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

import yaml

from builder import knowledge

COMPAT = yaml.load((knowledge.DATA_DIR / "ascend-compat.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _samples() -> Dict[str, str]:
    """component (+ '.cfg' / '.install' for the two toolkit files) -> sample text."""
    out: Dict[str, str] = {}
    for item in COMPAT["version_files"]:
        if "sample" not in item:
            continue
        key = item["component"]
        if key == "cann_toolkit":
            key += ".cfg" if "version.cfg" in item["path"] else ".install"
        out[key] = item["sample"]
    return out


SAMPLES = _samples()
DRIVER_INFO = SAMPLES["npu_driver"]              # Version=24.1.rc3, compatible_version_fw=[7.0.0,7.5.99]
FIRMWARE_INFO = SAMPLES["npu_firmware"]          # Version=7.5.0.1.129, compatible_version_drv=...
INSTALL_INFO = SAMPLES["install_registry"]       # Driver/Firmware_Install_Path_Param=/usr/local/Ascend
VERSION_CFG = SAMPLES["cann_toolkit.cfg"]        # toolkit_running_version=[7.6.0.1.220:8.0.0]
TOOLKIT_INSTALL = SAMPLES["cann_toolkit.install"]  # version=8.5.0, arch=aarch64
SUBPACKAGE_INFO = SAMPLES["cann_subpackage"]     # version_dir=8.2.RC1
BOARD_25_5_2 = SAMPLES["npu_smi_board"]          # Software 25.5.2, Firmware 7.8.0.7.220, Compatibility OK
SUMMARY_HEADER = SAMPLES["npu_smi_summary"]      # | npu-smi 23.0.rc3   Version: 23.0.rc2.3 |

# `npu-smi info` of an 8-card Atlas 800T A2 (910B3), driver 24.1.rc3 (two cards shown).
TABLE_910B3 = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.rc3                 Version: 24.1.rc3                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 102.8       55                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3338 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | OK            | 97.6        54                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          3337 / 65536         |
+===========================+===============+====================================================+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+==========================+=========================+
| No running processes found in NPU 0                                                            |
+===========================+===============+====================================================+
"""
# A3 (Atlas 800T A3): two dies per card, the table names both only "Ascend910".
TABLE_A3 = """\
| npu-smi 24.1.rc3.7               Version: 24.1.rc3.7                                           |
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     Ascend910           | OK            | 178.7       37                0    / 0             |
| 0     0                   | 0000:9D:00.0  | 0           0    / 0          3419 / 65536         |
+------------------------------------------------------------------------------------------------+
| 0     Ascend910           | OK            | -           36                0    / 0             |
| 1     1                   | 0000:9F:00.0  | 0           0    / 0          3196 / 65536         |
+===========================+===============+====================================================+
"""
# `npu-smi info -t board -i 0 -c 0` on A2 and A3 (chip identification).
CHIP_A2 = """\
        NPU ID                         : 0
        Chip ID                        : 0
        Chip Type                      : Ascend
        Chip Name                      : 910B4
"""
CHIP_A3 = """\
        NPU ID                         : 0
        NPU Name                       : 9392
        Chip ID                        : 0
        Chip Name                      : Ascend910
"""
# Atlas 300I Duo: the Chip column holds "Chip Device".
TABLE_310P3 = """\
| npu-smi 23.0.rc3                                 Version: 23.0.rc3           |
| NPU   Name   | Health      | Power(W)  Temp(C)           Hugepages-Usage(page|
| Chip  Device | Bus-Id      | AICore(%) Memory-Usage(MB)                      |
+============================+===========+====================================+
| 0     310P3  | OK          | NA        51                996   / 996         |
| 0     0      | 0000:01:00.0| 0         3841 / 21527                          |
+==============+=============+=================================================+
| 64    310P3  | OK          | NA        48                0     / 0           |
| 0     1      | 0000:06:00.0| 0         1764 / 21527                          |
"""
# Ascend 950 (driver 25.7.rc1.6): the NPU ID has its own column; board has Chip Name.
TABLE_950 = """\
| npu-smi 25.7.rc1.6                               Version: 25.7.rc1.6                            |
| NPU ID | Name             | Health        | Power(W)    Temp(C)           Hugepages-Usage(page) |
|        |                  | Bus-Id        | NPU Util(%) Memory-Usage(MB)  HBM-Usage(MB)         |
+========+==================+===============+=====================================================+
| 0      | Ascend950PR      | OK            | 195.6       56                0     / 0             |
|        |                  | 0000:61:00.0  | 0           0    / 0          5239  / 131072        |
+========+==================+===============+=====================================================+
| No running processes found in NPU 0                                                             |
"""
BOARD_950 = """\
NPU ID                         : 0
Product Name                   : A310-50-C00MM304A1
NPU Name                       : 9579
Chip Name                      : Ascend950PR
Chip Version                   : V100
Software Version               : 25.7.rc1.6
Firmware Version               : 9.0.0.105.229
Compatibility                  : OK
Board ID                       : 0x1a
"""
TABLE_910PROB = """\
| npu-smi 24.1.0                   Version: 24.1.0                                               |
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
+===========================+===============+====================================================+
| 0     910ProB             | OK            | 78.0        38                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           2387 / 13553      18   / 32768         |
"""


def board(software: str, firmware: str, compatibility: str = "OK") -> str:
    """A board dump in the 25.5.2 sample's layout with other versions."""
    text = BOARD_25_5_2.replace("25.5.2", software).replace("7.8.0.7.220", firmware)
    return text.replace("Compatibility                  : OK", f"Compatibility                  : {compatibility}")


def write(path: Path, text, mode: Optional[int] = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    if mode is not None:
        path.chmod(mode)
    return path


def fake_npu_smi(root: Path, outputs: Dict[str, str], exit_code: int = 0, sleep: float = 0) -> Path:
    """usr/local/bin/npu-smi printing canned output per argument string ("info", "info -t board -i 0", ...)."""
    data = root.parent / (root.name + "-smi")
    data.mkdir(exist_ok=True)
    cases = []
    for i, (args, text) in enumerate(outputs.items()):
        write(data / f"out{i}.txt", text)
        cases.append(f'  "{args}") cat "{data}/out{i}.txt" ;;')
    script = "#!/bin/sh\n" + (f"sleep {sleep}\n" if sleep else "") + 'case "$*" in\n' + "\n".join(cases) + \
        '\n  *) echo "Error parameter of -t" >&2; exit 1 ;;\nesac\n' + f"exit {exit_code}\n"
    return write(root / "usr/local/bin/npu-smi", script, 0o755)


def make_node(root: Path, *, driver: Optional[str] = DRIVER_INFO, firmware: Optional[str] = FIRMWARE_INFO,
              install: Optional[str] = INSTALL_INFO, cann_cfg: Optional[str] = VERSION_CFG,
              devices: int = 8, arch: Optional[str] = "aarch64", smi: Optional[Dict[str, str]] = None,
              lib64: bool = True) -> Path:
    """A fixture node: the real samples at their real paths, the driver's lib64 (when it has a
    driver and ``lib64``), davinci devices, /dev/shm."""
    if install is not None:
        write(root / "etc/ascend_install.info", install)
    if driver is not None:
        write(root / "usr/local/Ascend/driver/version.info", driver)
        if lib64:
            write(root / "usr/local/Ascend/driver/lib64/libascend_hal.so", "")
    if firmware is not None:
        write(root / "usr/local/Ascend/firmware/version.info", firmware)
    if cann_cfg is not None:
        write(root / "usr/local/Ascend/ascend-toolkit/latest/version.cfg", cann_cfg)
    for n in range(devices):
        write(root / f"dev/davinci{n}", "")
    if devices:
        for name in ("davinci_manager", "devmm_svm", "hisi_hdc"):
            write(root / "dev" / name, "")
    (root / "dev/shm").mkdir(parents=True, exist_ok=True)
    if arch is not None:
        write(root / "proc/sys/kernel/arch", arch + "\n")
    if smi is not None:
        fake_npu_smi(root, smi)
    return root


SMI_910B3 = {"info": TABLE_910B3, "info -t board -i 0": board("24.1.rc3", "7.5.0.1.129")}
