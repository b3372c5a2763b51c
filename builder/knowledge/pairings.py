"""Releases and their pairings: torch_npu on PyPI, CANN releases and their packages.

Reads ``ascend-compat.yaml`` (``torch_npu_releases``, ``torch_npu_not_on_pypi``,
``cann_hdk.releases``, ``downstream_pairings``) and ``cann-packages.json`` once, and
answers which torch_npu a CANN pairs with, how a CANN release is spelled, what its
package entry lists. The other parts of the knowledge base (`drivers`, `environment`,
`downloads`) read a release's data through this part; it reads none of theirs.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Dict, List, Mapping, Optional, Tuple

from builder import versions
from builder.knowledge.compat_tables import CompatTables

_TORCH_REQ = re.compile(r"^torch\s*(?:[=<>!~;\[(]|$)")


@dataclass(frozen=True)
class TorchNpu:
    """One torch_npu release on PyPI (``torch_npu_releases.items[]``).

    ``requires_torch`` is the torch part of the wheel's Requires-Dist per arch
    (``"torch==2.1.0+cpu"``; ``""`` when the wheel declares none), ``python`` the CPython
    versions that have a wheel per arch, ``manylinux`` the glibc tag per arch (``"2_17"``),
    ``cann`` the paired CANN release (``None`` = no published pairing).

    Example:
        >>> from builder.knowledge import load
        >>> load().releases.torch_npu("2.3.1").python["x86_64"]
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
class CompatWindow:
    """A hand-kept compatibility window (``pta_lines.compat_windows[]``), from a page no parser reads:
    every PTA (Ascend Extension for PyTorch) release of ``pta`` with every CANN of ``cann``.

    Example:
        >>> from builder.knowledge import load
        >>> w = load().releases.compat_window("2.4.0.post2", "8.0.RC2")
        >>> w.pta, w.cann_text
        (('6.0.0',), '8.0.RC2, 8.0.RC3, 8.0.0, 8.1.RC1, 8.2.RC1, 8.3.RC1')
    """

    pta: Tuple[str, ...]
    cann: Tuple[str, ...]
    text: str
    sources: Tuple[str, ...]  # where it is published: a page address or repository@ref:path

    @property
    def cann_text(self) -> str:
        return ", ".join(self.cann)

    @property
    def pta_text(self) -> str:
        return ", ".join(self.pta)

    def covers(self, cann: str) -> bool:
        """Whether ``cann`` is one of the window's CANN releases (``versions.cann`` equality)."""
        wanted = versions.lenient("cann", cann)
        return wanted is not None and any(versions.lenient("cann", c) == wanted for c in self.cann)


@dataclass(frozen=True)
class CannFit:
    """How a torch_npu fits a CANN release, by the evidence Ascend's documents give, decided once for
    `validate` (checks.cann_paired) and `doctor`, so both accept the same pairs:

    - ``paired``: the published pair;
    - ``window``: a published table of its PTA (TorchNPU) release marks the CANN compatible
      (``where``: each document and row; ``window``: a hand-kept window from a page no parser reads);
    - ``downstream``: a named downstream project ships the pair (``evidence``);
    - ``mismatch``: a published table covers its PTA release and leaves that CANN out (``where``,
      ``compatible``: the CANN releases those rows list);
    - ``adjacent``: a later release of the paired CANN's line (X.Y), inferred, not published;
    - ``uncovered``: no published table covers the pair.

    Only ``mismatch`` is refused; the others are warnings (``uncovered`` an error under --strict).

    Example:
        >>> from builder.knowledge import load
        >>> kb = load()
        >>> [kb.releases.cann_fit("2.6.0.post3", c).kind for c in ("8.3.RC1", "8.0.RC2", "8.5.0", "7.0.RC1")]
        ['paired', 'window', 'mismatch', 'uncovered']
        >>> kb.releases.cann_fit("2.9.0", "8.5.1").kind, kb.releases.cann_fit("2.10.0", "9.1.0-beta.1").evidence
        ('window', 'vllm-project/vllm-ascend@v0.20.2rc1:Dockerfile.310p')
    """

    kind: str
    window: Optional[CompatWindow] = None
    evidence: str = ""
    pta: Optional[str] = None
    where: Tuple[str, ...] = ()       # the documents and rows the verdict rests on
    compatible: Tuple[str, ...] = ()  # for ``mismatch``: the CANN releases those rows list

    @property
    def sources(self) -> Tuple[str, ...]:
        """Every document the verdict names: its table rows, or its hand-kept window's page."""
        return self.where or (self.window.sources if self.window is not None else ())


