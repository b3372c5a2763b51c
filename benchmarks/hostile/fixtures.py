"""Files the hostile inputs are made of: matrices, fake host roots, render trees, snapshots.

Everything is written under a folder the suite owns (a TemporaryDirectory); nothing here
touches the repository. Adapted from the audit's mkroot.py, mkfix.sh and inj/ files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import Dict, Iterable, Optional, Tuple

# --- matrices -------------------------------------------------------------------

HEAD = "image: ascend-build/pytorch\ndefaults:\n  os: ubuntu22.04\n  env: conda\n  cann_source: installer\ncells:\n"
CELL = ("  - cann: 7.0.RC1\n    chip: 910b\n    arch: {arch}\n    python: \"3.9\"\n    torch: 2.1.0\n"
        "    torch_npu: 2.1.0rc1\n    driver: 23.0.RC3\n")
M2 = HEAD + CELL.format(arch="[aarch64, x86_64]")   # two cells (one per arch): the usual render target
M1 = HEAD + CELL.format(arch="aarch64")             # one of those two
M0 = "image: ascend-build/pytorch\ncells: []\n"
CELL_A = "cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-aarch64"
CELL_X = "cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-x86_64"

ANNOTATION = "\n::error file=x::INJECTED"   # a GitHub Actions annotation, if it starts a line
OSC = "\x1b]0;PWNED\x07"                     # sets the terminal title (click strips CSI, not OSC)


def m2_with(extra_lines: str = "", replace: Optional[Dict[str, str]] = None) -> str:
    """M2 with lines added to its cell, or with some text replaced (the injection matrices)."""
    text = M2 + extra_lines
    for old, new in (replace or {}).items():
        text = text.replace(old, new, 1)
    return text


def yq(text: str) -> str:
    """A YAML double-quoted scalar spelling ``text`` with escapes (newline, ESC, BEL, U+202E)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 32 or ch == "\x7f":
            out.append({"\n": "\\n", "\x1b": "\\e", "\x07": "\\a"}.get(ch, f"\\x{ord(ch):02x}"))
        elif ord(ch) > 126:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def key_lines(key: str, times: int = 1) -> str:
    """Cell lines giving the (quoted) key ``times`` times."""
    return "".join(f"    {yq(key)}: {i + 1}\n" for i in range(times))


INJECTION_MATRICES = {
    # label -> matrix text; each must be refused (or reported) without a raw escape or '::' line
    "key with newline+annotation": m2_with(key_lines("torch" + ANNOTATION)),
    "duplicate key with newline+annotation": m2_with(key_lines("zz" + ANNOTATION, times=2)),
    "value with CSI colour escapes": m2_with(replace={"os: ubuntu22.04": "os: " + yq("ubuntu22.04\x1b[31mRED\x1b[0m")}),
    "value with newline+annotation": m2_with(replace={'python: "3.9"': "python: " + yq("3.9" + ANNOTATION)}),
    "image with OSC+annotation": m2_with(replace={"image: ascend-build/pytorch":
                                                  "image: " + yq("ascend-build/pytorch" + OSC + ANNOTATION)}),
    "key with RTL override U+202E": m2_with(key_lines("\u202eevil")),
}
DUPKEY_ESC = m2_with(key_lines("a\x1b[2J\x1b[H", times=2))  # clears the screen if printed raw on a TTY

RUNNERS = {
    "top key with newline+annotation": f"{yq('build' + ANNOTATION)}: {{}}\n",
    "arch key with newline+annotation": f"build:\n  {yq('x86_64' + ANNOTATION)}: [a]\n",
    "label value with newline+annotation": f"npu:\n  910b: {yq('lab' + ANNOTATION)}\n",
}

# a billion laughs: 9**10 strings if the aliases were expanded
ALIAS_BOMB = "".join(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9 if i else ['"x"'] * 9) + "]\n"
                     for i in range(10)) + "build: *a9\n"


def write(path: Path, text, mode: Optional[int] = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    if mode is not None:
        path.chmod(mode)
    return path


def sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk space (all a hole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


# --- fake host roots (for host / doctor / explain / pull --root) --------------------

DRIVER_OK = "Version=24.1.rc3\ncompatible_version_fw=[7.0.0,7.5.99]\n"
FIRMWARE_OK = "Version=7.5.0.1.129\ncompatible_version_drv=[24.1,24.1.]\n"
DRIVER = "usr/local/Ascend/driver/version.info"
FIRMWARE = "usr/local/Ascend/firmware/version.info"
NPU_SMI = "usr/local/bin/npu-smi"


def host_root(root: Path, drv: Optional[str] = DRIVER_OK, fw: Optional[str] = FIRMWARE_OK,
              install: Optional[str] = None, smi: Optional[str] = None, arch: str = "x86_64") -> Path:
    """A fake host: arch, driver and firmware version.info, device nodes (empty files), and
    optionally /etc/ascend_install.info and an npu-smi shell script."""
    write(root / "proc/sys/kernel/arch", arch + "\n")
    (root / "dev/shm").mkdir(parents=True, exist_ok=True)
    (root / "etc").mkdir(parents=True, exist_ok=True)
    for name in ("davinci0", "davinci_manager", "devmm_svm", "hisi_hdc"):
        write(root / "dev" / name, "")
    (root / "usr/local/Ascend/driver").mkdir(parents=True, exist_ok=True)
    (root / "usr/local/Ascend/firmware").mkdir(parents=True, exist_ok=True)
    if drv is not None:
        write(root / DRIVER, drv)
    if fw is not None:
        write(root / FIRMWARE, fw)
    if install is not None:
        write(root / "etc/ascend_install.info", install)
    if smi is not None:
        write(root / NPU_SMI, "#!/bin/sh\n" + smi + "\n", mode=0o755)
    return root


# --- render trees ---------------------------------------------------------------


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def chattr(path: Path, flag: str) -> bool:
    """chattr +i / -i; False when the file system or the user cannot (then the input is skipped)."""
    import subprocess
    exe = shutil.which("chattr")
    if not exe:
        return False
    return subprocess.run([exe, "-R", flag, str(path)], capture_output=True).returncode == 0


# --- snapshots --------------------------------------------------------------------

Entry = Tuple[str, str, int]  # kind, sha256 (or link target), mtime_ns


def _entry(path: Path) -> Entry:
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return "link", os.readlink(path), st.st_mtime_ns
    if stat.S_ISDIR(st.st_mode):
        return "dir", "", 0  # a folder's mtime changes with harmless reads of nothing; its contents are listed
    if stat.S_ISREG(st.st_mode):
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        return "file", digest.hexdigest(), st.st_mtime_ns
    return "other", oct(st.st_mode), st.st_mtime_ns


def snapshot(paths: Iterable[Path]) -> Dict[str, Entry]:
    """sha256 + mtime of every file under the paths (symlinks not followed); 'missing' for what is not there."""
    out: Dict[str, Entry] = {}
    for top in paths:
        if not os.path.lexists(top):
            out[str(top)] = ("missing", "", 0)
            continue
        out[str(top)] = _entry(top)
        if top.is_dir() and not top.is_symlink():
            for dirpath, dirnames, filenames in os.walk(top):
                for name in dirnames + filenames:
                    p = Path(dirpath) / name
                    out[str(p)] = _entry(p)
    return out


def changed(before: Dict[str, Entry], after: Dict[str, Entry]) -> list:
    """Paths added, removed or altered between two snapshots."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
