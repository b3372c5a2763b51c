"""What a downstream release (vllm-ascend 0.13.0) requires of torch-npu, torch and torchvision.

Read from ``data/downstream-pins.yaml``, which `builder.releases.downstream_files` generates
from the projects' own requirement files at each release tag (never typed by hand). A
release can state a package in more than one file (``requirements.txt`` and
``pyproject.toml``'s ``[build-system] requires``); what it requires is all of them at once,
so their specifiers are intersected, and each answer keeps the files it rests on.

A requirement with an environment marker applies where its marker holds: `release` takes the
cell's arch and Python to decide; without them, marked requirements are left out.

Example:
    >>> pins = load_pins()
    >>> needs = pins.release("vllm-ascend", "0.13.0")
    >>> needs.torch_npu, needs.torch, needs.source
    ('==2.8.0.post2', '==2.8.0', 'vllm-project/vllm-ascend@v0.13.0')
    >>> pins.release("vllm_ascend", "0.13").version, pins.release("vllm-ascend", "0.99.0") is None
    ('0.13.0', True)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Dict, List, Mapping, Optional, Tuple

from packaging.markers import InvalidMarker, Marker
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.errors import UserError
from builder.knowledge.files import DATA_DIR, read_yaml

PINS_FILE = DATA_DIR / "downstream-pins.yaml"


@dataclass(frozen=True)
class Requires:
    """What one release requires of one package: the intersected ``specifier`` ("" for any
    version) and the requirements it rests on, as ``(written, path, at)``."""

    name: str
    specifier: str
    stated: Tuple[Tuple[str, str, str], ...]

    def allows(self, version: str) -> Optional[bool]:
        """Whether ``version`` (its local label, ``+cpu``, left out) meets the specifier;
        None when it is no version. Pre-releases count: a cell names its own on purpose.

        Example:
            >>> Requires("torch", "==2.8.0", ()).allows("2.8.0+cpu"), Requires("torch", ">=2.5.1", ()).allows("2.4.0")
            (True, False)
        """
        try:
            public = Version(version).public
        except InvalidVersion:
            return None
        return SpecifierSet(self.specifier).contains(public, prereleases=True)

    @property
    def exact(self) -> Optional[str]:
        """The one version an ``==X`` specifier names; None for any other.

        Example:
            >>> Requires("torch-npu", "==2.8.0.post2", ()).exact, Requires("torch", ">=2.5.1", ()).exact
            ('2.8.0.post2', None)
        """
        if "," in self.specifier or not self.specifier.startswith("==") or self.specifier.endswith(".*"):
            return None
        return self.specifier[2:]


@dataclass(frozen=True)
class DownstreamRelease:
    """One release of a downstream project and what it requires (`Requires` by package name)."""

    project: str
    version: str
    repo: str
    tag: str
    commit: str
    requires: Mapping[str, Requires]

    @property
    def source(self) -> str:
        """Where the requirements were read: ``owner/name@tag``."""
        return f"{self.repo}@{self.tag}"

    def specifier(self, name: str) -> str:
        """The intersected specifier on package ``name`` ("" when the release states none)."""
        found = self.requires.get(canonicalize_name(name))
        return found.specifier if found else ""

    @property
    def torch_npu(self) -> str:
        return self.specifier("torch-npu")

    @property
    def torch(self) -> str:
        return self.specifier("torch")

    @property
    def torchvision(self) -> str:
        return self.specifier("torchvision")


class DownstreamPins:
    """The downstream releases ``downstream-pins.yaml`` knows, looked up by project and version.

    Build it with `load_pins` (cached); the constructor takes the parsed document so tests
    can feed their own.
    """

    def __init__(self, document: Mapping[str, Any]) -> None:
        # keyed by Version, which is what pip compares: ``==0.13`` is release 0.13.0
        self._entries: Dict[Tuple[str, Version], Mapping[str, Any]] = {}
        for entry in document.get("releases") or ():
            self._entries[(canonicalize_name(str(entry["project"])), Version(str(entry["version"])))] = entry

    def projects(self) -> Tuple[str, ...]:
        """The projects with releases here, canonical names, sorted.

        Example:
            >>> load_pins().projects()
            ('vllm-ascend',)
        """
        return tuple(sorted({project for project, _ in self._entries}))

    def versions(self, project: str) -> Tuple[str, ...]:
        """The releases of ``project`` known here, oldest first."""
        name = canonicalize_name(project)
        return tuple(str(self._entries[(p, v)]["version"]) for p, v in sorted(self._entries) if p == name)

    def release(self, project: str, version: str, arch: str = "", python: str = "") -> Optional[DownstreamRelease]:
        """What release ``version`` of ``project`` requires; None when it is not known here
        (or ``version`` is no version). ``arch``/``python`` decide requirements with a marker.
        """
        try:
            entry = self._entries.get((canonicalize_name(project), Version(version)))
        except InvalidVersion:
            return None
        if entry is None:
            return None
        project, version, source = canonicalize_name(project), str(entry["version"]), entry["source"]
        return DownstreamRelease(project, version, str(source["repo"]), str(source["tag"]), str(source["commit"]),
                                 _requires(entry.get("requires") or (), arch, python, f"{PINS_FILE.name}: {project} {version}"))

    def fitting(self, project: str, have: Mapping[str, str]) -> List[str]:
        """The releases of ``project`` that state a torch-npu requirement and admit ``have``
        (package name -> version: torch-npu, torch, torchvision), newest first.

        Example:
            >>> load_pins().fitting("vllm-ascend", {"torch-npu": "2.8.0.post2", "torch": "2.8.0"})[:2]
            ['0.13.0', '0.13.0rc3']
        """
        out = []
        for version in reversed(self.versions(project)):
            release = self.release(project, version)
            if release and release.torch_npu and all(
                    release.requires[name].allows(value) is not False for name, value in have.items() if name in release.requires):
                out.append(version)
        return out


def _requires(rows: Any, arch: str, python: str, where: str) -> Dict[str, Requires]:
    """The rows of one release that apply there, intersected per package name."""
    specifiers: Dict[str, SpecifierSet] = {}
    stated: Dict[str, List[Tuple[str, str, str]]] = {}
    for row in rows:
        name = canonicalize_name(str(row["name"]))
        try:
            if row.get("marker") and not _marker_holds(str(row["marker"]), arch, python):
                continue
            specifier = SpecifierSet(str(row.get("specifier") or ""))
        except (InvalidSpecifier, InvalidMarker) as exc:
            raise UserError(f"{where}: {row.get('written')!r} does not parse ({exc})",
                            fix="regenerate the data file with make knowledge") from None
        specifiers[name] = specifiers.get(name, SpecifierSet()) & specifier
        stated.setdefault(name, []).append((str(row["written"]), str(row["path"]), str(row["at"])))
    return {name: Requires(name, str(specifiers[name]), tuple(stated[name])) for name in sorted(specifiers)}


def _marker_holds(marker: str, arch: str, python: str) -> bool:
    """Whether a requirement's marker holds in a Linux image of that arch and Python; False
    when either is not given (whether it applies is then unknown)."""
    if not arch or not python:
        return False
    return Marker(marker).evaluate({"platform_machine": arch, "python_version": python, "sys_platform": "linux",
                                    "platform_system": "Linux", "os_name": "posix"})


@lru_cache(maxsize=1)
def load_pins() -> DownstreamPins:
    """The downstream releases, read from ``builder/data/downstream-pins.yaml`` once per process.

    Example:
        >>> load_pins() is load_pins()
        True
    """
    return DownstreamPins(read_yaml(PINS_FILE))


__all__ = ["PINS_FILE", "Requires", "DownstreamRelease", "DownstreamPins", "load_pins"]