@dataclass(frozen=True)
class CannListing:
    """What the data lists of one CANN release, found with one lookup (`Releases.listing`).

    ``key`` is the release's sort key as ``versions.cann`` parses it, a plain tuple (None for
    a string that is no CANN version): whoever holds the listing compares releases with it
    instead of parsing the string again.

    Example:
        >>> from builder.knowledge import load
        >>> found = load().releases.listing("8.3.rc1")
        >>> found.name, found.known, found.package[0], found.key > load().releases.listing("8.0.RC3").key
        ('8.3.RC1', True, '8.3.RC1', True)
    """

    key: Optional[Tuple[int, ...]]                    # versions.cann(...).key; None: no CANN version
    name: str                                         # its own spelling, as file names use it
    package: Optional[Tuple[str, Mapping[str, Any]]]  # its cann-packages.json entry (spelling, entry), read-only
    known: bool                                       # listed in cann_hdk.releases or cann-packages.json


def cann_key(cann: Any) -> Optional[Tuple[int, ...]]:
    """``cann`` parsed as a CANN version (``versions.lenient``, cached), as its plain sort key;
    None when it is none. The CANN tables below are keyed by it, so that ``8.0.RC2`` and
    ``8.0.RC2.beta1`` find the same entry and a lookup hashes a tuple of ints."""
    parsed = versions.lenient("cann", cann)
    return parsed.key if parsed is not None else None


def line_of(release: TorchNpu) -> Tuple[int, int]:
    """The torch line of a torch_npu release: 2.9.0.post2 -> (2, 9)."""
    v = versions.lenient("python_package", release.version)
    return (v.major, v.minor) if v is not None else (0, 0)


def listed(value: Any) -> Tuple[str, ...]:
    """A data field that holds one value or a list of them, as a tuple of strings."""
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


def _where(source: Any) -> str:
    """A ``sources`` entry as one address: its url, else ``repo@ref:path``, else its package or note."""
    if not isinstance(source, Mapping):
        return str(source)
    if source.get("url"):
        return str(source["url"])
    if source.get("repo"):
        ref = str(source.get("ref") or "").split(" ")[0]
        return f"{source['repo']}@{ref}:{source.get('path', '')}" if ref else f"{source['repo']}:{source.get('path', '')}"
    return str(source.get("package") or source.get("index") or source.get("note") or "")


def _listed_in(rows: Any) -> Tuple[str, ...]:
    """The CANN columns the newest of the rows marks compatible (its document's word is the latest)."""
    return rows[-1].compatible if rows else ()


def _newest_first(rows: Any) -> Tuple[str, ...]:
    """Where the rows are, the newest document's first (the table keeps them oldest first)."""
    return tuple(r.where for r in reversed(rows))


