"""The knowledge base: typed answers about the Ascend stack, read once from ``builder/data``.

Everything the checks, the renderer and the CLI know about torch_npu releases, CANN
releases, driver/firmware pairing, chips and base operating systems comes from here.
The data files keep a ``source`` for every fact; this module only reads them, builds its
lookup tables once, and answers with small frozen dataclasses, tuples and strings (never
a raw YAML dict, except ``unpublished()`` and ``cann_entry()``, which hand back a copy of
their entry, and ``cann_package()``, a read-only view).

Lookups are lenient (``versions.lenient``): a version string that does not parse, or
that the data does not know, yields ``None`` (or ``[]``); the matrix stage reports
malformed strings with file:line. Installer file names live in ``builder.installers``,
the ``ascend-build kb`` descriptions in ``builder.cli.kb``.

Example:
    >>> from builder.knowledge import load
    >>> kb = load()
    >>> kb.torch_npu("2.1.0.rc1").cann
    '7.0.RC1'
    >>> kb.torch_requirement("2.1.0.post3", "x86_64")
    ('torch==2.1.0+cpu', 'pytorch-cpu')
    >>> kb.paired_hdk("7.0.RC1")
    '23.0.RC3'
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from packaging.version import Version

from builder import documents, installers as _installers, versions
from builder.installers import Installer
from builder.vocabulary import CHIPS, normalize_arch

DATA_DIR = Path(__file__).resolve().parent / "data"

# vocabulary.ARCHS in the order the ``kb`` commands and the release tools list them.
ARCHES: Tuple[str, ...] = ("x86_64", "aarch64")
# CHIPS (from vocabulary): the matrix's chip ids; the data also knows 310b, which ascend-build does not build for.

# First CANN release per chip where one exists (ascend-facts.md "Chips": A3 from CANN 8.1.RC1,
# 950 from CANN 9.0; the data agrees: chips.families[].cann_ops_package and
# chips.official_cann_images_by_chip). Chips not listed have no stated floor.
_CHIP_MIN_CANN = {"a3": "8.1.RC1", "950": "9.0.0"}

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

_RANGE = re.compile(r"\[\s*([0-9][0-9A-Za-z.]*)\s*,\s*([0-9][0-9A-Za-z.]*)\s*\]")
# A pre-release's name: 8.1.RC1.alpha001, 9.0.0-beta.1 (versions.cann; "beta1" of the old scheme is a final release).
_PRERELEASE = re.compile(r"alpha\d|-beta\.\d", re.IGNORECASE)
_TORCH_REQ = re.compile(r"^torch\s*(?:[=<>!~;\[(]|$)")


# ---------------------------------------------------------------------------------------
# Typed answers


@dataclass(frozen=True)
class TorchNpu:
    """One torch_npu release on PyPI (``torch_npu_releases.items[]``).

    ``requires_torch`` is the torch part of the wheel's Requires-Dist per arch
    (``"torch==2.1.0+cpu"``; ``""`` when the wheel declares none), ``python`` the CPython
    versions that have a wheel per arch, ``manylinux`` the glibc tag per arch (``"2_17"``),
    ``cann`` the paired CANN release (``None`` = no published pairing).

    Example:
        >>> load().torch_npu("2.3.1").python["x86_64"]
        ('3.8', '3.9', '3.10')
    """

    version: str
    torch: str
    requires_torch: Dict[str, str] = field(hash=False)
    python: Dict[str, Tuple[str, ...]] = field(hash=False)
    manylinux: Dict[str, str] = field(hash=False)
    cann: Optional[str]
    prerelease: bool
    branch: Optional[str]
    sources: Tuple[str, ...]
    requires_dist: Dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    cann_sources: Tuple[str, ...] = field(default=(), compare=False)
    first_upload: str = field(default="", compare=False)
    notes: Tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class OsInfo:
    """A supported base OS (``data/os.yaml``): what the distribution itself ships.

    Example:
        >>> info = load().os_info("ubuntu22.04")
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


# ---------------------------------------------------------------------------------------
# Helpers


def _line(release: "TorchNpu") -> Tuple[int, int]:
    """The torch line of a torch_npu release: 2.9.0.post2 -> (2, 9)."""
    v = versions.lenient("python_package", release.version)
    return (v.major, v.minor) if v is not None else (0, 0)


def _tuple(value: Any) -> Tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    return (str(value),)


def _torch_part(requires_dist: str) -> str:
    """The torch requirement inside a comma-joined Requires-Dist (``"torch==2.7.1+cpu, numpy"``)."""
    for part in (requires_dist or "").split(","):
        part = part.strip()
        if _TORCH_REQ.match(part):
            return part
    return ""


