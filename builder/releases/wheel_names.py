"""What a wheel's file name and its METADATA text say: arch, Python versions, manylinux floor, the torch pin."""

from __future__ import annotations

import email.parser
import re
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

_MANYLINUX_LEGACY = {"manylinux1": "2_5", "manylinux2010": "2_12", "manylinux2014": "2_17"}
# [0-9], not \d: \d also matches other scripts' digits ('cp٣١١'), which no real tag has
# and {1,9}: int() of a longer number is slow, and refused from 4300 digits on
_PLATFORM = re.compile(r"^(?:(manylinux_([0-9]{1,9})_([0-9]{1,9}))|(manylinux1|manylinux2010|manylinux2014)|linux)"
                       r"_(x86_64|aarch64)$")
_CPYTHON = re.compile(r"^cp([0-9])([0-9]{1,9})$")


@dataclass(frozen=True)
class WheelName:
    """The parts of a wheel file name (wheel spec: name-version(-build)?-pytag-abitag-plat.whl).

    Example:
        >>> w = parse_wheel_filename("torch_npu-2.4.0-cp310-cp310-manylinux_2_17_aarch64.manylinux2014_aarch64.whl")
        >>> w.version, w.arch, w.pythons, w.manylinux
        ('2.4.0', 'aarch64', ('3.10',), '2_17')
    """

    filename: str
    name: str
    version: str
    build: str
    python_tags: Tuple[str, ...]
    abi_tags: Tuple[str, ...]
    platform_tags: Tuple[str, ...]
    arch: Optional[str]
    pythons: Tuple[str, ...]
    manylinux: Optional[str]


def parse_wheel_filename(filename: str) -> WheelName:
    """Split a wheel file name into its tags; ValueError when it is no wheel name.

    The arch comes from the Linux platform tags (x86_64 / aarch64), the Python
    versions from ``cpXY`` tags, the manylinux floor from ``manylinux_2_NN`` and the
    legacy aliases (manylinux2014 = 2_17); a compressed tag set (``a.b``) counts its
    lowest glibc, since any one of its tags suffices.

    Example:
        >>> w = parse_wheel_filename("torch_npu-2.15.0-1-cp310.cp311-cp310.cp311-manylinux_2_28_x86_64.whl")
        >>> w.build, w.pythons, w.arch, w.manylinux
        ('1', ('3.10', '3.11'), 'x86_64', '2_28')
    """
    if not filename.endswith(".whl"):
        raise ValueError("not a wheel")
    parts = filename[: -len(".whl")].split("-")
    if len(parts) not in (5, 6):
        raise ValueError("a wheel name has 5 or 6 dash-separated parts")
    name, version_text = parts[0], parts[1]
    build = parts[2] if len(parts) == 6 else ""
    py, abi, plat = (tuple(p.split(".")) for p in parts[-3:])
    parsed = pep440(version_text)
    if parsed is None:
        raise ValueError(f"version {version_text[:40]!r} is not PEP 440")
    arches = {m.group(5) for m in map(_PLATFORM.match, plat) if m}
    floors = [f for f in (_glibc_of(m) for m in map(_PLATFORM.match, plat) if m) if f]
    pythons = tuple(sorted({f"{m.group(1)}.{m.group(2)}" for m in map(_CPYTHON.match, py) if m}, key=python_key))
    return WheelName(
        filename=filename, name=name, version=str(parsed), build=build, python_tags=py, abi_tags=abi,
        platform_tags=plat, arch=(arches.pop() if len(arches) == 1 else None), pythons=pythons,
        manylinux=(min(floors, key=glibc_key) if floors else None),
    )


def _glibc_of(m: "re.Match[str]") -> Optional[str]:
    if m.group(1):
        return f"{m.group(2)}_{m.group(3)}"
    return _MANYLINUX_LEGACY.get(m.group(4) or "")


def glibc_key(tag: str) -> Tuple[int, ...]:
    """A manylinux glibc tag as a sort key (``2_28`` after ``2_5``).

    Example:
        >>> max(["2_5", "2_28", "2_17"], key=glibc_key)
        '2_28'
    """
    return tuple(int(x) for x in tag.split("_"))


def python_key(py: str) -> Tuple[int, ...]:
    """A Python version as a sort key (``3.10`` after ``3.9``).

    Example:
        >>> sorted(["3.10", "3.9", "3.11"], key=python_key)
        ['3.9', '3.10', '3.11']
    """
    return tuple(int(x) for x in py.split("."))


def parse_metadata(text: str) -> Tuple[str, str, Tuple[str, ...], str]:
    """(Name, Version, Requires-Dist lines, Requires-Python) of a core METADATA file.

    Example:
        >>> parse_metadata("Metadata-Version: 2.1\\nName: torch_npu\\nVersion: 2.15.0\\n"
        ...                "Requires-Python: >=3.10\\nRequires-Dist: torch==2.15.0.*\\nRequires-Dist: numpy\\n\\nbody")
        ('torch_npu', '2.15.0', ('torch==2.15.0.*', 'numpy'), '>=3.10')
    """
    headers = email.parser.HeaderParser().parsestr(text)
    return (
        str(headers.get("Name", "")).strip(),
        str(headers.get("Version", "")).strip(),
        tuple(str(v).strip() for v in headers.get_all("Requires-Dist") or ()),
        str(headers.get("Requires-Python", "") or "").strip(),
    )


def torch_pin(requires_dist: Sequence[str]) -> str:
    """The Requires-Dist line that names torch, exactly as written ("" when none).

    Example:
        >>> torch_pin(["numpy", "torch==2.15.0.*", "pyyaml"])
        'torch==2.15.0.*'
    """
    for line in requires_dist:
        try:
            if canonicalize_name(Requirement(line).name) == "torch":
                return line
        except InvalidRequirement:
            continue
    return ""


def torch_of_pin(pin: str) -> Optional[str]:
    """The torch release an exact pin names (``torch==2.1.0+cpu`` / ``torch==2.15.0.*`` -> X.Y.Z).

    Example:
        >>> torch_of_pin("torch==2.1.0+cpu"), torch_of_pin("torch==2.15.0.*"), torch_of_pin("torch>=2")
        ('2.1.0', '2.15.0', None)
    """
    try:
        specs = list(Requirement(pin).specifier)
    except InvalidRequirement:
        return None
    for spec in specs:
        if spec.operator in ("==", "==="):
            text = spec.version[:-2] if spec.version.endswith(".*") else spec.version
            found = pep440(text)
            return found.base_version if found is not None else None
    return None


def normal_version(text: str) -> str:
    """The PEP 440 normal form of a version, to compare versions as written by hand; other text as is.

    Example:
        >>> normal_version("2.1.0-post3"), normal_version("not a version")
        ('2.1.0.post3', 'not a version')
    """
    found = pep440(text)
    return str(found) if found is not None else text


def pep440(text: str) -> Optional[Version]:
    """``text`` as a PEP 440 version, None when it is none (of any length: packaging's int() of a
    4300-digit part raises a plain ValueError, not InvalidVersion).

    Example:
        >>> pep440("2.1.0-post3"), pep440("1" * 5000)
        (<Version('2.1.0.post3')>, None)
    """
    try:
        return Version(text)
    except ValueError:
        return None
