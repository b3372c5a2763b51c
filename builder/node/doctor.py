"""The field guide's pre-flight checklist (section 6), as checks with a one-line fix each.

Why: a training job that dies after an hour on a firmware/driver mismatch, a missing
device, a 64 MB /dev/shm or a 120 s HCCL timeout wastes a node-hour that a two-second
check saves. Each check answers OK, WARN (works, but not as the guide recommends, or
cannot be decided) or FAIL (will break), with the fix on one line. Where an error
string is involved, the fix comes from the explain table (``explain.fix_for``), so
``doctor`` and ``explain`` never disagree.

Host checks (``run_host_checks``): driver present, firmware/driver pairing (npu-smi's
``Compatibility`` flag and the ranges in both ``version.info`` files, ordered by
``builder.versions``), npu-smi, chip, devices, /dev/shm, and the job environment
(HCCL_CONNECT_TIMEOUT and other HCCL variables, ASCEND_GLOBAL_LOG_LEVEL,
PYTORCH_NPU_ALLOC_CONF).

Image checks (``doctor_image``): a small Python program runs inside the image (no
device needed) and prints JSON: torch/torch_npu versions, the CANN version files
(read by smoke.py's own parsers, sent along as source), venv/conda isolation, the
environment. Together with the image labels it checks: arch and chip vs the host, the
host driver/firmware vs the image's minimums, torch_npu vs CANN and torch (knowledge
base pairing), Python env isolation, env defaults.

Example:
    >>> from builder.node.host import HostInfo
    >>> checks = run_host_checks(HostInfo(driver="24.1.rc3", firmware="7.5.0.1.129",
    ...                                   driver_fw_ranges=[["7.0.0", "7.5.99"]]), {})
    >>> [c.status for c in checks if c.name == "firmware/driver pairing"]
    ['OK']
    >>> print(format_checks(checks))                          # doctest: +SKIP
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from builder.node import explain
from builder import bounded, documents, knowledge, versions, vocabulary
from builder.devices import REQUIRED_MOUNTS, missing_mounts
from builder.vocabulary import CANDIDATE_SUFFIX, CONTROL_DEVICES, CPU, NPU, Label, normalize_arch
from builder.errors import UserError
from builder.node.host import HostInfo, devices_text, probe
from builder.smoke import doctor_probe, parsers
from builder.smoke.doctor_probe import MARK

OK, WARN, FAIL = "OK", "WARN", "FAIL"
SHM_MIN_BYTES = 1 << 30  # below 1 GiB, DataLoader workers run out of shared memory
HCCL_TIMEOUT_RANGE = (120, 7200)  # CANN env reference: integer seconds, default 120
LOG_LEVELS = {"0": "DEBUG", "1": "INFO", "2": "WARNING", "3": "ERROR", "4": "NULL"}
PROBE_TIMEOUT = 120.0


@dataclass(frozen=True)
class Check:
    """One checklist item: ``status`` is OK, WARN or FAIL; ``fix`` is empty when OK.

    Example:
        >>> Check("driver", OK, "24.1.rc3").to_dict()["status"]
        'OK'
    """

    name: str
    status: str
    detail: str
    fix: str = ""

    def to_dict(self) -> Dict[str, str]:
        return asdict(self)


def checks_to_dicts(checks: Sequence[Check]) -> List[Dict[str, str]]:
    """JSON-able list (``ascend-build doctor --json``)."""
    return [c.to_dict() for c in checks]


def exit_code(checks: Sequence[Check]) -> int:
    """1 when any check FAILs, else 0 (warnings do not fail the command).

    Example:
        >>> exit_code([Check("a", WARN, "")]), exit_code([Check("a", FAIL, "")])
        (0, 1)
    """
    return 1 if any(c.status == FAIL for c in checks) else 0


# ---------------------------------------------------------------------------------------
# firmware/driver pairing


def driver_in_ranges(driver: str, ranges: Sequence[Sequence[str]]) -> Optional[bool]:
    """Whether a driver is inside a firmware's ``compatible_version_drv`` ranges.

    ``[24.1,24.1.]`` is a prefix range: every 24.1.x driver. A range with two full
    versions is compared with ``versions.hdk``. None when nothing can be decided.

    Example:
        >>> driver_in_ranges("24.1.rc3", [["23.0.0", "23.0.0."], ["24.1", "24.1."]])
        True
        >>> driver_in_ranges("25.0.rc1.1", [["24.1", "24.1."]])
        False
    """
    d = driver.strip().lower()
    decided = False
    for lo, hi in ranges:
        a, b = lo.strip().lower(), hi.strip().lower()
        if b in (a, a + "."):
            decided = True
            if d == a or d.startswith(a + "."):
                return True
            continue
        try:
            if versions.hdk(lo) <= versions.hdk(driver) <= versions.hdk(hi):
                return True
            decided = True
        except versions.VersionError:
            continue
    return False if decided else None


def check_pairing(host: HostInfo) -> Check:
    """Firmware and driver must come from one HDK release; three witnesses, any NOK fails."""
    name = "firmware/driver pairing"
    if host.driver is None or host.firmware is None:
        flag = (host.compatibility or "").upper()
        if flag == "NOK":
            return Check(name, FAIL, "npu-smi reports Compatibility NOK",
                         explain.fix_for("firmware-driver-mismatch", host))
        return Check(name, WARN, "driver or firmware version unknown: cannot check the pair",
                     "make /usr/local/Ascend/driver/version.info and firmware/version.info readable")
    kb = knowledge.load()
    fw_ranges = host.driver_fw_ranges
    if not fw_ranges:
        rng = kb.drivers.firmware_range(host.driver)
        fw_ranges = [list(rng)] if rng else []
    verdicts = []
    flag = (host.compatibility or "").upper()
    if flag in ("OK", "NOK"):
        verdicts.append((flag == "OK", f"npu-smi Compatibility {flag}"))
    fw_ok = versions.firmware_in_ranges(host.firmware, fw_ranges)
    if fw_ok is not None:
        span = ", ".join(f"[{a},{b}]" for a, b in fw_ranges)
        verdicts.append((fw_ok, f"driver {host.driver} accepts firmware {span}: {host.firmware} "
                                f"{'inside' if fw_ok else 'outside'}"))
    drv_ok = driver_in_ranges(host.driver, host.firmware_drv_ranges)
    if drv_ok is not None:
        verdicts.append((drv_ok, f"firmware {host.firmware} {'accepts' if drv_ok else 'does not accept'} "
                                 f"driver {host.driver}"))
    if not verdicts:
        return Check(name, WARN, f"driver {host.driver}, firmware {host.firmware}: no range or npu-smi flag "
                                 "to decide", "run on the host with npu-smi (`npu-smi info -t board -i 0`)")
    detail = "; ".join(text for _, text in verdicts)
    if all(ok for ok, _ in verdicts):
        return Check(name, OK, detail)
    fix = explain.fix_for("firmware-driver-mismatch", host,
                          driver_fw_range=", ".join(f"[{a},{b}]" for a, b in fw_ranges) or None)
    paired = kb.drivers.paired_firmware(host.driver, host.chip)
    if paired:
        fix += f" (driver {host.driver} shipped with firmware {paired})"
    return Check(name, FAIL, detail, fix)


# ---------------------------------------------------------------------------------------
# host checks


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def run_host_checks(host: HostInfo, environ: Mapping[str, str]) -> List[Check]:
    """The checklist on this node: driver, pairing, npu-smi, chip, devices, /dev/shm, environment.

    Example:
        >>> [c.status for c in run_host_checks(HostInfo(), {})][:2]
        ['FAIL', 'WARN']
    """
    out: List[Check] = []
    if host.driver:
        out.append(Check("driver", OK, f"{host.driver} ({host.driver_file or 'npu-smi'})"))
    elif host.driver_file:  # there, but what it says is no version
        why = next((p for p in host.problems if host.driver_file in p), f"{host.driver_file}: unreadable")
        out.append(Check("driver", FAIL, why, "reinstall the Ascend HDK driver: its version.info is damaged"))
    else:
        out.append(Check("driver", FAIL, "no readable driver version.info: no NPU driver here",
                         "install the Ascend HDK driver on the host (npu-driver .run --full, then firmware); "
                         "in a container mount -v /usr/local/Ascend/driver/version.info and driver/lib64"))
    out.append(check_pairing(host))

    err = host.smi_error
    if err:
        if host.smi_cannot_run:  # the host's program itself, not an image
            fix = "put the driver's npu-smi there (an executable file for this host), or mount it"
        else:
            found = explain.explain(err, host)
            fix = found[0].fix if found else "run npu-smi info as root and read its error"
        out.append(Check("npu-smi", FAIL, err, fix))
    elif host.npu_smi and host.npu_ids:
        out.append(Check("npu-smi", OK, f"{host.npu_smi}: NPU {', '.join(map(str, host.npu_ids))}"))
    elif host.npu_smi:  # it answered, but with no NPU: a driver that sees no chip, or not the driver's npu-smi
        listed = f"{host.npu_smi}: npu-smi info listed no NPU"
        if host.devices:
            out.append(Check("npu-smi", FAIL, f"{listed}, though {devices_text(host.devices)} exist",
                             "run `npu-smi info` as root and read what it prints; if it lists no NPU either, reinstall "
                             "the Ascend HDK driver that matches the firmware and reboot"))
        else:
            out.append(Check("npu-smi", WARN, listed, "no /dev/davinciN either: see the devices check"))
    else:
        out.append(Check("npu-smi", WARN, "npu-smi not found (no chip name, no Compatibility flag)",
                         "install the driver's npu-smi or mount /usr/local/bin/npu-smi (or /usr/local/sbin/npu-smi)"))

    if host.chip:
        out.append(Check("chip", OK, f"{host.chip} ({host.soc})"))
    else:
        why = next((p for p in host.problems if p.startswith("chip unknown")), "npu-smi did not name the chip")
        out.append(Check("chip", WARN, why, "run `npu-smi info -t board -i 0 -c 0` and pick images for that chip"))

    root = Path(host.root)
    missing = [d for d in CONTROL_DEVICES if not (root / d.lstrip("/")).exists()]
    if not host.devices:
        out.append(Check("devices", FAIL, "no /dev/davinciN",
                         "on the host: load the driver (install it, reboot); in a container: "
                         + explain.fix_for("no-valid-device", host)))
    elif missing:
        out.append(Check("devices", WARN, f"davinci {host.devices}, but {', '.join(missing)} missing",
                         "pass --device " + " --device ".join(missing)))
    else:
        out.append(Check("devices", OK, f"davinci {', '.join(map(str, host.devices))} and the control devices"))

    if host.shm_bytes is None:
        out.append(Check("/dev/shm", WARN, "no /dev/shm", "start containers with --shm-size=16g or --ipc=host"))
    elif host.shm_bytes < SHM_MIN_BYTES:
        out.append(Check("/dev/shm", WARN, f"{_size(host.shm_bytes)} (Docker's default is 64 MiB)",
                         "start the container with --shm-size=16g (or --ipc=host): DataLoader workers "
                         "pass batches through /dev/shm"))
    else:
        out.append(Check("/dev/shm", OK, _size(host.shm_bytes)))

    out += env_checks(environ, host)
    return out


def env_checks(environ: Mapping[str, str], host: Optional[HostInfo] = None, prefix: str = "") -> List[Check]:
    """The job-environment items of the checklist; ``prefix`` names where (``image: ``).

    Example:
        >>> [c.status for c in env_checks({"HCCL_CONNECT_TIMEOUT": "1800",
        ...     "ASCEND_GLOBAL_LOG_LEVEL": "3", "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})]
        ['OK', 'OK', 'OK', 'OK']
    """
    out: List[Check] = []
    name = prefix + "HCCL_CONNECT_TIMEOUT"
    raw = environ.get("HCCL_CONNECT_TIMEOUT")
    lo, hi = HCCL_TIMEOUT_RANGE
    if raw is None or raw == "":
        out.append(Check(name, WARN, f"unset: HCCL waits {lo} s for peers, short for multi-node start-up",
                         "export HCCL_CONNECT_TIMEOUT=1800 (the field guide's value for multi-node jobs)"))
    elif not lo <= (bounded.whole_number(raw) or 0) <= hi:  # ASCII digits only, as HCCL reads them
        out.append(Check(name, FAIL, f"{raw!r} is not an integer in [{lo}, {hi}] seconds",
                         "export HCCL_CONNECT_TIMEOUT=1800"))
    else:
        out.append(Check(name, OK, f"{raw} s"))

    name = prefix + "HCCL variables"
    hccl = {k: v for k, v in sorted(environ.items()) if k.startswith("HCCL_") or k == "ASCEND_RT_VISIBLE_DEVICES"}
    shown = ", ".join(f"{k}={v}" for k, v in hccl.items()) or "none set"
    visible = environ.get("ASCEND_RT_VISIBLE_DEVICES")
    devices = host.devices if host is not None else []
    bad = []
    if visible and devices:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        numbers = [(v, bounded.whole_number(v)) for v in ids]
        bad = [v for v, n in numbers if n is None or n >= len(devices)]
    if bad:
        out.append(Check(name, FAIL, f"ASCEND_RT_VISIBLE_DEVICES names {', '.join(bad)}, only "
                                     f"{len(devices)} device(s) visible",
                         explain.fix_for("no-valid-device", host)))
    elif str(environ.get("HCCL_DETERMINISTIC", "")).lower() == "true":
        out.append(Check(name, WARN, shown + " (deterministic collectives are slower)",
                         "unset HCCL_DETERMINISTIC outside debugging"))
    else:
        out.append(Check(name, OK, shown))

    name = prefix + "ASCEND_GLOBAL_LOG_LEVEL"
    raw = environ.get("ASCEND_GLOBAL_LOG_LEVEL")
    if raw is None or raw == "":
        out.append(Check(name, OK, "unset: CANN logs at its default 3 (ERROR)"))
    elif raw.strip() not in LOG_LEVELS:
        out.append(Check(name, WARN, f"{raw!r} is not 0-4: CANN ignores it and logs at 3 (ERROR)",
                         "export ASCEND_GLOBAL_LOG_LEVEL=3"))
    elif raw.strip() in ("0", "1"):
        out.append(Check(name, WARN, f"{raw} ({LOG_LEVELS[raw.strip()]}): log volume slows training",
                         "export ASCEND_GLOBAL_LOG_LEVEL=3 except while debugging"))
    else:
        out.append(Check(name, OK, f"{raw} ({LOG_LEVELS[raw.strip()]})"))

    name = prefix + "PYTORCH_NPU_ALLOC_CONF"
    raw = environ.get("PYTORCH_NPU_ALLOC_CONF")
    if not raw:
        out.append(Check(name, WARN, "unset: the caching allocator fragments on long runs",
                         "export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True"))
    else:
        out.append(Check(name, OK, raw))
    return out


# ---------------------------------------------------------------------------------------
# launch checks: what `run` refuses on and `doctor` reports, one function for both


@dataclass(frozen=True)
class Seen:
    """An image as found before starting it: ``where`` is ``local``, ``registry HOST`` or None (nowhere)."""

    ref: str
    where: Optional[str] = None
    labels: Mapping[str, str] = field(default_factory=dict)
    arch: Optional[str] = None

    @property
    def exists(self) -> bool:
        return self.where is not None


def names_registry(ref: str) -> bool:
    """Whether ``ref`` starts with a registry host (``HOST.DOMAIN/``, ``HOST:PORT/``, ``localhost/``).

    Example:
        >>> names_registry("127.0.0.1:5000/team/img:v1"), names_registry("ascend-build/pytorch:tag")
        (True, False)
    """
    first = ref.partition("/")[0]
    return "/" in ref and ("." in first or ":" in first or first == "localhost")


def look_up(engine, ref: str, arch: Optional[str], registry_for=None) -> Seen:
    """Find ``ref`` as `docker run` would: in the engine, else (when it names one) in its registry for ``arch``.

    ``registry_for(host)`` makes the ``Registry`` (default: ``Registry(host)`` with the
    usual credentials); an unreachable registry is its UserError, not "no such image".

    Example:
        >>> class NoEngine:
        ...     def image_id(self, ref): return None
        >>> look_up(NoEngine(), "ascend-build/pytorch:nope", "aarch64").exists
        False
    """
    if engine.image_id(ref):
        return Seen(ref, "local", engine.labels(ref), normalize_arch(engine.architecture(ref)))
    if not names_registry(ref):
        return Seen(ref)
    from builder.registry import split_reference
    from builder.registry import Registry

    host, repository, reference = split_reference(ref)
    info = (registry_for or Registry)(host).inspect(repository, reference, arch or "")
    if info is None:
        return Seen(ref)
    if not info.labels and info.architecture.startswith("none of"):  # an index without this arch
        return Seen(ref, f"registry {host}", {}, info.architecture)
    return Seen(ref, f"registry {host}", info.labels, normalize_arch(info.architecture))


def mounts_check(host: HostInfo) -> Check:
    """The driver files a container needs bind-mounted: FAIL when the node has a driver (or
    devices) but not ``builder.devices.REQUIRED_MOUNTS``; WARN on a node with no driver at all.

    Example:
        >>> mounts_check(HostInfo(root="/nonexistent")).status
        'WARN'
        >>> mounts_check(HostInfo(root="/nonexistent", devices=[0])).detail.split(":")[0]
        'the driver files a container needs are missing'
    """
    name = "driver mounts"
    missing = missing_mounts(Path(host.root))
    if not missing:
        return Check(name, OK, ", ".join(REQUIRED_MOUNTS))
    if not host.devices and not host.driver_file:
        return Check(name, WARN, "no NPU driver on this node: nothing to mount (CPU images only)",
                     "install the Ascend HDK driver to run NPU images")
    return Check(name, FAIL, f"the driver files a container needs are missing: {', '.join(missing)}",
                 "reinstall the Ascend HDK driver (npu-driver .run --full): its lib64 holds libascend_hal.so, "
                 "without which no container can open the NPU")


def arch_check(host: HostInfo, image_arch: Optional[str], labels: Mapping[str, str]) -> List[Check]:
    """``image: arch``: FAIL when the image is for another arch than the node; none when unknown.

    Example:
        >>> [c.status for c in arch_check(HostInfo(arch="aarch64"), "amd64", {})]
        ['FAIL']
    """
    arch = normalize_arch(image_arch)
    if not arch and image_arch:  # an index without this arch: "none of: amd64"
        return [Check("image: arch", FAIL, f"image has {image_arch}, host {host.arch or 'unknown'}",
                      explain.fix_for("platform-mismatch", host, labels, image_arch=str(image_arch)))]
    if not arch:
        return []
    if host.arch and arch != host.arch:
        return [Check("image: arch", FAIL, f"image {arch}, host {host.arch}",
                      explain.fix_for("platform-mismatch", host, labels, image_arch=arch))]
    return [Check("image: arch", OK if host.arch else WARN, f"image {arch}, host {host.arch or 'unknown'}")]


def launch_checks(host: HostInfo, seen: Optional[Seen]) -> List[Check]:
    """Whether an image can start here: the driver mounts, and (``seen`` given) that the image exists
    and is for this node's arch. `run` refuses on any FAIL; `doctor` reports them.

    Example:
        >>> [c.name for c in launch_checks(HostInfo(root="/nonexistent"), Seen("nope:1"))]
        ['driver mounts', 'image: exists']
    """
    out = [mounts_check(host)]
    if seen is None:
        return out
    if not seen.exists:
        where = "in the Docker Engine" + (" nor in its registry" if names_registry(seen.ref) else "")
        return out + [Check("image: exists", FAIL, f"{seen.ref}: no such image {where}",
                            "check the name and tag (`docker images`), or pull it first "
                            "(`ascend-build pull` prints the reference to run)")]
    return out + [Check("image: exists", OK, f"{seen.ref} ({seen.where})")] + arch_check(host, seen.arch, seen.labels)


# ---------------------------------------------------------------------------------------
# image checks


# Sent with the probe as source: an image may have no copy of them.
_SENT_MODULES = {"parsers": Path(parsers.__file__), "vocabulary": Path(vocabulary.__file__)}
_PROBE = Path(doctor_probe.__file__)


def probe_program() -> str:
    """The ``python3 -c`` program run in the image: ``parsers.py`` and ``vocabulary.py``
    bound as modules, then ``doctor_probe.py``.

    Example:
        >>> program = probe_program()
        >>> "def find_cann" in program and "json.dumps(facts())" in program
        True
    """
    bind = "import types\n"
    for name, path in _SENT_MODULES.items():
        bind += (f"{name} = types.ModuleType({name!r})\n"
                 f"exec(compile({path.read_text(encoding='utf-8')!r}, {path.name!r}, 'exec'), {name}.__dict__)\n")
    return bind + _PROBE.read_text(encoding="utf-8")


def parse_probe(stdout: str) -> Optional[Dict[str, Any]]:
    """The JSON the program printed (last marked line), None when there is none.

    Example:
        >>> parse_probe('noise\\nASCEND_BUILD_DOCTOR {"python": "3.11.2"}\\n')
        {'python': '3.11.2'}
    """
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            try:
                data = documents.load_json(line[len(MARK):], "the probe's answer")
            except ValueError:  # no JSON, or documents.Refused
                return None
            return data if isinstance(data, dict) else None
    return None


def probe_image(engine, ref: str) -> Dict[str, Any]:
    """The probe's facts from inside ``ref`` (`record --image`); UserError (exit 1) when ``ref`` does
    not exist, python3 cannot run in it, or it prints no facts.

    Example:
        >>> class NoImage:
        ...     def run(self, ref, command, timeout): raise UserError(f"image {ref} not found", exit_code=1)
        >>> probe_image(NoImage(), "nope:1")
        Traceback (most recent call last):
        builder.errors.UserError: image nope:1 not found
    """
    try:
        result = engine.run(ref, ["python3", "-c", probe_program()], timeout=PROBE_TIMEOUT)
    except UserError:
        raise
    except Exception as exc:  # docker SDK errors, e.g. no python3 in the image
        text = str(getattr(exc, "explanation", None) or exc).strip()[:300]
        raise UserError(f"cannot run python3 in {ref}: {text}", exit_code=1,
                        fix="the image needs python3 on PATH (its job's interpreter)") from None
    return probe_facts(result.stdout, result.stderr, result.exit_code, f"python3 in {ref}",
                       fix=f"run `docker run --rm {ref} python3 -c 'import sys'` and read the error")


def probe_facts(stdout: str, stderr: str, exit_code: int, who: str, fix: str) -> Dict[str, Any]:
    """The facts the probe printed (``parse_probe``), or a UserError (exit 1) naming ``who`` ran it,
    its exit code and the last line it printed: one refusal for `record` and `doctor` alike.

    Example:
        >>> try:
        ...     probe_facts("", "Traceback ...\\nSyntaxError: invalid syntax", 1, "python3 in img:1", fix="-")
        ... except UserError as exc:
        ...     print(exc.message)
        python3 in img:1 exited 1 without its facts: SyntaxError: invalid syntax
    """
    found = parse_probe(stdout)
    if found is None:
        text = (stderr or stdout).strip()
        raise UserError(f"{who} exited {exit_code} without its facts: "
                        f"{text.splitlines()[-1][:300] if text else 'no output'}", exit_code=1, fix=fix)
    return found


def image_checks(labels: Mapping[str, str], facts: Mapping[str, Any], host: HostInfo) -> List[Check]:
    """Image vs host, from the labels and the in-image facts (``parse_probe`` output); no engine.

    Example:
        >>> checks = image_checks({Label.MIN_DRIVER: "25.0.RC1"}, {}, HostInfo(driver="24.1.rc3"))
        >>> [(c.name, c.status) for c in checks if c.name == "image: driver vs CANN"]
        [('image: driver vs CANN', 'FAIL')]
    """
    kb = knowledge.load()
    out: List[Check] = []

    def lab(key: str) -> Optional[str]:
        return labels.get(key) or None

    cell, npu = lab(Label.CELL), lab(Label.VARIANT) == NPU

    if cell:
        out.append(Check("image: built by ascend-build", OK, f"cell {cell} ({lab(Label.VARIANT) or '?'})"))
        if lab(Label.VALIDATED) == "true":
            out.append(Check("image: validated", OK, f"smoke tiers {lab(Label.VALIDATED_TIERS) or '?'} on "
                                                     f"{lab(Label.VALIDATED_DEVICE) or '?'}"))
        else:
            out.append(Check("image: validated", WARN, f"not sealed: a {CANDIDATE_SUFFIX} or unvalidated image",
                             "run `ascend-build promote <image>` on an NPU host first"))
    else:
        out.append(Check("image: built by ascend-build", WARN, "no io.ascend-build labels: only in-image facts "
                         "are checked", "use an image built by ascend-build, or check pairings by hand"))

    if lab(Label.CHIP):
        if host.chip and host.chip != lab(Label.CHIP):
            out.append(Check("image: chip", FAIL, f"image built for {lab(Label.CHIP)}, host has {host.chip}",
                             f"use the image of this cell built for chip {host.chip}: the CANN ops package is per chip"))
        else:
            out.append(Check("image: chip", OK if host.chip else WARN,
                             f"image {lab(Label.CHIP)}, host {host.chip or 'unknown'}"))

    found = [f.get("version") for f in facts.get("cann") or [] if f.get("version")]
    cann = lab(Label.CANN) or (found[0] if found else None)
    if found and lab(Label.CANN) and not all(versions.lenient("cann", f) == versions.lenient("cann", lab(Label.CANN)) for f in found):
        out.append(Check("image: CANN", FAIL, f"label says {lab(Label.CANN)}, files say {', '.join(found)}",
                         "rebuild the image: its CANN is not the one it was validated with"))
    elif facts and not found and (npu or facts.get("torch_npu")):
        out.append(Check("image: CANN", FAIL, "no CANN version file at " + ", ".join(facts.get("cann_looked") or []),
                         explain.fix_for("cann-env-not-set", host, labels)))
    elif found:
        out.append(Check("image: CANN", OK, ", ".join(found)))
    elif facts:
        what = "the CPU twin: no CANN by design" if lab(Label.VARIANT) == CPU else "no CANN in the image (a CPU image?)"
        out.append(Check("image: CANN", WARN, what, "use the NPU variant on NPU nodes"))

    need = lab(Label.MIN_DRIVER) or (kb.drivers.min_driver(cann, lab(Label.PRODUCT) or "") if cann else None)
    if need:
        meets = versions.meets_minimum("hdk", host.driver, need)
        if meets is None:
            out.append(Check("image: driver vs CANN", WARN, f"image needs driver >= {need}; host driver "
                                                            f"{host.driver or 'unknown'}",
                             "run doctor on the NPU host (with /usr/local/Ascend/driver/version.info)"))
        elif not meets:
            out.append(Check("image: driver vs CANN", FAIL, f"host driver {host.driver} < {need} "
                                                            f"(CANN {cann or '?'} needs it)",
                             explain.fix_for("driver-too-old", host, labels, image_min_driver=need, image_cann=cann)))
        else:
            out.append(Check("image: driver vs CANN", OK, f"host driver {host.driver} >= {need}"))

    if lab(Label.MIN_FIRMWARE):
        meets = versions.meets_minimum("firmware", host.firmware, lab(Label.MIN_FIRMWARE))
        if meets is False:
            out.append(Check("image: firmware", FAIL, f"host firmware {host.firmware} < {lab(Label.MIN_FIRMWARE)}",
                             explain.fix_for("firmware-driver-mismatch", host, labels)))
        elif meets:
            out.append(Check("image: firmware", OK, f"host firmware {host.firmware} >= {lab(Label.MIN_FIRMWARE)}"))

    out += _torch_checks(kb, lab, facts, cann, npu, host, labels)

    if facts:
        prefix, base = facts.get("prefix"), facts.get("base_prefix")
        conda_env = (facts.get("env") or {}).get("CONDA_DEFAULT_ENV")
        if prefix and base and prefix != base:
            out.append(Check("image: Python env isolation", OK, f"venv {prefix}"))
        elif conda_env and conda_env != "base":
            out.append(Check("image: Python env isolation", OK, f"conda env {conda_env}"))
        else:
            out.append(Check("image: Python env isolation", WARN, f"{facts.get('executable')} is the system/base "
                             "Python", "install the stack into a dedicated venv or conda env per job "
                             "(ascend-build images use /opt/venv or /opt/conda/envs/ascend)"))
        out += env_checks(facts.get("env") or {}, None, prefix="image: ")
    return out


def _torch_checks(kb, lab, facts, cann, npu, host, labels) -> List[Check]:
    out: List[Check] = []
    tnpu = facts.get("torch_npu") or (lab(Label.TORCH_NPU) if not facts else None)
    torch = facts.get("torch") or (lab(Label.TORCH) if not facts else None)
    if not tnpu:
        if npu:
            out.append(Check("image: torch_npu vs CANN", FAIL, "torch_npu is not installed",
                             explain.fix_for("torch-npu-not-importable", host, labels)))
        elif facts:
            what = ("the CPU twin: no torch_npu by design" if lab(Label.VARIANT) == CPU
                    else "no torch_npu in the image (a CPU image?)")
            out.append(Check("image: torch_npu vs CANN", WARN, what, "use the NPU variant on NPU nodes"))
        return out
    rel = kb.releases.torch_npu(tnpu)
    values = dict(image_torch_npu=tnpu, image_cann=cann)
    if rel is None:
        what = "was never published on PyPI" if kb.releases.unpublished(tnpu) is None else "is named by Huawei but has no PyPI files"
        out.append(Check("image: torch_npu vs CANN", FAIL, f"torch_npu {tnpu} {what}",
                         f"install a published torch_npu paired with CANN {cann or '?'} (`ascend-build kb cann {cann or '<version>'}`)"))
        return out
    if rel.cann is None:
        out.append(Check("image: torch_npu vs CANN", WARN, f"torch_npu {tnpu} has no published CANN pairing",
                         "prefer a torch_npu release with a stated CANN pairing"))
    elif cann is None:
        out.append(Check("image: torch_npu vs CANN", WARN, f"torch_npu {tnpu} pairs with CANN {rel.cann}; "
                                                           "the image's CANN is unknown", "check ASCEND_HOME_PATH"))
    elif (fit := kb.releases.cann_fit(tnpu, cann)) is not None and fit.kind == "window":  # validate's own fit
        out.append(Check("image: torch_npu vs CANN", OK, f"torch_npu {tnpu} + CANN {cann}: not its pair (CANN "
                                                         f"{rel.cann}), but a published table of its PTA {fit.pta} "
                                                         f"lists it ({fit.sources[0]})"))
    elif fit is not None and fit.kind in ("adjacent", "downstream", "uncovered"):  # validate's warnings: warned here
        why = {"adjacent": "a later release of its paired line, inferred compatible but not published",
               "downstream": f"not published for it, but a downstream project ships this pair ({fit.evidence})",
               "uncovered": f"not covered by any published table of its PTA {fit.pta or '(unknown)'}"}[fit.kind]
        out.append(Check("image: torch_npu vs CANN", WARN, f"torch_npu {tnpu} pairs with CANN {rel.cann}; CANN {cann} is "
                                                           + why, "run a training step of the image on this node "
                                                           f"before relying on it, or use an image with CANN {rel.cann}"))
    elif fit is None or fit.kind == "mismatch":  # None: a CANN that is no version, as before
        listed = f" (a published table lists CANN {', '.join(fit.compatible)} for its PTA {fit.pta}: {fit.sources[0]})" \
            if fit is not None else ""
        out.append(Check("image: torch_npu vs CANN", FAIL, f"torch_npu {tnpu} pairs with CANN {rel.cann}, "
                                                           f"the image has {cann}" + listed,
                         explain.fix_for("torch-npu-cann-mismatch", host, labels, **values)))
    else:
        out.append(Check("image: torch_npu vs CANN", OK, f"torch_npu {tnpu} + CANN {cann}"))
    if torch is None:
        out.append(Check("image: torch vs torch_npu", FAIL, f"torch is not installed (torch_npu {tnpu} needs "
                                                            f"{rel.torch})", f"pip install torch=={rel.torch}"))
    elif torch.split("+")[0] != rel.torch:
        out.append(Check("image: torch vs torch_npu", FAIL, f"torch {torch}, torch_npu {tnpu} needs {rel.torch}",
                         f"pip install torch=={rel.torch} (x86_64 below 2.12: the +cpu build from the PyTorch CPU index)"))
    else:
        out.append(Check("image: torch vs torch_npu", OK, f"torch {torch}"))
    py = ".".join(str(facts.get("python") or "").split(".")[:2])
    arch = normalize_arch(facts.get("arch") or lab(Label.ARCH))
    wheels = rel.python.get(arch or "", ())
    if py and wheels and py not in wheels:
        out.append(Check("image: Python vs torch_npu", FAIL, f"Python {py}; torch_npu {tnpu} has wheels for "
                                                             f"{', '.join(wheels)} on {arch}",
                         f"use Python {wheels[-1]} for torch_npu {tnpu}"))
    return out


def doctor_image(engine, ref: str, host: HostInfo) -> List[Check]:
    """Run the in-image probe in ``ref`` and check it against ``host``; labels via ``engine.labels``.

    A container that cannot run ``python3`` gives one FAIL check (with the explained
    error when the output names a known one), not an exception.
    """
    labels = engine.labels(ref)  # UserError (exit 1) when the image does not exist
    try:
        result = engine.run(ref, ["python3", "-c", probe_program()], timeout=PROBE_TIMEOUT)
    except UserError as exc:
        return image_checks(labels, {}, host) + [Check("image: probe", FAIL, exc.message, exc.fix or
                                                       "check that the image has python3 on PATH")]
    except Exception as exc:  # docker SDK errors, e.g. no python3 in the image
        text = str(getattr(exc, "explanation", None) or exc)
        return image_checks(labels, {}, host) + [Check("image: probe", FAIL, f"cannot run python3 in {ref}: "
                                                       f"{text.strip()[:300]}", "the image needs python3 on PATH")]
    facts = parse_probe(result.stdout)
    if facts is None:
        text = (result.stderr or result.stdout).strip()
        known = explain.explain(text, host, labels)
        return image_checks(labels, {}, host) + [Check(
            "image: probe", FAIL, f"python3 in {ref} exited {result.exit_code}: {text.splitlines()[-1][:300] if text else 'no output'}",
            known[0].fix if known else "run `docker run --rm <image> python3 -c 'import sys'` and read the error")]
    return image_checks(labels, facts, host)


def run_doctor(image: Optional[str] = None, root: Path = Path("/"), environ: Optional[Mapping[str, str]] = None,
               engine=None, run_npu_smi: bool = True) -> List[Check]:
    """``ascend-build doctor [--image IMAGE]``: probe this node, check it, and the image if given.

    The launch checks (driver mounts, the image's existence and arch) are ``launch_checks``,
    the function `run` refuses with.

    ``engine`` defaults to ``Engine.connect()`` when an image is named (UserError, exit 1,
    when no engine answers).
    """
    environ = dict(os.environ if environ is None else environ)
    host = probe(root, run_npu_smi=run_npu_smi, environ=environ)
    checks = run_host_checks(host, environ)
    if not image:
        return checks + launch_checks(host, None)
    if engine is None:
        from builder.engine import Engine

        engine = Engine.connect()
    seen = look_up(engine, image, host.arch)
    checks += launch_checks(host, seen)
    if seen.where == "local":
        checks += doctor_image(engine, image, host)
    elif seen.exists:
        checks.append(Check("image: probe", WARN, f"{image} is in {seen.where}, not in the Docker Engine: "
                                                  "its insides are unchecked", f"docker pull {image}, then doctor again"))
    return checks


def format_checks(checks: Sequence[Check]) -> str:
    """A status/check/detail table, each fix under its line, and a count line.

    Example:
        >>> print(format_checks([Check("driver", FAIL, "none", "install it")]))
        FAIL  driver  none
              fix: install it
        <BLANKLINE>
        1 FAIL, 0 WARN, 0 OK
    """
    width = max((len(c.name) for c in checks), default=0)
    lines = []
    for c in checks:
        lines.append(f"{c.status:<4}  {c.name:<{width}}  {c.detail}".rstrip())
        if c.fix and c.status != OK:
            lines.append(f"{'':<4}  fix: {c.fix}")
    counts = {s: sum(c.status == s for c in checks) for s in (FAIL, WARN, OK)}
    lines += ["", f"{counts[FAIL]} FAIL, {counts[WARN]} WARN, {counts[OK]} OK"]
    return "\n".join(lines)


__all__ = ["Check", "OK", "WARN", "FAIL", "Seen", "look_up", "launch_checks", "mounts_check", "arch_check",
           "names_registry", "probe_image", "probe_facts", "run_host_checks", "env_checks", "check_pairing", "image_checks",
           "doctor_image", "run_doctor", "format_checks", "checks_to_dicts", "exit_code",
           "driver_in_ranges", "probe_program", "parse_probe"]