def _frozen(value: Any) -> Any:
    """A parsed JSON document made read-only: mappings as views, lists as tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def chip_of_soc(soc: str) -> Optional[str]:
    s = soc.lower()
    if s.startswith("ascend950"):
        return "950"
    if s.startswith("ascend910_93"):
        return "a3"
    if re.match(r"ascend910b\d", s):
        return "910b"
    if s.startswith("ascend310p"):
        return "310p"
    if s.startswith("ascend910"):
        return "910"
    return None


# ---------------------------------------------------------------------------------------
# The knowledge base


class KnowledgeBase:
    """Lookup tables built once from the data files; see the module docstring.

    Build it with :func:`load` (cached); the constructor takes already parsed documents
    so tests can feed their own.

    Example:
        >>> kb = load()
        >>> kb.min_driver("8.0.RC3"), kb.firmware_range("24.1.rc3")
        ('24.1.RC3', ('7.0.0', '7.5.99'))
    """

    def __init__(
        self,
        compat: Mapping[str, Any],
        packages: Mapping[str, Any],
        os_doc: Mapping[str, Any],
        conda_doc: Mapping[str, Any],
        downloads_doc: Optional[Mapping[str, Any]] = None,
        uv_doc: Optional[Mapping[str, Any]] = None,
    ) -> None:
        # torch_npu on PyPI, keyed by PEP 440 version
        self._releases: Dict[Any, TorchNpu] = {}
        for item in compat["torch_npu_releases"]["items"]:
            rel = self._release(item)
            self._releases[versions.lenient("python_package", rel.version) or rel.version] = rel
        self._release_order = sorted(self._releases)
        # named by Huawei, never on PyPI
        self._unpublished: Dict[Any, Dict[str, Any]] = {}
        for item in compat.get("torch_npu_not_on_pypi", {}).get("items", []):
            self._unpublished[versions.lenient("python_package", item["version"]) or str(item["version"])] = item
        # CANN -> torch_npu releases, by CANN version (equality per versions.cann)
        self._by_cann: Dict[Any, List[TorchNpu]] = {}
        for key in reversed(self._release_order):  # newest first
            rel = self._releases[key]
            cv = versions.lenient("cann", rel.cann)
            if cv is not None:
                self._by_cann.setdefault(cv, []).append(rel)
        # CANN -> HDK pairing entries (cann_hdk.releases)
        self._cann_entries: Dict[Any, Dict[str, Any]] = {}
        for entry in compat["cann_hdk"]["releases"]:
            cv = versions.lenient("cann", entry["version"])
            if cv is not None and cv not in self._cann_entries:
                self._cann_entries[cv] = entry
        # CANN packages (cann-packages.json), read-only: handed out by cann_package()
        self._packages: Dict[Any, Tuple[str, Mapping[str, Any]]] = {}
        for ver, entry in packages.get("cann", {}).items():
            cv = versions.lenient("cann", ver)
            if cv is not None:
                self._packages[cv] = (ver, _frozen(entry))
        names = {str(e["version"]) for e in compat["cann_hdk"]["releases"]} | {v for v, _ in self._packages.values()}
        self._cann_names = tuple(sorted((n for n in names if versions.lenient("cann", n) is not None), key=versions.cann))
        # driver -> observed firmware pairs
        self._pairs: List[Tuple[Any, Dict[str, Any]]] = []
        for pair in compat["hdk_driver_firmware"]["observed_pairs"]:
            dv = versions.lenient("hdk", pair.get("driver"))
            if dv is not None:
                self._pairs.append((dv, pair))
        # every HDK (driver) release the data names, and the HDK lines release notes support ("25.2.X")
        self._hdk_spelled, self._hdk_lines = _hdk_names(compat)
        self._hdk_named = sorted(self._hdk_spelled)
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
        # conda bootstrap
        self._conda: Dict[str, Installer] = _installers.read_conda(conda_doc)
        # where CANN's installers are published (cann-downloads.yaml)
        self._downloads: Dict[str, Any] = dict(downloads_doc or {})
        self._prerelease_folders = {str(k).lower(): v for k, v in (self._downloads.get("prerelease_folders") or {}).items()}
        # the installer of the locked steps (uv.yaml)
        self._uv: Dict[str, Any] = dict(uv_doc or {})
        # torch_npu/CANN pairs a downstream project ships that the table does not publish
        self._downstream = {(str(e["torch_npu"]), str(e["cann"])): str(e["evidence"])
                            for e in (compat.get("downstream_pairings") or {}).get("pairs") or ()}
        # answers that scan every release, kept per release (one knowledge base per process)
        self._min_driver: Dict[str, Tuple[Optional[str], str]] = {}
        self._cann_floor: Dict[str, Optional[Tuple[str, str]]] = {}

    @staticmethod
    def _release(item: Mapping[str, Any]) -> TorchNpu:
        rd = {str(a): str(v or "") for a, v in (item.get("requires_dist") or {}).items()}
        notes = tuple(str(item[k]) for k in ("note", "cann_note") if item.get(k))
        return TorchNpu(
            version=str(item["version"]),
            torch=str(item["torch"]),
            requires_torch={a: _torch_part(v) for a, v in rd.items()},
            python={str(a): _tuple(v) for a, v in (item.get("python") or {}).items()},
            manylinux={str(a): str(v).replace("manylinux_", "") for a, v in (item.get("manylinux") or {}).items()},
            cann=(str(item["cann"]) if item.get("cann") else None),
            prerelease=bool(item.get("prerelease")),
            branch=(str(item["branch"]) if item.get("branch") else None),
            sources=_tuple(item.get("source")),
            requires_dist=rd,
            cann_sources=_tuple(item.get("cann_source")),
            first_upload=str(item.get("first_upload") or ""),
            notes=notes,
        )

    # -- torch_npu ------------------------------------------------------------------------

    def torch_npu(self, version: str) -> Optional[TorchNpu]:
        """The torch_npu release on PyPI, PEP 440-normalised lookup; None when not on PyPI.

        Example:
            >>> load().torch_npu("2.1.0.rc1").version
            '2.1.0rc1'
        """
        key = versions.lenient("python_package", version)
        return self._releases.get(key) if key else None

    def torch_npu_versions(self) -> List[str]:
        """Every torch_npu version on PyPI, in PEP 440 order.

        Example:
            >>> load().torch_npu_versions()[:2]
            ['2.1.0rc1', '2.1.0']
        """
        return [self._releases[k].version for k in self._release_order]

    def unpublished(self, version: str) -> Optional[Dict[str, Any]]:
        """The ``torch_npu_not_on_pypi`` entry (named in Huawei tables, no PyPI files), a copy.

        Example:
            >>> load().unpublished("2.1.0.post4")["cann"]
            '8.0.RC1'
        """
        key = versions.lenient("python_package", version)
        entry = self._unpublished.get(key) if key else None
        return copy.deepcopy(entry) if entry is not None else None

    def torch_npu_for_cann(self, cann: str) -> List[TorchNpu]:
        """torch_npu releases paired with that CANN (``versions.cann`` equality), newest first.

        Example:
            >>> [r.version for r in load().torch_npu_for_cann("7.0.RC1")]
            ['2.1.0rc1']
        """
        cv = versions.lenient("cann", cann)
        return list(self._by_cann.get(cv, ())) if cv is not None else []

    def cann_floor(self, torch_npu: str) -> Optional[Tuple[str, str]]:
        """The oldest CANN a torch_npu release can need, inferred from published pairs:
        (that CANN, the published torch_npu it is inferred from); None when nothing bounds it.

        Two orders the published table keeps (``tests/test_knowledge.py`` checks both over
        every pair, so new data that breaks them fails the suite):

        1. within one torch line (2.9.x), a later torch_npu never pairs with an older CANN;
        2. the first final release of a newer line never pairs with an older CANN than the
           first final release of an older line (pre-releases do: 2.12.0rc1 pairs with
           8.5.0 while 2.11.0 pairs with 9.1.0, so rule 2 bounds final releases only).

        Example:
            >>> load().cann_floor("2.13.0")
            ('9.1.0', '2.12.0')
            >>> load().cann_floor("2.1.0rc1") is None
            True
        """
        if torch_npu not in self._cann_floor:
            self._cann_floor[torch_npu] = self._infer_cann_floor(torch_npu)
        return self._cann_floor[torch_npu]

    def _infer_cann_floor(self, torch_npu: str) -> Optional[Tuple[str, str]]:
        key = versions.lenient("python_package", torch_npu)
        if key is None:
            return None
        line = (key.major, key.minor)
        paired = [self._releases[k] for k in self._release_order if self._releases[k].cann]
        evidence = [r for r in paired if _line(r) == line and versions.lenient("python_package", r.version) < key]
        if not key.is_prerelease:
            firsts: Dict[Tuple[int, int], TorchNpu] = {}
            for r in paired:
                if not r.prerelease and not versions.python_package(r.version).is_prerelease:
                    firsts.setdefault(_line(r), r)
            evidence += [r for ln, r in firsts.items() if ln < line]
        known = [r for r in evidence if versions.lenient("cann", r.cann) is not None]
        if not known:
            return None
        best = max(known, key=lambda r: (versions.lenient("cann", r.cann), versions.lenient("python_package", r.version)))
        assert best.cann is not None  # known holds only releases with a readable CANN
        return best.cann, best.version

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
            >>> load().torch_requirement("2.1.0.post3", "aarch64")
            ('torch==2.1.0', 'pypi')
        """
        a = _installers.known_arch(arch)
        rel = self.torch_npu(torch_npu)
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
            >>> load().cpu_torch("2.1.0", "x86_64"), load().cpu_torch("2.9.0", "aarch64")
            (('torch==2.1.0+cpu', 'pytorch-cpu'), ('torch==2.9.0', 'pypi'))
            >>> load().cpu_torch("2.13.0", "arm64")
            ('torch==2.13.0+cpu', 'pytorch-cpu')
        """
        a = _installers.known_arch(arch)
        parsed = versions.python_package(torch)
        public = parsed.public
        if a == "aarch64" and Version(parsed.base_version) < _AARCH64_PYPI_CUDA_FROM:
            return f"torch=={public}", "pypi"
        return f"torch=={public}+cpu", "pytorch-cpu"

    def glibc_floor(self, torch_npu: str, arch: str) -> Optional[Tuple[int, int]]:
        """The glibc the torch_npu wheel needs on that arch, from its manylinux tag; None when unknown.

        Example:
            >>> load().glibc_floor("2.7.1", "x86_64")
            (2, 28)
        """
        rel = self.torch_npu(torch_npu)
        tag = rel.manylinux.get(normalize_arch(arch) or "") if rel else None
        if not tag:
            return None
        m = re.match(r"(\d+)_(\d+)$", tag)
        return (int(m.group(1)), int(m.group(2))) if m else None

    def python_official(self, torch: str) -> Tuple[str, ...]:
        """Python versions Huawei lists for that PyTorch line (``pytorch_python_official``); () when unknown.

        Example:
            >>> load().python_official("2.1.0")
            ('3.8', '3.9', '3.10', '3.11')
        """
        key = versions.lenient("python_package", torch)
        for k, v in self._python_official.items():
            if versions.lenient("python_package", k) == key:
                return v
        return ()

    # -- CANN, driver, firmware -------------------------------------------------------------

    def cann_releases(self) -> List[str]:
        """Every CANN version the data knows (``cann_hdk.releases`` + cann-packages.json), in CANN order.

        Example:
            >>> "7.0.RC1" in load().cann_releases()
            True
        """
        return list(self._cann_names)

    def canonical_cann(self, cann: str) -> str:
        """The release's own spelling (``8.3.rc1`` -> ``8.3.RC1``), as file names use it.

        Example:
            >>> load().canonical_cann("8.3.rc1"), load().canonical_cann("9.9.rc1")
            ('8.3.RC1', '9.9.RC1')
        """
        text = str(cann)
        for name in self._cann_names:
            if name.lower() == text.lower():
                return name
        return re.sub(r"\.rc(\d)", r".RC\1", text)

    def _cann_entry(self, cann: str) -> Optional[Dict[str, Any]]:
        cv = versions.lenient("cann", cann)
        return self._cann_entries.get(cv) if cv is not None else None

    def cann_entry(self, cann: str) -> Optional[Dict[str, Any]]:
        """The ``cann_hdk.releases`` entry of that CANN (pairing, lines, sources), a copy; None when unknown.

        Example:
            >>> load().cann_entry("7.0.rc1")["version"]
            '7.0.RC1'
        """
        entry = self._cann_entry(cann)
        return copy.deepcopy(entry) if entry is not None else None

    def cann_package(self, cann: str) -> Optional[Tuple[str, Mapping[str, Any]]]:
        """(release as cann-packages.json spells it, its entry: ``files``, ``requires``,
        ``seen_in``), read-only; None when that file does not list the release.

        Example:
            >>> ver, entry = load().cann_package("8.0.rc3")
            >>> ver, sorted(entry)
            ('8.0.RC3', ['files', 'requires', 'seen_in'])
        """
        cv = versions.lenient("cann", cann)
        return self._packages.get(cv) if cv is not None else None

    def paired_hdk(self, cann: str) -> Optional[str]:
        """The Ascend HDK release paired with that CANN; the lowest when the data lists several.

        From ``cann_hdk.releases[].paired_hdk``, else the ``NPU`` requirement in
        cann-packages.json. A pairing stated only as a line (``25.2.X``) is returned as written.

        Example:
            >>> load().paired_hdk("9.0.1")
            '25.5.1'
        """
        entry = self._cann_entry(cann)
        values = _tuple(entry.get("paired_hdk")) if entry else ()
        if not values:
            pk = self.cann_package(cann)
            if pk:
                values = tuple(str(r["version"]) for r in pk[1].get("requires", []) if r.get("name") == "NPU")
        if not values:
            return None
        parsed = [(v, versions.lenient("hdk", v)) for v in values]
        exact = [(v, p) for v, p in parsed if p is not None]
        if not exact:
            return values[0]
        return min(exact, key=lambda vp: vp[1])[0]

    def _own_min_driver(self, cann: str) -> Tuple[Optional[versions.AscendVersion], str]:
        """The release's own minimum, from its own data only, and where it comes from."""
        entry = self._cann_entry(cann)
        paired = self.paired_hdk(cann)
        found: List[Tuple[versions.AscendVersion, str]] = []
        if paired:
            pv = versions.minimum("hdk", paired)
            if pv is not None:
                found.append((pv, f"its paired HDK {paired}"))
        if entry:
            lines = _tuple(entry.get("min_hdk_line")) or _tuple(entry.get("supported_hdk"))
            for line in lines:
                fv = versions.minimum("hdk", line)
                if fv is not None:
                    found.append((fv, f"its release notes support HDK {line}"))
        if not found:
            return None, ""
        return min(found, key=lambda f: f[0])

    def min_driver_reason(self, cann: str) -> Tuple[Optional[str], str]:
        """The lowest driver (HDK) that runs that CANN, and the reasoning; (None, "") when unknown.

        The one rule, used by validate (`checks`), the image labels (`plan`), and through
        the labels by pull, run, doctor and the smoke program:

        1. **its own data**: the paired HDK (:meth:`paired_hdk`), lowered to the floor of the
           lowest HDK line its release notes state as supported (``min_hdk_line``, else the
           lowest of ``supported_hdk``; ``versions.hdk_line_floor``: ``25.0.X`` -> its first
           release). A pairing given only as a line (``25.2.X``) yields that line's floor.
        2. **a driver that runs a newer CANN runs every older one**: the minimum is capped
           by the own minimum (1) of every newer release whose notes state their lines,
           so the minimum never falls as CANN rises (8.3.RC1, paired with 25.3.RC1, runs
           on 25.0.RC1 because 8.5.0 does).

        Example:
            >>> load().min_driver_reason("8.3.RC1")
            ('25.0.RC1', 'CANN 8.5.0 runs on HDK 25.0.RC1 (its release notes support HDK 25.0.X), and a driver that runs a newer CANN runs an older one')
            >>> load().min_driver_reason("7.0.RC1")
            ('23.0.RC3', 'its paired HDK 23.0.RC3')
        """
        if cann not in self._min_driver:
            self._min_driver[cann] = self._min_driver_reason(cann)
        return self._min_driver[cann]

    def _min_driver_reason(self, cann: str) -> Tuple[Optional[str], str]:
        own, why = self._own_min_driver(cann)
        own_none = own is None
        cv = versions.lenient("cann", cann)
        known = self._cann_entry(cann) is not None or self.cann_package(cann) is not None
        if cv is not None and known:  # an unknown release gets no inferred minimum
            for newer in self._cann_names:
                nv = versions.lenient("cann", newer)
                entry = self._cann_entry(newer) or {}
                # a release with no minimum of its own (a pre-release with no stated HDK) is bounded by
                # every newer release's own minimum; one with its own only by those whose notes state lines
                stated = entry.get("min_hdk_line") or entry.get("supported_hdk")
                if nv is None or nv <= cv or not (stated or own_none):
                    continue
                theirs, their_why = self._own_min_driver(newer)
                if theirs is not None and (own is None or theirs < own):
                    own, why = theirs, (f"CANN {newer} runs on HDK {theirs.text} ({their_why}), "
                                        "and a driver that runs a newer CANN runs an older one")
        if own is None:
            return self.paired_hdk(cann), ""
        return own.text, why

    def min_driver(self, cann: str) -> Optional[str]:
        """The lowest driver (HDK) version that runs that CANN (:meth:`min_driver_reason`); None when unknown.

        Example:
            >>> load().min_driver("7.0.RC1"), load().min_driver("8.3.RC1")
            ('23.0.RC3', '25.0.RC1')
        """
        return self.min_driver_reason(cann)[0]

    def downstream_driver(self, cann: str, driver: str) -> str:
        """Where a major downstream runs that CANN on that driver although it is below the
        minimum of CANN's own notes ("" when none does): ``cann_hdk.releases[].downstream_hdk``.

        Example:
            >>> load().downstream_driver("8.2.RC1", "24.1.rc3")
            'MindIE 2.1.RC1 release notes, version compatibility (MINDIE_21RC1_RN)'
            >>> load().downstream_driver("8.2.RC1", "24.1.RC1"), load().downstream_driver("8.3.RC1", "24.1.RC3")
            ('', '')
        """
        entry = self._cann_entry(cann) or {}
        named = entry.get("downstream_hdk") or {}
        wanted = versions.lenient("hdk", driver)
        if wanted is None or not any(versions.lenient("hdk", str(h)) == wanted for h in named.get("hdk") or ()):
            return ""
        return str(named.get("evidence") or "")

    def hdk_known(self, driver: str) -> Tuple[bool, Tuple[str, ...]]:
        """Whether the data names that HDK (driver) release, and the nearest releases it names.

        Named: the driver of an observed driver/firmware pair, an HDK some CANN release is
        paired with, or a release inside an HDK line some CANN's release notes support
        (``25.2.X`` names 25.2.0, 25.2.RC1 ...). A driver string that is no HDK version is unknown.

        Example:
            >>> load().hdk_known("25.2.1")[0], load().hdk_known("24.1.RC4")
            (True, (False, ('24.1.RC3', '24.1.0')))
        """
        dv = versions.lenient("hdk", driver)
        if dv is None:
            return False, ()
        if dv.release in self._hdk_lines or any(dv == v for v in self._hdk_named):
            return True, ()
        below = [self._hdk_spelled[v] for v in self._hdk_named if v < dv][-1:]
        above = [self._hdk_spelled[v] for v in self._hdk_named if v > dv][:1]
        return False, tuple(below + above)

    def supported_hdk_lines(self, cann: str) -> Tuple[str, ...]:
        """HDK lines the release notes mark supported for that CANN (``supported_hdk``); () when not stated.

        Example:
            >>> load().supported_hdk_lines("9.2.0")[0]
            '25.3.X'
        """
        entry = self._cann_entry(cann)
        return _tuple(entry.get("supported_hdk")) if entry else ()

    def _pairs_for(self, driver: Optional[str]) -> List[Dict[str, Any]]:
        dv = versions.lenient("hdk", driver)
        if dv is None:
            return []
        return [pair for v, pair in self._pairs if v == dv]

    def firmware_range(self, driver: str) -> Optional[Tuple[str, str]]:
        """Firmware range that driver accepts (its version.info ``compatible_version_fw``); None when unknown.

        Example:
            >>> load().firmware_range("24.1.rc3")
            ('7.0.0', '7.5.99')
        """
        ranges = self.firmware_ranges(driver)
        return ranges[0] if ranges else None

    def firmware_ranges(self, driver: str) -> List[Tuple[str, str]]:
        """Every firmware range recorded for that driver: some dumps list two (``[6.4.0,6.4.99],[7.0.0,7.7.99]``).

        Example:
            >>> load().firmware_ranges("25.0.rc1.1")
            [('7.0.0', '7.7.99'), ('6.4.0', '6.4.99')]
        """
        found: List[Tuple[str, str]] = []
        for pair in self._pairs_for(driver):
            for low, high in _RANGE.findall(str(pair.get("driver_compatible_version_fw") or "")):
                if (low, high) not in found:
                    found.append((low, high))
        return found

    def firmware_observed(self, firmware: str) -> bool:
        """Whether that firmware was observed shipping with some driver (``observed_pairs``).

        Example:
            >>> load().firmware_observed("7.5.0.1.129"), load().firmware_observed("7.5.0.1.130")
            (True, False)
        """
        fv = versions.lenient("firmware", firmware)
        return fv is not None and any(
            versions.lenient("firmware", str(f)) == fv for _, pair in self._pairs
            for f in (pair["firmware"].values() if isinstance(pair.get("firmware"), Mapping) else [pair.get("firmware")])
            if f)

    def paired_firmware(self, driver: Optional[str], chip: Optional[str]) -> Optional[str]:
        """Firmware observed shipping with that driver for that chip; None when unknown.

        An observation that records no chip (one firmware for the whole HDK sample) is
        returned for any chip; one that names a SoC answers only for that chip.

        Example:
            >>> load().paired_firmware("24.1.rc1", "910b")
            '7.1.0.6.220'
        """
        want = str(chip).lower() if chip else None
        for pair in self._pairs_for(driver):
            fw = pair.get("firmware")
            if isinstance(fw, Mapping):
                if want and want in {str(k).lower() for k in fw}:
                    return next(str(v) for k, v in fw.items() if str(k).lower() == want)
            elif fw:
                soc = pair.get("chip")
                if soc is None or (want and chip_of_soc(str(soc)) == want):
                    return str(fw)
        return None

    # -- chips and installers ---------------------------------------------------------------

    def chips(self) -> Tuple[str, ...]:
        """The matrix's chip ids, lower-case.

        Example:
            >>> load().chips()
            ('910', '910b', 'a3', '310p', '950')
        """
        return CHIPS

    def chip_min_cann(self, chip: str) -> Optional[str]:
        """First CANN release that supports that chip, where one is stated (a3, 950); else None.

        Example:
            >>> load().chip_min_cann("a3")
            '8.1.RC1'
        """
        return _CHIP_MIN_CANN.get(str(chip).lower())

    # The file names live in builder.installers; these delegations stay for the callers that ask the kb.
    def ops_package(self, chip: str, cann: str, arch: str) -> str:
        """:func:`builder.installers.ops_package`: the chip's ops/kernels ``.run`` for that CANN and arch."""
        return _installers.ops_package(self, chip, cann, arch)

    def toolkit_package(self, cann: str, arch: str) -> str:
        """:func:`builder.installers.toolkit_package`: the CANN toolkit ``.run`` for that CANN and arch."""
        return _installers.toolkit_package(self, cann, arch)

    def installers(self, cann: str, chip: str, arch: str, nnal: bool = False) -> List[Installer]:
        """:func:`builder.installers.cann_installers`: official CANN installers with URL and sha256."""
        return _installers.cann_installers(self, cann, chip, arch, nnal)

    def downstream_evidence(self, torch_npu: str, cann: str) -> str:
        """Where a well-known downstream project ships torch_npu on that CANN although Ascend's
        table pairs it with another ("" when none does).

        Example:
            >>> load().downstream_evidence("2.9.0", "8.5.1")
            'vllm-project/vllm-ascend@v0.16.0rc1:Dockerfile'
        """
        npu, wanted = versions.lenient("python_package", torch_npu), versions.lenient("cann", cann)
        for (pair_npu, pair_cann), evidence in self._downstream.items():
            if versions.lenient("python_package", pair_npu) == npu and versions.lenient("cann", pair_cann) == wanted:
                return evidence
        return ""

    def nnal_since(self) -> str:
        """The first CANN release the knowledge base knows an NNAL package for (``cann-downloads.yaml``).

        Example:
            >>> load().nnal_since()
            '8.0.RC3'
        """
        return str((self._downloads.get("nnal") or {}).get("since") or "")

    def torch_atb_glibc(self, cann: str, os_id: str) -> Optional[Tuple[str, str, str]]:
        """When NNAL's torch_atb of ``cann`` needs a newer glibc than ``os_id`` has: (the glibc
        it needs, the source, the official image that installs NNAL on that OS all the same, or
        ""); None when it fits, or when the CANN, the OS or its glibc is unknown.

        Example:
            >>> load().torch_atb_glibc("9.1.0", "ubuntu22.04")[0], load().torch_atb_glibc("9.1.0", "ubuntu24.04")
            ('2.38', None)
            >>> load().torch_atb_glibc("9.0.0", "ubuntu22.04") is None
            True
        """
        rule = (self._downloads.get("nnal") or {}).get("torch_atb_glibc") or {}
        wanted, since = versions.lenient("cann", cann), rule.get("since")
        info = self.os_info(os_id)
        if not rule or wanted is None or info is None or wanted < versions.cann(str(since)):
            return None
        needs = str(rule["glibc"])
        if info.glibc >= tuple(int(p) for p in needs.split(".")):
            return None
        shipped = ((rule.get("shipped") or {}).get(os_id) or {})
        image = next((str(where) for release, where in shipped.items()
                      if versions.lenient("cann", str(release)) == wanted), "")
        return needs, " ".join(str(rule["source"]).split()), image

    def cann_release_folder(self, cann: str) -> Optional[str]:
        """The folder a known CANN release's installers are published in; None for an unknown
        release, and for a pre-release (alpha, beta) whose folder is not recorded.

        A release's own folder is ``CANN <version>/``; alpha and beta releases are fetched
        by the official images from folders named by internal codes
        (``cann-downloads.yaml``, ``prerelease_folders``).

        Example:
            >>> load().cann_release_folder("9.1.0")
            'https://ascend-repo.obs.cn-east-2.myhuaweicloud.com/CANN/CANN%209.1.0/'
            >>> load().cann_release_folder("9.0.0-beta.1")
            'https://ascend-repo.obs.cn-east-2.myhuaweicloud.com/CANN/CANN%209.0.T2/'
            >>> load().cann_release_folder("6.4.0") is None, load().cann_release_folder("8.0.RC2.alpha002") is None
            (True, True)
        """
        template = self._downloads.get("release_folder")
        if not template or self._cann_entry(cann) is None and self.cann_package(cann) is None:
            return None
        name = self.canonical_cann(cann)
        if _PRERELEASE.search(name):
            entry = self._prerelease_folders.get(name.lower())
            return str(entry["folder"]) if entry else None
        return str(template).format(version=name)

    def cann_release_folder_source(self, cann: str) -> str:
        """Where the folder of :meth:`cann_release_folder` is stated: a pre-release's official
        image Dockerfile, else the release-folder rule of ``cann-downloads.yaml``; "" when none is known.

        Example:
            >>> load().cann_release_folder_source("9.1.0-beta.3")[:46]
            'Ascend/cann-container-image@fe522a3511b10ddd28'
        """
        if self.cann_release_folder(cann) is None:
            return ""
        entry = self._prerelease_folders.get(self.canonical_cann(cann).lower())
        return str(entry["source"]) if entry else "cann-downloads.yaml release_folder"

    def uv_requirement(self, arch: str) -> str:
        """uv pinned for that arch, hash-checked, as a requirements line (``uv.yaml``); "" when unknown.

        Example:
            >>> load().uv_requirement("arm64")[:40]
            'uv==0.13.9 --hash=sha256:5435c5ce14a5643'
        """
        sha = (self._uv.get("sha256") or {}).get(normalize_arch(arch) or "")
        return f"uv=={self._uv['version']} --hash=sha256:{sha}" if sha and self._uv.get("version") else ""

    def download_referer(self) -> str:
        """The Referer every CANN download sends (``cann-downloads.yaml``)."""
        return str(self._downloads.get("referer") or "")

    def conda_installer(self, arch: str) -> Optional[Installer]:
        """:func:`builder.installers.conda_installer`: the Miniforge3 installer for that arch, or None."""
        return _installers.conda_installer(self, arch)

    def conda_installers(self) -> Dict[str, Installer]:
        """The Miniforge3 installer per arch (``data/conda.yaml``).

        Example:
            >>> sorted(load().conda_installers())
            ['aarch64', 'x86_64']
        """
        return dict(self._conda)

    # -- base OS ------------------------------------------------------------------------------

    def os_info(self, os_id: str) -> Optional[OsInfo]:
        """The base OS entry (``data/os.yaml``); None when unknown.

        Example:
            >>> load().os_info("debian12").codename
            'bookworm'
        """
        return self._os.get(str(os_id).lower())

    def os_ids(self) -> Tuple[str, ...]:
        """Every supported base OS id.

        Example:
            >>> "ubuntu22.04" in load().os_ids()
            True
        """
        return tuple(self._os)


