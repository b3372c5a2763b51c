"""What this NPU node has: arch, driver, firmware, devices, chip, CANN, /dev/shm.

Why: an image carries CANN, torch and torch_npu, but driver and firmware live on the
host only (ascend-facts.md, "The layers"). Picking or debugging an image for a cluster
node starts with these host facts, read the same way every time.

Everything is read under ``root`` (``/`` normally, a fixture tree in tests), so the
same code describes a host, a container with the driver files mounted, or a test tree.
Nothing here raises for a bad node: a missing, garbage or unreadable file leaves its
field ``None`` and adds a sentence to ``HostInfo.problems``.

Sources, in order:

- ``/etc/ascend_install.info``: ``Driver_Install_Path_Param`` / ``Firmware_Install_Path_Param``
  name the install roots (default ``/usr/local/Ascend``).
- ``<root>/driver/version.info``: ``Version=`` and ``compatible_version_fw=[lo,hi]``.
- ``<root>/firmware/version.info``: ``Version=`` and ``compatible_version_drv=[a,a.],...``.
- ``/dev/davinciN`` (``builder.devices.npu_devices``).
- ``npu-smi`` (``/usr/local/bin`` or ``/usr/local/sbin``), run with a timeout:
  ``npu-smi info`` (table: NPU ids, chip names such as ``910B3``, ``Ascend910``,
  ``310P3``, ``Ascend950PR``), ``npu-smi info -t board -i <id>`` (``Software Version``,
  ``Firmware Version``, ``Compatibility : OK|NOK``, on newer drivers ``Chip Name``), and,
  when the chip is still unknown or only ``Ascend910`` (A3 prints that in the table),
  ``npu-smi info -t board -i <id> -c 0`` (A2: ``Chip Type`` + ``Chip Name`` ->
  ``Ascend910B4``; A3: ``Chip Name`` + ``_`` + ``NPU Name`` -> ``Ascend910_9392``).
- CANN: ``version.cfg``, then ``<arch>-linux/ascend_toolkit_install.info``, then a
  subpackage's ``version.info`` (``version_dir=``) under ``$ASCEND_HOME_PATH`` (when
  ``environ`` is given), ``ascend-toolkit/latest``, ``cann``, ``cann-<ver>``.

Arch: ``platform.machine()`` when ``root`` is ``/``. For another root the running
machine says nothing about that tree, so it is read from ``<root>/proc/sys/kernel/arch``
(the kernel's ``uname -m``), else from the ``arch=`` of the toolkit install info found
there, else it stays ``None`` with a note.

Example:
    >>> info = probe(Path("/"), run_npu_smi=False)     # doctest: +SKIP
    >>> info.driver, info.chip                         # doctest: +SKIP
    ('24.1.rc3', '910b')
    >>> print(format_host(info))                       # doctest: +SKIP
"""

from __future__ import annotations

import os
import posixpath
import platform
import re
import selectors
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from builder import bounded, devices, knowledge, versions
from builder.smoke import parsers
from builder.vocabulary import normalize_arch

DEFAULT_INSTALL_ROOT = "/usr/local/Ascend"
INSTALL_INFO = "/etc/ascend_install.info"
NPU_SMI_PATHS = ("/usr/local/bin/npu-smi", "/usr/local/sbin/npu-smi")
NPU_SMI_TIMEOUT = 15.0
NPU_SMI_MAX_BYTES = 4 << 20  # `npu-smi info` of a 16-card node is a few KB
MAX_READ = 256 * 1024  # version files are a few hundred bytes; never slurp a huge file

_RANGE = re.compile(r"\[\s*([^,\[\]\s]+)\s*,\s*([^\[\]\s]*)\s*\]")  # no '[' inside: linear on "[[[["
_HEALTH = re.compile(r"[A-Za-z][A-Za-z ]*")
_NPU_ID = r"[0-9]{1,9}"  # a row with a longer number is no NPU row (and int() refuses 4300+ digits)


