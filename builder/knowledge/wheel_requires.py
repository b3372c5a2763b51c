"""What each torch_npu wheel declares it needs (Requires-Dist), by release, arch and Python.

Read from ``data/torch-npu-requires.yaml``, which `builder.releases.torch_npu_wheels`
generates from every wheel's METADATA as the index served it (never typed by hand). Why per
wheel: the declaration is what pip enforces when it installs torch_npu, and it differs by
arch (older x86_64 wheels require ``torch==X+cpu``, the aarch64 ones plain ``torch==X``).

A Python release picks the wheel of its CPython tag (3.11 -> ``cp311``). Where one tag has
more than one wheel (2.1.0 ships cp39 x86_64 for manylinux 2.17 and 2.27), the answer holds
the requirements of all of them, each once.

Example:
    >>> requires("2.9.0", "x86_64", "3.11"), requires("2.9.0", "aarch64", "3.11")
    (('torch==2.9.0+cpu',), ('torch==2.9.0',))
    >>> requires("2.13.0", "x86_64", "3.11"), requires("2.9.0", "x86_64", "3.8") is None
    (('torch==2.13.0.*', 'numpy', 'pyyaml'), True)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from builder.errors import UserError
from builder.knowledge.files import DATA_DIR, read_yaml

REQUIRES_FILE = DATA_DIR / "torch-npu-requires.yaml"
# How a wheel's METADATA was read (the data file's ``read``), said for a person.
_READ = {"PEP 658": "read from the index's PEP 658 metadata",
         "range read": "read from the wheel's METADATA by HTTP range requests"}


@dataclass(frozen=True)
class WheelRequires:
    """One wheel's declaration: ``requires_dist`` exactly as its METADATA writes it, and
    ``read`` says how that METADATA was read ("PEP 658" | "range read")."""

    version: str
    arch: str
    python: str  # the wheel's Python tag, "cp311"
    wheel: str
    requires_dist: Tuple[str, ...]
    requires_python: str
    read: str
    fixture: str

    @property
    def source(self) -> str:
        """How its declaration was read, said for a person.

        Example:
            >>> wheels("2.9.0", "aarch64", "3.11")[0].source
            "read from the wheel's METADATA by HTTP range requests"
        """
        return _READ.get(self.read, f"read by {self.read}")


def python_tag(python: str) -> str:
    """The CPython wheel tag of a Python release ("" for what is none); a tag stays as it is.

    Example:
        >>> python_tag("3.11"), python_tag("3.9.18"), python_tag("cp312"), python_tag("x")
        ('cp311', 'cp39', 'cp312', '')
    """
    if python.startswith("cp"):
        return python
    parts = python.split(".")
    return f"cp{parts[0]}{parts[1]}" if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit() else ""


@lru_cache(maxsize=1)
def _table() -> Dict[Tuple[Version, str, str], Tuple[WheelRequires, ...]]:
    """The data file's wheels by (version, arch, Python tag), read once per process."""
    out: Dict[Tuple[Version, str, str], List[WheelRequires]] = {}
    document = read_yaml(REQUIRES_FILE)
    for release in document.get("releases") or ():
        version = str(release["version"])
        for row in release.get("wheels") or ():
            entry = WheelRequires(version, str(row["arch"]), str(row["python"]), str(row["wheel"]),
                                  tuple(str(line) for line in row.get("requires_dist") or ()),
                                  str(row.get("requires_python") or ""), str(row["read"]), str(row["fixture"]))
            for tag in entry.python.split("."):  # a compressed tag set (cp310.cp311) serves each of its tags
                out.setdefault((Version(version), entry.arch, tag), []).append(entry)
    if not out:
        raise UserError(f"{REQUIRES_FILE} lists no torch_npu wheel", fix="regenerate it with make knowledge")
    return {key: tuple(rows) for key, rows in out.items()}


def wheels(torch_npu_version: str, arch: str, python: str) -> Tuple[WheelRequires, ...]:
    """The wheels of that release for that arch and Python (a release "3.11" or a tag "cp311"); () when none is known.

    Example:
        >>> [w.wheel for w in wheels("2.9.0", "x86_64", "3.11")]
        ['torch_npu-2.9.0-cp311-cp311-manylinux_2_28_x86_64.whl']
    """
    try:
        version = Version(torch_npu_version)
    except InvalidVersion:
        return ()
    return _table().get((version, arch, python_tag(python)), ())


def requires(torch_npu_version: str, arch: str, python: str) -> Optional[Tuple[str, ...]]:
    """The Requires-Dist of that wheel, each requirement as declared (a PEP 508 string); None
    when no wheel of that version, arch and Python is known."""
    found = wheels(torch_npu_version, arch, python)
    if not found:
        return None
    seen, out = set(), []
    for entry in found:
        for line in entry.requires_dist:
            same = str(Requirement(line))  # "torch ==2.9.0" and "torch==2.9.0" are one requirement
            if same not in seen:
                seen.add(same)
                out.append(line)
    return tuple(out)


__all__ = ["REQUIRES_FILE", "WheelRequires", "python_tag", "wheels", "requires"]
