"""The Python environment of an image: which torch goes with a torch_npu, which Pythons a
PyTorch line supports, what each base OS ships (glibc, python3, image), and which OS families
each CANN release's installation guide names (``os.yaml``'s ``cann_os``).

Reads ``ascend-compat.yaml`` (``pytorch_python_official``) and ``os.yaml`` once; asks the
`releases` part for a torch_npu release's data. ``known_arch`` (an arch in its canonical
spelling, or a clear error) lives here so that `builder.installers` can take it from the
knowledge base without the knowledge base importing `builder.installers`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from packaging.version import Version

from builder import versions
from builder.errors import UserError
from builder.knowledge.pairings import Releases
from builder.vocabulary import ARCHS, normalize_arch

# torch_npu releases whose x86_64 wheels pin torch==X.Y.Z+cpu (PyTorch CPU index only):
# every release below 2.12 (torch_npu_releases.note, ascend-facts.md "Compatibility rules").
_CPU_PIN_BEFORE = Version("2.12")

# Where the CPU build of torch X lives per arch. x86_64: PyPI's torch is the CUDA build; the
# CPU build is torch==X+cpu on the PyTorch CPU index (every release). aarch64: PyPI's torch was
# the CPU build up to 2.10 (pytorch/pytorch#160162: "until pytorch 2.8, the pypi wheel only has
# CPU version pytorch on aarch64"; #168065: 2.9's is CPU; measured: `uv pip compile` of
# torch==2.10.0 for aarch64-manylinux_2_35 resolves 9 distributions, no nvidia-*), and is the
# CUDA build from 2.11 (torch==2.11.0, 2.12.0, 2.13.0: 29 distributions, nvidia-cublas ...,
# cuda-toolkit; measured the same way 2026-12-01); its CPU build is then torch==X+cpu on the CPU
# index too (vllm-project/guidellm#442's pylock: torch-2.9.0+cpu-...-manylinux_2_28_aarch64.whl
# from the CPU index; Ascend/pytorch@9e73e708:README.md#L85 installs torch from that index).
_AARCH64_PYPI_CUDA_FROM = Version("2.11")


def known_arch(arch: str) -> str:
    """``arch`` in its canonical spelling (``arm64`` -> ``aarch64``); a UserError when unknown.

    Example:
        >>> known_arch("arm64")
        'aarch64'
    """
    found = arch if arch in ARCHS else normalize_arch(arch)  # the matrix's arch is canonical already
    if found is None:
        raise UserError(f"unknown arch {arch!r}", fix="use x86_64 or aarch64")
    return found


def _cpu_build(parsed: Version, arch: str) -> Tuple[str, str]:
    """`Environment.cpu_torch` of a parsed torch version on a canonical arch."""
    public = parsed.public
    if arch == "aarch64" and Version(parsed.base_version) < _AARCH64_PYPI_CUDA_FROM:
        return f"torch=={public}", "pypi"
    return f"torch=={public}+cpu", "pytorch-cpu"


@dataclass(frozen=True)
class OsInfo:
    """A supported base OS (``data/os.yaml``): what the distribution itself ships.

    Example:
        >>> from builder.knowledge import load
        >>> info = load().environment.os_info("ubuntu22.04")
        >>> info.glibc, info.python, info.image
        ((2, 35), '3.10', 'ubuntu:22.04')
    """

    id: str
    glibc: Tuple[int, int]
    python: str
    family: str
    codename: Optional[str]
    image: str
    name: str = ""
    source: str = field(default="", compare=False)


@dataclass(frozen=True)
class CannOs:
    """The OS families a CANN release's installation guide names (``os.yaml``, ``cann_os.listed``).

    ``complete`` is False for a list read only in part: a family missing from it says nothing.

    Example:
        >>> from builder.knowledge import load
        >>> stated = load().environment.cann_os("8.5.0")
        >>> stated.names("Debian"), stated.names("Alpine"), stated.complete
        (True, False, True)
    """

    cann: str
    os: Tuple[str, ...]
    complete: bool
    source: str

    def names(self, family: str) -> bool:
        """Whether the guide names that family (as the guides spell it: ``openEuler``)."""
        return family.casefold() in {o.casefold() for o in self.os}


class Environment:
    """torch pins, official Python lists, base operating systems and the OS families per CANN release."""

    def __init__(self, releases: Releases, compat: Mapping[str, Any], os_doc: Mapping[str, Any]) -> None:
        self._releases = releases
        # official Python list per PyTorch line
        table = compat.get("pytorch_python_official", {}).get("table", {})
        self._python_official = {str(k): tuple(str(p) for p in v) for k, v in table.items()}
        # base operating systems
        self._os: Dict[str, OsInfo] = {}
        for os_id, e in (os_doc.get("os") or {}).items():
            major, minor = (int(x) for x in str(e["glibc"]).split(".")[:2])
            src = e.get("source") or ""
            if isinstance(src, Mapping):
                src = "; ".join(f"{k}: {v}" for k, v in src.items())
            self._os[str(os_id)] = OsInfo(
                id=str(os_id), glibc=(major, minor), python=str(e["python"]), family=str(e["family"]),
                codename=e.get("codename"), image=str(e["image"]), name=str(e.get("name", "")), source=str(src),
            )
        # the OS families each CANN release's installation guide names, and the releases not checked
        cann_os = os_doc.get("cann_os") or {}
        self._family_names = {str(k): str(v) for k, v in (cann_os.get("family_names") or {}).items()}
        self._cann_os = {versions.cann(str(i["cann"])): CannOs(str(i["cann"]), tuple(str(o) for o in i["os"]),
                                                                 bool(i.get("complete", True)), str(i["source"]))
                         for i in cann_os.get("listed") or ()}
        self._cann_os_not_checked = {versions.cann(str(i["cann"])): str(i["why"]) for i in cann_os.get("os_not_checked") or ()}

    def torch_requirement(self, torch_npu: str, arch: str) -> Tuple[str, str]:
        """The torch pin to install next to that torch_npu, and the index it comes from.

        Rule (ascend-facts.md, torch_npu_releases.note): torch_npu X.Y.Z[.postN] needs torch
        X.Y.Z. On x86_64, every torch_npu below 2.12 pins ``torch==X.Y.Z+cpu``, which exists
        only on the PyTorch CPU index (``"pytorch-cpu"``); from 2.12 and on aarch64 always,
        plain ``torch==X.Y.Z`` from PyPI (``"pypi"``). The exact pin also satisfies the
        ``torch==X.Y.Z.*`` that wheels from 2.13.0 declare. Works for versions not on PyPI
        too (torch is the version's release part).

        Raises UserError for an unknown arch or a string that is no version.

        Example:
            >>> from builder.knowledge import load
            >>> load().environment.torch_requirement("2.1.0.post3", "aarch64")
            ('torch==2.1.0', 'pypi')
        """
        a = known_arch(arch)
        rel = self._releases.torch_npu(torch_npu)
        if rel is not None:
            torch = rel.torch
        else:
            key = versions.lenient("python_package", torch_npu)
            if key is None:
                raise versions.VersionError(
                    f"{torch_npu!r} is not a torch_npu version", fix="write it like 2.4.0 or 2.1.0.post3"
                )
            torch = key.base_version
        if a == "x86_64" and Version(torch) < _CPU_PIN_BEFORE:
            return f"torch=={torch}+cpu", "pytorch-cpu"
        return f"torch=={torch}", "pypi"

    def cpu_torch(self, torch: str, arch: str) -> Tuple[str, str]:
        """The CPU build of torch ``torch`` for that arch, and where it lives: ``pytorch-cpu``
        (the PyTorch CPU index, as ``torch==X+cpu``) or ``pypi`` (plain ``torch==X``).

        An Ascend image never takes a CUDA build: PyPI's x86_64 torch is one, and so is its
        aarch64 torch from 2.11 on (see ``_AARCH64_PYPI_CUDA_FROM``).

        Raises UserError for an unknown arch, VersionError for a string that is no version.

        Example:
            >>> from builder.knowledge import load
            >>> load().environment.cpu_torch("2.1.0", "x86_64"), load().environment.cpu_torch("2.9.0", "aarch64")
            (('torch==2.1.0+cpu', 'pytorch-cpu'), ('torch==2.9.0', 'pypi'))
            >>> load().environment.cpu_torch("2.13.0", "arm64")
            ('torch==2.13.0+cpu', 'pytorch-cpu')
        """
        return _cpu_build(versions.python_package(torch), known_arch(arch))

    def image_torch(self, torch_npu: str, torch: str, arch: str) -> Tuple[str, str]:
        """The torch an image with that torch_npu takes, and where it lives (as `cpu_torch`):
        the CPU build of the torch torch_npu pins (`torch_requirement`; ``torch``, the cell's,
        when the pin names no version), on every arch. It also meets torch_npu's
        ``torch==X``/``torch==X.*`` pins.

        Example:
            >>> from builder.knowledge import load
            >>> load().environment.image_torch("2.1.0.post3", "2.1.0", "aarch64")
            ('torch==2.1.0', 'pypi')
        """
        requirement, _ = self.torch_requirement(torch_npu, arch)
        if "==" not in requirement:
            return self.cpu_torch(str(torch), arch)
        # torch_requirement's pin is a version it has parsed already (else it raised): no second check
        return _cpu_build(Version(requirement.split("==", 1)[1]), known_arch(arch))

    def glibc_floor(self, torch_npu: str, arch: str) -> Optional[Tuple[int, int]]:
        """The glibc the torch_npu wheel needs on that arch, from its manylinux tag; None when unknown.

        Example:
            >>> from builder.knowledge import load
            >>> load().environment.glibc_floor("2.7.1", "x86_64")
            (2, 28)
        """
        rel = self._releases.torch_npu(torch_npu)
        tag = rel.manylinux.get(normalize_arch(arch) or "") if rel else None
        if not tag:
            return None
        m = re.match(r"(\d+)_(\d+)$", tag)
        return (int(m.group(1)), int(m.group(2))) if m else None

    def python_official(self, torch: str) -> Tuple[str, ...]:
        """Python versions Huawei lists for that PyTorch line (``pytorch_python_official``); () when unknown.

        Example:
            >>> from builder.knowledge import load
            >>> load().environment.python_official("2.1.0")
            ('3.8', '3.9', '3.10', '3.11')
        """
        key = versions.lenient("python_package", torch)
        for k, v in self._python_official.items():
            if versions.lenient("python_package", k) == key:
                return v
        return ()

    def os_info(self, os_id: str) -> Optional[OsInfo]:
        """The base OS entry (``data/os.yaml``); None when unknown.

        Example:
            >>> from builder.knowledge import load
            >>> load().environment.os_info("debian12").codename
            'bookworm'
        """
        return self._os.get(str(os_id).lower())

    def os_family_name(self, os_id: str) -> Optional[str]:
        """The family of a base OS id as the installation guides spell it (``openeuler22.03`` ->
        ``openEuler``); None for an id whose family ``cann_os.family_names`` does not name.

        Example:
            >>> from builder.knowledge import load
            >>> load().environment.os_family_name("openeuler22.03"), load().environment.os_family_name("debian12")
            ('openEuler', 'Debian')
        """
        letters = re.match(r"[a-z]+", str(os_id).lower())
        return self._family_names.get(letters.group(0)) if letters else None

    def cann_os(self, cann: str) -> Optional[CannOs]:
        """The OS families that CANN release's installation guide names, with the page; None where
        the knowledge base holds no such page (see :meth:`cann_os_not_checked`).

        Example:
            >>> from builder.knowledge import load
            >>> load().environment.cann_os("9.0.0").os[:3], load().environment.cann_os("8.1.RC1")
            (('openEuler', 'Ubuntu', 'veLinux'), None)
        """
        wanted = versions.lenient("cann", cann)
        return self._cann_os.get(wanted) if wanted is not None else None

    def cann_os_not_checked(self, cann: str) -> str:
        """Why the OS of that release is not checked ("" when its guide's list is held, or the
        release is unknown): ``cann_os.os_not_checked``, the explicit marker.

        Example:
            >>> from builder.knowledge import load
            >>> load().environment.cann_os_not_checked("8.1.RC1")[:10], load().environment.cann_os_not_checked("8.5.0")
            ('not found:', '')
        """
        wanted = versions.lenient("cann", cann)
        if wanted is None or wanted in self._cann_os:
            return ""
        return self._cann_os_not_checked.get(wanted, "")

    def os_ids(self) -> Tuple[str, ...]:
        """Every supported base OS id.

        Example:
            >>> from builder.knowledge import load
            >>> "ubuntu22.04" in load().environment.os_ids()
            True
        """
        return tuple(self._os)