@dataclass
class HostInfo:
    """The facts of one node; ``None`` means unknown (see ``problems`` for why).

    ``driver_fw_ranges`` are the driver's ``compatible_version_fw`` ranges,
    ``firmware_drv_ranges`` the firmware's ``compatible_version_drv`` ranges, both as
    ``[lo, hi]`` pairs. ``compatibility`` is npu-smi's ``OK``/``NOK`` (or whatever it
    printed), ``soc`` the SoC name (``Ascend910B3``), ``chip`` the matrix chip id.
    """

    root: str = "/"
    arch: Optional[str] = None
    driver: Optional[str] = None
    driver_file: Optional[str] = None
    driver_fw_ranges: List[List[str]] = field(default_factory=list)
    firmware: Optional[str] = None
    firmware_file: Optional[str] = None
    firmware_drv_ranges: List[List[str]] = field(default_factory=list)
    devices: List[int] = field(default_factory=list)
    npu_smi: Optional[str] = None
    npu_ids: List[int] = field(default_factory=list)
    smi_error: Optional[str] = None  # why npu-smi gave no answer (failed, hung, cannot run); None: answered or absent
    smi_cannot_run: bool = False     # npu-smi is there, but this host cannot start it (not an executable, exec failed)
    smi_driver: Optional[str] = None
    smi_firmware: Optional[str] = None
    compatibility: Optional[str] = None
    soc: Optional[str] = None
    chip: Optional[str] = None
    cann: Optional[str] = None
    cann_file: Optional[str] = None
    shm_bytes: Optional[int] = None
    problems: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        """Plain JSON-able data (``ascend-build host --json``).

        Example:
            >>> HostInfo(driver="24.1.rc3").to_dict()["driver"]
            '24.1.rc3'
        """
        return asdict(self)


# ---------------------------------------------------------------------------------------
# small readers


def _under(root: Path, path: str) -> Path:
    """``path`` inside ``root``: ``..`` cannot climb out of it (``/../..`` is ``root`` itself)."""
    return root / posixpath.normpath("/" + path).lstrip("/")


def _resolved_inside(root: Path, full: Path) -> Optional[str]:
    """``full`` with every symlink resolved, when that stays inside ``root``; None when a link
    leads out of it (then it is not this host's file)."""
    inside, real = os.path.realpath(root), os.path.realpath(full)
    return real if inside == os.sep or real.startswith(inside + os.sep) else None


def _read(root: Path, path: str, problems: List[str], missing_ok: bool = False) -> Optional[str]:
    """Text of ``path`` under ``root``, or None with a note (missing, unreadable, not text, not a
    regular file: a FIFO would block forever; a symlink leading out of ``root``: not this host's)."""
    full = _under(root, path)
    if _resolved_inside(root, full) is None:
        problems.append(f"{path} leads out of {root} (a symlink): not read")
        return None
    try:
        data = bounded.read_file(full, MAX_READ)
    except FileNotFoundError:
        if not missing_ok:
            problems.append(f"{path} not found")
        return None
    except bounded.NotRegular:
        problems.append(f"{path} is not a regular file: not read")
        return None
    except OSError as exc:
        problems.append(f"cannot read {path}: {exc.strerror or exc}")
        return None
    if b"\0" in data:
        problems.append(f"{path} is not a text file")
        return None
    return data.decode("utf-8", errors="replace")


def _parse(kind: str, text: Optional[str]) -> Optional[str]:
    """``text`` stripped when it is a valid version of ``kind`` (versions.cann/hdk/firmware), else None."""
    return text.strip() if text and versions.lenient(kind, text.strip()) is not None else None


def ranges(text: Optional[str]) -> List[List[str]]:
    """``[7.0.0,7.5.99]`` or ``[23.0.0,23.0.0.],[24.1,24.1.]`` -> ``[[lo, hi], ...]``.

    Example:
        >>> ranges("[23.0.0,23.0.0.],[24.1,24.1.]")
        [['23.0.0', '23.0.0.'], ['24.1', '24.1.']]
    """
    return [[lo, hi] for lo, hi in _RANGE.findall(text or "")]


