r"""Readers of the files Ascend leaves on a machine: said once, used in images and on nodes.

The smoke program (inside an image) and the node wing (``builder.node.host``,
``record``, and doctor's in-image probe) read the same ``version.info``, ``version.cfg``,
``*_install.info`` files and the same package metadata, so both use these functions.
Standard library only, Python 3.8+: this file is copied into every image beside
``smoke.py``.

Example:
    >>> parse_kv("Version=24.1.rc3\n# note\nVersion=ignored")
    {'Version': '24.1.rc3'}
    >>> cann_version_from_cfg("toolkit_running_version=[7.6.0.1.220:8.0.0]")
    '8.0.0'
"""
from __future__ import annotations

import importlib.metadata
import os
import re

# Where Ascend's installers put things (the same paths on hosts and in images).
DEFAULT_HOME = "/usr/local/Ascend/ascend-toolkit/latest"
DRIVER_DIR = "/usr/local/Ascend/driver"
DRIVER_LIB64 = DRIVER_DIR + "/lib64"
DRIVER_INFO = DRIVER_DIR + "/version.info"
FIRMWARE_INFO = "/usr/local/Ascend/firmware/version.info"


def parse_kv(text):
    """`key=value` lines (Ascend .info/.cfg files) -> dict; first occurrence wins."""
    out: dict = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        out.setdefault(key.strip(), value.strip().strip('"').strip("'"))
    return out


def cann_version_from_cfg(text):
    """version.cfg (CANN <= 8.3): `toolkit_running_version=[7.6.0.1.220:8.0.0]` -> 8.0.0."""
    kv = parse_kv(text)
    for key in ("toolkit_running_version", "runtime_running_version"):
        m = re.match(r"^\[([^\]]*)\]", kv.get(key, ""))
        if m and m.group(1).strip():
            return m.group(1).split(":")[-1].strip() or None
    return None


def cann_version_from_install_info(text):
    """<home>/<arch>-linux/ascend_toolkit_install.info (all eras): `version=8.5.0`."""
    return parse_kv(text).get("version") or None


def info_version(text):
    """Driver/firmware version.info: `Version=24.1.rc3` / `Version=7.5.0.1.129`."""
    kv = parse_kv(text)
    return kv.get("Version") or kv.get("version") or kv.get("package_version") or None


def parse_ldd(text):
    """ldd output -> (missing names, {name: resolved path})."""
    missing, resolved = [], {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\S+)\s+=>\s+not found\s*$", line)
        if m:
            if m.group(1) not in missing:
                missing.append(m.group(1))
            continue
        m = re.match(r"^\s*(\S+)\s+=>\s+(\S+)\s+\(0x[0-9a-fA-F]+\)\s*$", line)
        if m:
            resolved[m.group(1)] = m.group(2)
    return missing, resolved


def cann_candidates(environ, manifest, arch):
    """Every path where a CANN version file may sit, in lookup order."""
    homes = []
    cann = manifest.get("cann_version")
    for h in (environ.get("ASCEND_HOME_PATH"), environ.get("ASCEND_TOOLKIT_HOME"),
              (manifest.get("env") or {}).get("ASCEND_HOME_PATH"), DEFAULT_HOME,
              "/usr/local/Ascend/cann-%s" % cann if cann else None):
        if h and h.rstrip("/") not in homes:
            homes.append(h.rstrip("/"))
    paths = []
    for h in homes:
        paths.append((os.path.join(h, "version.cfg"), cann_version_from_cfg))
        paths.append((os.path.join(h, "%s-linux" % arch, "ascend_toolkit_install.info"),
                      cann_version_from_install_info))
    return paths


def find_cann(environ, manifest, arch):
    """-> ([{path, version}], [paths looked at])."""
    found, looked = [], []
    for path, parse in cann_candidates(environ, manifest, arch):
        looked.append(path)
        if os.path.isfile(path):
            with open(path, errors="replace") as fh:
                found.append({"path": path, "version": parse(fh.read())})
    return found, looked


def read_version_info(path):
    if not os.path.isfile(path):
        return None
    with open(path, errors="replace") as fh:
        return info_version(fh.read())


def dist_version(*names):
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def canonical(name):
    """A distribution name as the lock writes it (PEP 503): ``typing_extensions`` -> ``typing-extensions``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def environment_distributions(prefix):
    """{canonical name: version} of the distributions installed under ``prefix`` (the
    environment's own site-packages; CANN's packages on PYTHONPATH are not its own)."""
    found: dict = {}
    root = os.path.realpath(prefix) + os.sep
    for dist in importlib.metadata.distributions():
        try:
            where = os.path.realpath(str(dist.locate_file("")))
        except Exception:  # a distribution without a location: not installed by pip here
            continue
        name = dist.metadata["Name"] if dist.metadata else None
        if name and (where + os.sep).startswith(root):
            found.setdefault(canonical(name), dist.version)
    return found