class Releases:
    """torch_npu and CANN releases, looked up by version (lenient: ``versions.lenient``)."""

    def __init__(self, compat: Mapping[str, Any], packages: Mapping[str, Any],
                 tables: Optional[Mapping[str, Any]] = None) -> None:
        # TorchNPU's published tables, generated from its release notes (torchnpu-tables.yaml)
        self.tables = CompatTables(tables)
        # torch_npu on PyPI, keyed by PEP 440 version
        self._releases: Dict[Any, TorchNpu] = {}
        for item in compat["torch_npu_releases"]["items"]:
            rel = self._release(item)
            row = self.tables.pta_of(rel.version)
            if row is not None and row.cann:  # the pairing a parsed table publishes, with its row
                rel = replace(rel, cann=row.cann[0], cann_sources=(row.where, *rel.cann_sources))
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
        # CANN -> HDK pairing entries (cann_hdk.releases), by the release's sort key (`cann_key`)
        self._cann_entries: Dict[Tuple[int, ...], Dict[str, Any]] = {}
        for entry in compat["cann_hdk"]["releases"]:
            ck = cann_key(entry["version"])
            if ck is not None and ck not in self._cann_entries:
                self._cann_entries[ck] = entry
        # CANN packages (cann-packages.json), read-only: handed out by cann_package()
        self._packages: Dict[Tuple[int, ...], Tuple[str, Mapping[str, Any]]] = {}
        for ver, entry in packages.get("cann", {}).items():
            ck = cann_key(ver)
            if ck is not None:
                self._packages[ck] = (ver, _frozen(entry))
        names = {str(e["version"]) for e in compat["cann_hdk"]["releases"]} | {v for v, _ in self._packages.values()}
        self._cann_names = tuple(sorted((n for n in names if versions.lenient("cann", n) is not None), key=versions.cann))
        self._spelling: Dict[str, str] = {}  # lower case -> the release's own spelling (the first in CANN order)
        for name in self._cann_names:
            self._spelling.setdefault(name.lower(), name)
        # torch_npu/CANN pairs a downstream project ships that the table does not publish
        self._downstream = {(str(e["torch_npu"]), str(e["cann"])): str(e["evidence"])
                            for e in (compat.get("downstream_pairings") or {}).get("pairs") or ()}
        # answers that scan every release, kept per release (one knowledge base per process)
        self._cann_floor: Dict[str, Optional[Tuple[str, str]]] = {}
        # PTA (Ascend Extension for PyTorch) release lines: PTA -> its paired CANN, and the windows
        lines = compat.get("pta_lines") or {}
        where = {str(k): _where(v) for k, v in (compat.get("sources") or {}).items()}
        self._windows = tuple(CompatWindow(listed(w.get("pta")), listed(w.get("cann")), str(w.get("text") or ""),
                                           tuple(where.get(s, s) for s in listed(w.get("source"))))
                              for w in lines.get("compat_windows") or ())

    def known(self, cann: str) -> bool:
        """Whether the data lists that CANN release (``cann_hdk.releases`` or cann-packages.json)."""
        return self.listing(cann).known

    def listing(self, cann: str) -> CannListing:
        """Everything the data lists of ``cann`` in one answer: its sort key, its spelling, its
        package entry, whether it is known (see `CannListing`); ``cann`` is parsed once."""
        ck = cann_key(cann)
        package = self._packages.get(ck) if ck is not None else None
        known = package is not None or (ck is not None and ck in self._cann_entries)
        return CannListing(key=ck, name=self.canonical_cann(cann), package=package, known=known)

    @staticmethod
    def _release(item: Mapping[str, Any]) -> TorchNpu:
        rd = {str(a): str(v or "") for a, v in (item.get("requires_dist") or {}).items()}
        notes = tuple(str(item[k]) for k in ("note", "cann_note") if item.get(k))
        return TorchNpu(
            version=str(item["version"]),
            torch=str(item["torch"]),
            requires_torch={a: _torch_part(v) for a, v in rd.items()},
            python={str(a): listed(v) for a, v in (item.get("python") or {}).items()},
            manylinux={str(a): str(v).replace("manylinux_", "") for a, v in (item.get("manylinux") or {}).items()},
            cann=(str(item["cann"]) if item.get("cann") else None),
            prerelease=bool(item.get("prerelease")),
            branch=(str(item["branch"]) if item.get("branch") else None),
            sources=listed(item.get("source")),
            requires_dist=rd,
            cann_sources=listed(item.get("cann_source")),
            first_upload=str(item.get("first_upload") or ""),
            notes=notes,
        )

    def torch_npu(self, version: str) -> Optional[TorchNpu]:
        """The torch_npu release on PyPI, PEP 440-normalised lookup; None when not on PyPI.

        Example:
            >>> from builder.knowledge import load
            >>> load().releases.torch_npu("2.1.0.rc1").version
            '2.1.0rc1'
        """
        key = versions.lenient("python_package", version)
        return self._releases.get(key) if key else None

    def torch_npu_versions(self) -> List[str]:
        """Every torch_npu version on PyPI, in PEP 440 order.

        Example:
            >>> from builder.knowledge import load
            >>> load().releases.torch_npu_versions()[:2]
            ['2.1.0rc1', '2.1.0']
        """
        return [self._releases[k].version for k in self._release_order]

    def unpublished(self, version: str) -> Optional[Dict[str, Any]]:
        """The ``torch_npu_not_on_pypi`` entry (named in Huawei tables, no PyPI files), a copy.

        Example:
            >>> from builder.knowledge import load
            >>> load().releases.unpublished("2.1.0.post4")["cann"]
            '8.0.RC1'
        """
        key = versions.lenient("python_package", version)
        entry = self._unpublished.get(key) if key else None
        return copy.deepcopy(entry) if entry is not None else None

    def torch_npu_for_cann(self, cann: str) -> List[TorchNpu]:
        """torch_npu releases paired with that CANN (``versions.cann`` equality), newest first.

        Example:
            >>> from builder.knowledge import load
            >>> [r.version for r in load().releases.torch_npu_for_cann("7.0.RC1")]
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
            >>> from builder.knowledge import load
            >>> load().releases.cann_floor("2.13.0")
            ('9.1.0', '2.12.0')
            >>> load().releases.cann_floor("2.1.0rc1") is None
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
        evidence = [r for r in paired if line_of(r) == line and versions.lenient("python_package", r.version) < key]
        if not key.is_prerelease:
            firsts: Dict[Tuple[int, int], TorchNpu] = {}
            for r in paired:
                if not r.prerelease and not versions.python_package(r.version).is_prerelease:
                    firsts.setdefault(line_of(r), r)
            evidence += [r for ln, r in firsts.items() if ln < line]
        known = [r for r in evidence if versions.lenient("cann", r.cann) is not None]
        if not known:
            return None
        best = max(known, key=lambda r: (versions.lenient("cann", r.cann), versions.lenient("python_package", r.version)))
        assert best.cann is not None  # known holds only releases with a readable CANN
        return best.cann, best.version

    def cann_releases(self) -> List[str]:
        """Every CANN version the data knows (``cann_hdk.releases`` + cann-packages.json), in CANN order.

        Example:
            >>> from builder.knowledge import load
            >>> "7.0.RC1" in load().releases.cann_releases()
            True
        """
        return list(self._cann_names)

    def canonical_cann(self, cann: str) -> str:
        """The release's own spelling (``8.3.rc1`` -> ``8.3.RC1``), as file names use it.

        Example:
            >>> from builder.knowledge import load
            >>> load().releases.canonical_cann("8.3.rc1"), load().releases.canonical_cann("9.9.rc1")
            ('8.3.RC1', '9.9.RC1')
        """
        text = str(cann)
        return self._spelling.get(text.lower()) or re.sub(r"\.rc(\d)", r".RC\1", text)

    def entry(self, cann: str) -> Optional[Dict[str, Any]]:
        """The ``cann_hdk.releases`` entry itself, for the knowledge base's other parts (read, never changed)."""
        ck = cann_key(cann)
        return self._cann_entries.get(ck) if ck is not None else None

    def cann_entry(self, cann: str) -> Optional[Dict[str, Any]]:
        """The ``cann_hdk.releases`` entry of that CANN (pairing, lines, sources), a copy; None when unknown.

        Example:
            >>> from builder.knowledge import load
            >>> load().releases.cann_entry("7.0.rc1")["version"]
            '7.0.RC1'
        """
        entry = self.entry(cann)
        return copy.deepcopy(entry) if entry is not None else None

    def cann_package(self, cann: str) -> Optional[Tuple[str, Mapping[str, Any]]]:
        """(release as cann-packages.json spells it, its entry: ``files``, ``requires``,
        ``seen_in``), read-only; None when that file does not list the release.

        Example:
            >>> from builder.knowledge import load
            >>> ver, entry = load().releases.cann_package("8.0.rc3")
            >>> ver, sorted(entry)
            ('8.0.RC3', ['files', 'requires', 'seen_in'])
        """
        ck = cann_key(cann)
        return self._packages.get(ck) if ck is not None else None

    def pta_of(self, torch_npu: str) -> Optional[str]:
        """The PTA (TorchNPU) release a torch_npu on PyPI belongs to: the version mapping row of a
        release notes or compatibility page that names it; else its branch (``v2.7.1-26.0.0``: PTA
        26.0.0, for the post-releases made on it); None when neither says (pre-releases).

        Example:
            >>> from builder.knowledge import load
            >>> load().releases.pta_of("2.6.0.post3"), load().releases.pta_of("2.7.1.post6"), load().releases.pta_of("2.13.0")
            ('7.2.0', '26.0.0', None)
        """
        row = self.tables.pta_of(torch_npu)
        if row is not None:
            return row.pta
        release = self.torch_npu(torch_npu)
        if release is None:
            return None
        branch = re.fullmatch(r"v[\d.]+-(\d[\w.]*)", release.branch or "")
        return branch.group(1) if branch else None

    def compat_windows(self) -> Tuple[CompatWindow, ...]:
        """Every hand-kept compatibility window (``pta_lines.compat_windows``: pages no parser reads)."""
        return self._windows

    def compat_window(self, torch_npu: str, cann: str) -> Optional[CompatWindow]:
        """The hand-kept window that makes ``torch_npu`` compatible with ``cann`` (its PTA release
        and that CANN both in it); None when no window covers the pair.

        Example:
            >>> from builder.knowledge import load
            >>> load().releases.compat_window("2.1.0.post10", "8.3.RC1").pta_text
            '6.0.0'
            >>> load().releases.compat_window("2.1.0.post10", "8.5.0") is None, load().releases.compat_window("2.1.0.post3", "8.0.RC2") is None
            (True, True)
        """
        pta = self.pta_of(torch_npu)
        if pta is None:
            return None
        for window in self._windows:
            if pta in window.pta and window.covers(cann):
                return window
        return None

    def cann_fit(self, torch_npu: str, cann: str) -> Optional[CannFit]:
        """How ``torch_npu`` fits ``cann`` (`CannFit`), by the evidence in this order: the published
        pair, a table that lists it, a downstream that ships it, a table that leaves it out, a
        later release of the paired line, nothing. None when the torch_npu is unknown, or ``cann``
        is no CANN version, or the release has no published pairing and no table speaks of it
        (what says so is the caller's)."""
        release = self.torch_npu(torch_npu)
        wanted = versions.lenient("cann", cann)
        if release is None or wanted is None:
            return None
        paired = versions.lenient("cann", release.cann)
        if paired == wanted:
            return CannFit("paired")
        pta = self.pta_of(torch_npu)
        listing, excluding = self.tables.verdicts(pta, cann) if pta else ([], [])
        window = self.compat_window(torch_npu, cann)
        if listing or window is not None:
            return CannFit("window", window=window, pta=pta, where=_newest_first(listing))
        if paired is None:  # no published pair: only a table's word counts here
            return (CannFit("mismatch", pta=pta, where=_newest_first(excluding),
                            compatible=_listed_in(excluding)) if excluding else None)
        evidence = self.downstream_evidence(torch_npu, cann)
        if evidence:
            return CannFit("downstream", evidence=evidence, pta=pta)
        if excluding:
            return CannFit("mismatch", pta=pta, where=_newest_first(excluding),
                           compatible=_listed_in(excluding))
        if wanted > paired and wanted.release[:2] == paired.release[:2]:
            return CannFit("adjacent", pta=pta)
        return CannFit("uncovered", pta=pta)

    def downstream_evidence(self, torch_npu: str, cann: str) -> str:
        """Where a well-known downstream project ships torch_npu on that CANN although Ascend's
        table pairs it with another ("" when none does).

        Example:
            >>> from builder.knowledge import load
            >>> load().releases.downstream_evidence("2.9.0", "8.5.1")
            'vllm-project/vllm-ascend@v0.16.0rc1:Dockerfile'
        """
        npu, wanted = versions.lenient("python_package", torch_npu), versions.lenient("cann", cann)
        for (pair_npu, pair_cann), evidence in self._downstream.items():
            if versions.lenient("python_package", pair_npu) == npu and versions.lenient("cann", pair_cann) == wanted:
                return evidence
        return ""