# ---------------------------------------------------------------------------------------
# chip names


def soc_name(name: Optional[str]) -> Optional[str]:
    """Spell a chip name as a SoC name: ``910B3``/``Ascend 910B3`` -> ``Ascend910B3``.

    Example:
        >>> soc_name("310P3"), soc_name("Ascend 910B4"), soc_name("Mcu")
        ('Ascend310P3', 'Ascend910B4', None)
    """
    text = re.sub(r"\s+", "", str(name or ""))
    if not text or text.lower() in ("mcu", "na", "xxx", "-"):
        return None
    if text[0].isdigit():
        text = "Ascend" + text
    if not text.lower().startswith("ascend"):
        return None
    return "Ascend" + text[len("ascend"):]


def soc_from_board(board: Mapping[str, str]) -> Optional[str]:
    """SoC name from ``npu-smi info -t board`` keys (``Chip Type``, ``Chip Name``, ``NPU Name``).

    A2 prints ``Chip Type: Ascend`` + ``Chip Name: 910B4``; A3 prints ``Chip Name:
    Ascend910`` + ``NPU Name: 9392`` (SoC ``Ascend910_9392``); 950 prints ``Chip Name:
    Ascend950PR`` (its ``NPU Name`` is a board code, not part of the SoC name).

    Example:
        >>> soc_from_board({"Chip Name": "Ascend910", "NPU Name": "9392"})
        'Ascend910_9392'
        >>> soc_from_board({"Chip Type": "Ascend", "Chip Name": "910B4"})
        'Ascend910B4'
    """
    name = board.get("Chip Name")
    base = soc_name(name)
    if base is None:
        return None
    npu_name = (board.get("NPU Name") or "").strip()
    if base == "Ascend910" and re.fullmatch(r"93\d\d", npu_name):
        return f"Ascend910_{npu_name}"
    chip_type = (board.get("Chip Type") or "").strip()
    if chip_type and not str(name).strip().lower().startswith(chip_type.lower()):
        return soc_name(chip_type + str(name).strip())
    return base


def chip_of_soc(soc: Optional[str]) -> Optional[str]:
    """The matrix chip id of a SoC name (``Ascend910B3`` -> ``910b``), None when unknown.

    Plain ``Ascend910`` is ambiguous (A3 nodes print it in the ``npu-smi info`` table,
    910 nodes print ``910A``/``910ProB``), so it maps to None. The prefix rules are
    ``knowledge``'s, which match the ``chips.families[].soc_names`` of the data.

    Example:
        >>> [chip_of_soc(s) for s in ("Ascend910B3", "Ascend910_9391", "Ascend310P3", "Ascend910ProB", "Ascend950PR")]
        ['910b', 'a3', '310p', '910', '950']
    """
    if not soc or soc.lower() == "ascend910":
        return None
    return knowledge.chip_of_soc(soc)  # one rule for the whole package


# ---------------------------------------------------------------------------------------
# npu-smi output


