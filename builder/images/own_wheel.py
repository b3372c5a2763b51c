"""A torch_npu wheel the matrix brings itself (a custom or pre-release build), named by
path or URL and sha256: ``torch_npu_wheel: {path: wheels/torch_npu-2.13.0-....whl, sha256: HEX}``
or ``{url: https://.../torch_npu-....whl, sha256: HEX}``.

Three places read it, and each checks the bytes before trusting them: `validate` (when
the file is on this machine; a URL is not fetched there), `lock` (which records exactly
that sha256 for torch-npu) and `image` (which puts the file into the build context, where
the install step checks the hash once more). A relative path is read from the directory
ascend-build runs in, as ``cann_source: {local: DIR}`` is; a URL is downloaded (to a
temporary folder for `lock`, to the state folder for `image`) and kept only when its
bytes match.

Example:
    >>> fits("torch_npu-2.13.0-cp311-cp311-manylinux_2_17_x86_64.whl", "2.13.0", "3.11", "x86_64")
    ''
    >>> fits("torch_npu-2.13.0-cp310-cp310-manylinux_2_17_aarch64.whl", "2.13.0", "3.11", "x86_64")
    'is built for cp310 on manylinux_2_17_aarch64, not CPython 3.11 on x86_64'
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Optional, Tuple

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from builder.images import fetch
from builder.errors import UserError


def fits(name: str, version: str, python: str, arch: str) -> str:
    """Why the wheel file ``name`` cannot be torch_npu ``version`` for CPython ``python``
    on ``arch`` ("" when it can): read from the file name alone, as installers do."""
    try:
        project, wheel_version, _, tags = parse_wheel_filename(name)
    except InvalidWheelFilename:
        return "is not a wheel file name (NAME-VERSION-PYTHON-ABI-PLATFORM.whl)"
    if project != canonicalize_name("torch_npu"):
        return f"is a wheel of {project}, not of torch_npu"
    if wheel_version != Version(version):
        return f"is torch_npu {wheel_version}, not {version}"
    cp = "cp" + python.replace(".", "")
    if not any(t.interpreter in (cp, "py3") and (t.platform == "any" or t.platform.endswith(arch)) for t in tags):
        built = sorted({f"{t.interpreter} on {t.platform}" for t in tags})
        return f"is built for {', '.join(built)}, not CPython {python} on {arch}"
    return ""


def is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def file_name(location: str) -> str:
    """The wheel's file name, from a path or from a URL's path (``%2B`` read as ``+``).

    >>> file_name("https://example.invalid/whl/torch_npu-2.9.0.post1%2Bgitdc51c2d-cp311-cp311-linux_x86_64.whl")
    'torch_npu-2.9.0.post1+gitdc51c2d-cp311-cp311-linux_x86_64.whl'
    """
    if is_url(location):
        return urllib.parse.unquote(urllib.parse.urlsplit(location).path.rsplit("/", 1)[-1])
    return Path(location).name


def mismatch(path: Path, sha256: str) -> Optional[str]:
    """None when ``path`` holds bytes of ``sha256``; else the sha256 it does hold ("" when
    it is not a readable file)."""
    try:
        found = fetch.file_sha256(path) if path.is_file() else ""
    except OSError:
        found = ""
    return None if found == sha256 else found


def other_bytes(path: str, found: str, sha256: str) -> Tuple[str, str]:
    """(message, fix) for a wheel whose bytes are not those of its sha256: validate and image say the same."""
    return (f"{path} has sha256 {found}, not the {sha256} the matrix gives",
            "use the file the matrix names, or write its sha256 there if this build is the one you mean")


def verified(path: str, sha256: str, downloads: Optional[Path] = None) -> Path:
    """The wheel at ``path`` (a URL: downloaded into ``downloads``), after checking its bytes
    against ``sha256``."""
    if is_url(path):
        if downloads is None:
            raise ValueError("a wheel named by URL needs a folder to download it into")
        return fetch.download(path, downloads / sha256[:16] / file_name(path), sha256)
    found = mismatch(Path(path), sha256)
    if found is None:
        return Path(path)
    if not found:
        raise UserError(f"torch_npu wheel {path} is not a readable file",
                        fix="check torch_npu_wheel.path (a relative path is read from the directory ascend-build runs in)")
    message, fix = other_bytes(path, found, sha256)
    raise UserError(f"torch_npu wheel {message}", fix=fix)