def _read_yaml(path: Path) -> Dict[str, Any]:
    return documents.load_yaml(path.read_text(encoding="utf-8"), str(path)) or {}


ERRORS_FILE = DATA_DIR / "errors.yaml"


@lru_cache(maxsize=1)
def error_entries() -> Tuple[Dict[str, Any], ...]:
    """The error table (``errors.yaml``): known Ascend error strings with cause, fix and
    source, whitespace folded. `explain` matches with it on a node; render ships it into
    every image as ``errors.json`` for the smoke program.

    Example:
        >>> error_entries()[0]["id"], sorted(error_entries()[0])
        ('platform-mismatch', ['cause', 'fix', 'id', 'patterns', 'source'])
    """
    doc = _read_yaml(ERRORS_FILE)
    return tuple({"id": str(e["id"]), "patterns": [str(p) for p in e["patterns"]],
                  "cause": " ".join(str(e["cause"]).split()), "fix": " ".join(str(e["fix"]).split()),
                  "source": str(e["source"])} for e in doc["errors"])


def _hdk_names(compat: Mapping[str, Any]) -> Tuple[Dict[versions.AscendVersion, str], Set[Tuple[int, int]]]:
    """(every HDK release the data names, as its data spells it; the (major, minor) of every HDK line "A.B.X")."""
    texts: List[str] = []
    for pair in compat["hdk_driver_firmware"]["observed_pairs"]:
        texts += [str(pair.get("driver") or ""), str(pair.get("hdk") or "")]
    for entry in compat["cann_hdk"]["releases"]:
        for key, value in entry.items():
            if "hdk" in key and key != "not_supported_hdk":
                values = value.values() if isinstance(value, Mapping) else _tuple(value)
                texts += [part for v in values for part in str(v).split("/")]
    named: Dict[versions.AscendVersion, str] = {}
    lines: Set[Tuple[int, int]] = set()
    for text in texts:
        text = text.strip()
        if text.upper().endswith(".X"):
            line = versions.lenient("hdk", text[:-2] + ".0")
            if line is not None:
                lines.add(line.release)
        elif versions.lenient("hdk", text) is not None:
            named.setdefault(versions.hdk(text), re.sub(r"rc", "RC", text))
    return named, lines


@lru_cache(maxsize=None)
def load() -> KnowledgeBase:
    """The knowledge base, read from ``builder/data`` once per process (cached).

    Example:
        >>> load() is load()
        True
    """
    packages_file = DATA_DIR / "cann-packages.json"
    packages = documents.load_json(packages_file.read_text(encoding="utf-8"), str(packages_file))
    return KnowledgeBase(
        compat=_read_yaml(DATA_DIR / "ascend-compat.yaml"),
        packages=packages,
        os_doc=_read_yaml(DATA_DIR / "os.yaml"),
        conda_doc=_read_yaml(DATA_DIR / "conda.yaml"),
        downloads_doc=_read_yaml(DATA_DIR / "cann-downloads.yaml"),
        uv_doc=_read_yaml(DATA_DIR / "uv.yaml"),
    )


__all__ = ["load", "KnowledgeBase", "TorchNpu", "OsInfo", "ARCHES", "CHIPS", "DATA_DIR"]