def parse_smi_table(text: str) -> Tuple[Optional[str], List[Tuple[int, str]]]:
    """``npu-smi info`` -> (driver version from the header, [(NPU id, chip name)]).

    Knows both layouts: ``| 0     910B3   | OK | ...`` (id and name in one cell) and
    ``| 0      | Ascend950PR  | OK | ...`` (own cells); chip rows, bus-id rows and
    process rows have no name with a letter in it and are skipped.

    Example:
        >>> parse_smi_table("| npu-smi 24.1.0  Version: 24.1.0 |\\n| 3     910B3   | OK  | 95.0 |")
        ('24.1.0', [(3, '910B3')])
    """
    m = re.search(r"npu-smi\s+\S+\s+Version:\s*(\S+)", text)
    driver = m.group(1) if m else None
    rows: List[Tuple[int, str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) < 3:
            continue
        both = re.fullmatch(rf"({_NPU_ID})\s+([A-Za-z0-9][\w.\-]*)", cells[0])
        if both and re.search(r"[A-Za-z]", both.group(2)) and _HEALTH.fullmatch(cells[1]):
            npu, name = int(both.group(1)), both.group(2)
        elif re.fullmatch(_NPU_ID, cells[0]) and re.fullmatch(r"[A-Za-z][\w.\-]*", cells[1]) \
                and _HEALTH.fullmatch(cells[2]):
            npu, name = int(cells[0]), cells[1]
        else:
            continue
        if all(npu != seen for seen, _ in rows):
            rows.append((npu, name))
    return driver, rows


def parse_board(text: str) -> Dict[str, str]:
    """``Key : value`` lines of ``npu-smi info -t board`` -> dict (first occurrence wins).

    Example:
        >>> parse_board("  Software Version   : 25.5.2\\n  Compatibility  : OK")
        {'Software Version': '25.5.2', 'Compatibility': 'OK'}
    """
    out: Dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and key.strip() not in out:
            out[key.strip()] = value.strip()
    return out


class _SmiTimeout(Exception):
    """npu-smi hung once: asking it again would hang again."""


def _read_bounded(proc: subprocess.Popen) -> Tuple[bytes, bytes, str]:
    """npu-smi's stdout and stderr until both close, or why it was cut: past NPU_SMI_TIMEOUT (a
    hung driver call, or a child left holding a pipe) or past NPU_SMI_MAX_BYTES (printing forever)."""
    deadline = time.monotonic() + NPU_SMI_TIMEOUT
    stdout, stderr = proc.stdout, proc.stderr
    assert stdout is not None and stderr is not None, "npu-smi runs with stdout and stderr piped"
    got: Dict[int, List[bytes]] = {stdout.fileno(): [], stderr.fileno(): []}
    size = 0
    with selectors.DefaultSelector() as selector:
        for stream in (stdout, stderr):
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return b"", b"", f"did not answer within {NPU_SMI_TIMEOUT:g} s"
            for key, _ in selector.select(timeout=left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                got[key.fd].append(chunk)
                size += len(chunk)
                if size > NPU_SMI_MAX_BYTES:
                    return b"", b"", f"printed more than {NPU_SMI_MAX_BYTES} bytes; stopped"
    return b"".join(got[stdout.fileno()]), b"".join(got[stderr.fileno()]), ""


def _smi_failed(info: HostInfo, message: str, cannot_run: bool = False) -> None:
    """Note why npu-smi gave no answer; the first reason is the one doctor reports."""
    info.problems.append(message)
    if info.smi_error is None:
        info.smi_error, info.smi_cannot_run = message, cannot_run


def _run_smi(exe: Path, real: str, args: List[str], info: HostInfo) -> Optional[str]:
    """stdout of one npu-smi call, or None with a note (exit code, dcmi error).

    ``real`` is the program ``exe`` resolves to, checked to lie inside the root: that file is
    run (under the name ``exe``), so a link swapped after the check does not lead elsewhere.
    npu-smi runs in its own process group, killed whole on timeout, so a hung driver
    call (or a child holding the pipe) cannot hang the probe; raises _SmiTimeout then.
    """
    what = "npu-smi " + " ".join(args)
    try:
        proc = subprocess.Popen([str(exe), *args], executable=real, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        _smi_failed(info, f"{what} cannot run: {exc.strerror or exc}", cannot_run=True)
        return None
    assert proc.stdout is not None and proc.stderr is not None, "both piped above"
    try:
        raw_out, raw_err, why = _read_bounded(proc)
    finally:
        proc.stdout.close()
        proc.stderr.close()
    if why:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the group we started, nothing else
        except OSError:
            pass
        proc.wait()
        _smi_failed(info, f"{what} {why}")
        raise _SmiTimeout()
    proc.wait()
    stdout = raw_out.decode("utf-8", "replace")
    out = stdout + raw_err.decode("utf-8", "replace")
    if proc.returncode != 0 or "initialize failed" in out or "initialized failed" in out:
        tail = " / ".join(line.strip() for line in out.strip().splitlines()[-2:]) or "no output"
        _smi_failed(info, f"{what} failed (exit {proc.returncode}): {tail}")
        return None
    return stdout


# ---------------------------------------------------------------------------------------
# the probe


def _install_root(install: Mapping[str, str], key: str) -> List[str]:
    """Install roots to try for the driver/firmware: the registry's, then the default."""
    roots = []
    if install.get(key):  # as a path inside the root: /../.. is /
        roots.append(posixpath.normpath("/" + install[key].lstrip("/")).rstrip("/") or "/")
    if DEFAULT_INSTALL_ROOT not in roots:
        roots.append(DEFAULT_INSTALL_ROOT)
    return roots


def _version_info(root: Path, bases: List[str], sub: str, kind: str, problems: List[str]):
    """(version, parsed kv, path) of the first ``<base>/<sub>/version.info`` that exists."""
    for base in bases:
        path = f"{base}/{sub}/version.info".replace("//", "/")
        if not _under(root, path).exists():
            continue
        text = _read(root, path, problems)
        if text is None:
            return None, {}, path
        kv = parsers.parse_kv(text)
        raw = kv.get("Version") or kv.get("version")
        value = _parse(kind, raw)
        if value is None:
            shown = raw if raw is None or len(raw) <= 40 else raw[:37] + "..."
            problems.append(f"{path}: " + (f"Version={shown!r} is not a valid {sub} version" if raw
                                           else "no Version= line"))
        return value, kv, path
    problems.append(f"no {sub} version.info under {', '.join(bases)}")
    return None, {}, None


def _cann_homes(root: Path, environ: Optional[Mapping[str, str]]) -> List[str]:
    homes = []
    env_home = (environ or {}).get("ASCEND_HOME_PATH") or (environ or {}).get("ASCEND_TOOLKIT_HOME")
    for home in (env_home, f"{DEFAULT_INSTALL_ROOT}/ascend-toolkit/latest", f"{DEFAULT_INSTALL_ROOT}/cann"):
        if home and home.rstrip("/") not in homes:
            homes.append(home.rstrip("/"))
    versioned = []
    for p in _under(root, DEFAULT_INSTALL_ROOT).glob("cann-*"):
        v = _parse("cann", p.name[len("cann-"):])
        if v:
            versioned.append((versions.cann(v), f"{DEFAULT_INSTALL_ROOT}/{p.name}"))
    homes += [h for _, h in sorted(versioned, reverse=True) if h not in homes]
    return homes


def _find_cann(root: Path, arch: Optional[str], environ, problems: List[str]):
    """(CANN version, file, arch from the install info) of the first version file found."""
    for home in _cann_homes(root, environ):
        cfg = f"{home}/version.cfg"
        if _under(root, cfg).is_file():
            text = _read(root, cfg, problems)
            raw = parsers.cann_version_from_cfg(text) if text is not None else None
            if _parse("cann", raw):
                return raw, cfg, None
            if text is not None:
                problems.append(f"{cfg}: no valid toolkit_running_version (got {raw!r})")
        infos = [f"{home}/{arch}-linux/ascend_toolkit_install.info"] if arch else []
        infos += [f"{home}/{p.parent.name}/{p.name}"
                  for p in sorted(_under(root, home).glob("*-linux/ascend_toolkit_install.info"))]
        for info in dict.fromkeys(infos):
            if not _under(root, info).is_file():
                continue
            text = _read(root, info, problems)
            if text is None:
                continue
            raw = parsers.cann_version_from_install_info(text)
            if _parse("cann", raw):
                return raw, info, normalize_arch(parsers.parse_kv(text).get("arch"))
            problems.append(f"{info}: no valid version= (got {raw!r})")
        for sub in ("runtime", "toolkit", "share/info/runtime", "share/info/toolkit"):
            path = f"{home}/{sub}/version.info"
            if _under(root, path).is_file():
                raw = parsers.parse_kv(_read(root, path, problems) or "").get("version_dir")
                if _parse("cann", raw):
                    return raw, path, None
    return None, None, None


def _shm_bytes(root: Path, problems: List[str]) -> Optional[int]:
    shm = _under(root, "/dev/shm")
    try:
        st = os.statvfs(shm)
    except OSError:
        problems.append("/dev/shm not found")
        return None
    return st.f_frsize * st.f_blocks


def _probe_smi(info: HostInfo, root: Path) -> None:
    places = [_under(root, p) for p in NPU_SMI_PATHS]
    exe = next((p for p in places if p.is_file() and os.access(p, os.X_OK)), None)
    if exe is None:
        odd = next((p for p in places if os.path.lexists(p)), None)
        if odd:
            _smi_failed(info, f"npu-smi at /{odd.relative_to(root)} is not an executable file", cannot_run=True)
        else:
            info.problems.append("npu-smi not found in /usr/local/bin or /usr/local/sbin")
        return
    shown = "/" + str(exe.relative_to(root))
    real = _resolved_inside(root, exe)
    if real is None:  # --root is a boundary for what runs too
        _smi_failed(info, f"npu-smi at {shown} leads out of {root} (a symlink): not run", cannot_run=True)
        return
    info.npu_smi = shown
    table = _run_smi(exe, real, ["info"], info)
    names: Dict[int, str] = {}
    if table is not None:
        header_driver, rows = parse_smi_table(table)
        info.npu_ids = [npu for npu, _ in rows]
        names = dict(rows)
        info.smi_driver = header_driver
        if not rows:
            info.problems.append("npu-smi info listed no NPU")
    first = info.npu_ids[0] if info.npu_ids else 0
    board_text = _run_smi(exe, real, ["info", "-t", "board", "-i", str(first)], info)
    board = parse_board(board_text or "")
    info.smi_driver = board.get("Software Version") or info.smi_driver
    info.smi_firmware = board.get("Firmware Version")
    info.compatibility = board.get("Compatibility")
    soc = soc_from_board(board) or soc_name(names.get(first))
    if soc is None or soc == "Ascend910":
        chip_text = _run_smi(exe, real, ["info", "-t", "board", "-i", str(first), "-c", "0"], info)
        soc = soc_from_board(parse_board(chip_text or "")) or soc
    info.soc = soc


def probe(root: Path = Path("/"), run_npu_smi: bool = True,
          environ: Optional[Mapping[str, str]] = None) -> HostInfo:
    """Read the node under ``root``; never raises for what the node lacks (see ``problems``).

    ``run_npu_smi=False`` skips npu-smi (no chip, no Compatibility flag) for speed.
    ``environ`` adds ``$ASCEND_HOME_PATH`` to the CANN search (inside a container).

    Example:
        >>> info = probe(Path("/nonexistent"), run_npu_smi=False)
        >>> info.driver, any("no driver version.info" in p for p in info.problems)
        (None, True)
    """
    root = Path(root)
    info = HostInfo(root=str(root))
    problems = info.problems
    install = parsers.parse_kv(_read(root, INSTALL_INFO, problems, missing_ok=True) or "")

    info.driver, kv, info.driver_file = _version_info(
        root, _install_root(install, "Driver_Install_Path_Param"), "driver", "hdk", problems)
    info.driver_fw_ranges = ranges(kv.get("compatible_version_fw"))
    info.firmware, kv, info.firmware_file = _version_info(
        root, _install_root(install, "Firmware_Install_Path_Param"), "firmware", "firmware", problems)
    info.firmware_drv_ranges = ranges(kv.get("compatible_version_drv"))

    info.devices = devices.npu_devices(root)
    if not info.devices:
        problems.append("no /dev/davinciN device")

    arch_problems: List[str] = []
    if str(root) == "/":
        info.arch = normalize_arch(platform.machine())
    else:
        info.arch = normalize_arch(_read(root, "/proc/sys/kernel/arch", arch_problems, missing_ok=True))
    info.cann, info.cann_file, cann_arch = _find_cann(root, info.arch, environ, problems)
    if info.arch is None:
        info.arch = cann_arch
        if info.arch is None:
            why = "; ".join(arch_problems) or "no proc/sys/kernel/arch"
            problems.append(f"arch unknown: {root}: {why}, and no toolkit install info")

    info.shm_bytes = _shm_bytes(root, problems)

    if run_npu_smi:
        try:
            _probe_smi(info, root)
        except _SmiTimeout:
            pass
        _reconcile(info)
    return info


def _reconcile(info: HostInfo) -> None:
    """Fill unknown versions from npu-smi, note disagreements, and name the chip."""
    for attr, smi_attr, kind, what in (("driver", "smi_driver", "hdk", "driver"),
                                       ("firmware", "smi_firmware", "firmware", "firmware")):
        mine, theirs = getattr(info, attr), _parse(kind, getattr(info, smi_attr))
        if mine is None and theirs:
            setattr(info, attr, theirs)
            info.problems.append(f"{what} version {theirs} taken from npu-smi (version.info unreadable)")
        elif mine and theirs and versions.parse(mine, kind) != versions.parse(theirs, kind):
            info.problems.append(f"{what} version.info says {mine}, npu-smi says {theirs}: "
                                 "a second install or a stale file")
    if info.soc:
        info.chip = chip_of_soc(info.soc)
        if info.chip is None:
            reason = ("npu-smi names the chip only 'Ascend910' (A3 or 910)" if info.soc == "Ascend910"
                      else f"{info.soc} is not a chip ascend-build builds for ({', '.join(knowledge.CHIPS)})")
            info.problems.append(f"chip unknown: {reason}")


# ---------------------------------------------------------------------------------------
# text


def _size(n: Optional[int]) -> str:
    return "unknown" if n is None else f"{n / 2**30:.1f} GiB"


def _ranges_text(rs: List[List[str]]) -> str:
    return ", ".join(f"{a}*" if b == a + "." else f"{a}..{b}" for a, b in rs)


def devices_text(devs: List[int]) -> str:
    """``/dev/davinci0..7 (8)`` for a run, else each device."""
    if not devs:
        return "none"
    if devs == list(range(devs[0], devs[-1] + 1)) and len(devs) > 2:
        return f"/dev/davinci{devs[0]}..{devs[-1]} ({len(devs)})"
    return ", ".join(f"/dev/davinci{n}" for n in devs)


def format_host(info: HostInfo) -> str:
    """The probe as aligned text lines, problems last (``ascend-build host``).

    Example:
        >>> print(format_host(HostInfo(arch="aarch64", driver="24.1.rc3")).splitlines()[1])
        driver     24.1.rc3
    """
    u = "unknown"
    lines = [f"{'host':<10} {info.root} (arch {info.arch or u})"]
    drv = info.driver or u
    if info.driver_file:
        drv += f"  {info.driver_file}"
    if info.driver_fw_ranges:
        drv += f"  accepts firmware {_ranges_text(info.driver_fw_ranges)}"
    lines.append(f"{'driver':<10} {drv}")
    fw = info.firmware or u
    if info.firmware_file:
        fw += f"  {info.firmware_file}"
    if info.firmware_drv_ranges:
        fw += f"  accepts drivers {_ranges_text(info.firmware_drv_ranges)}"
    lines.append(f"{'firmware':<10} {fw}")
    if info.npu_smi:
        lines.append(f"{'npu-smi':<10} {info.npu_smi}  Compatibility {info.compatibility or u}")
    chip = info.chip or u
    if info.soc:
        chip += f" ({info.soc})"
    lines.append(f"{'chip':<10} {chip}")
    lines.append(f"{'devices':<10} {devices_text(info.devices)}")
    cann = info.cann or "none found"
    if info.cann_file:
        cann += f"  {info.cann_file}"
    lines.append(f"{'CANN':<10} {cann}")
    lines.append(f"{'/dev/shm':<10} {_size(info.shm_bytes)}")
    if info.problems:
        lines.append("problems:")
        lines += [f"  - {p}" for p in info.problems]
    return "\n".join(lines)


__all__ = ["HostInfo", "probe", "format_host", "soc_name", "soc_from_board", "chip_of_soc",
           "parse_smi_table", "parse_board", "ranges", "devices_text"]
