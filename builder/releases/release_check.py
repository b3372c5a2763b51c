"""``check``: the torch_npu releases on the index that the knowledge base lacks (a ReleaseCheck); writes nothing."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from packaging.utils import canonicalize_name
from packaging.version import Version

from builder import knowledge
from builder.releases.entries import build_entry
from builder.releases.http_client import Http
from builder.releases.index import PROJECT, IndexFile, fetch_project_page, project_url
from builder.releases.metadata import DOWNLOAD, MetadataRead, read_metadata
from builder.releases.wheel_names import WheelName, parse_wheel_filename, python_key, torch_of_pin


@dataclass
class NewRelease:
    """A version on the index that the knowledge base lacks, with its draft knowledge entry."""

    version: str
    entry: Dict[str, Any]
    wheels: Tuple[str, ...]
    metadata: List[MetadataRead]


@dataclass(frozen=True)
class YankedFile:
    """A file the index marks yanked (PEP 592): pip skips it unless pinned exactly."""

    filename: str
    version: str
    reason: str


@dataclass
class ReleaseCheck:
    """Everything ``check`` learnt from one project page; ``to_dict`` for ``--json``.

    Example:
        >>> r = ReleaseCheck(index_url="http://127.0.0.1:1/simple/", project="torch-npu",
        ...                  page_url="http://127.0.0.1:1/simple/torch-npu/", api="json", api_version="1.1")
        >>> r.new_versions, r.full_downloads
        ([], [])
    """

    index_url: str
    project: str
    page_url: str
    api: str  # "json" | "html"
    api_version: str
    files: int = 0
    wheels: int = 0
    known: List[str] = field(default_factory=list)
    new: List[NewRelease] = field(default_factory=list)
    yanked: List[YankedFile] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    bytes_fetched: int = 0
    kb: Any = field(default=None, repr=False, compare=False)

    @property
    def new_versions(self) -> List[str]:
        return [r.version for r in self.new]

    @property
    def full_downloads(self) -> List[str]:
        """Wheels downloaded whole because the server would not serve a part of them."""
        return [m.filename for r in self.new for m in r.metadata if m.method == DOWNLOAD]

    def to_dict(self) -> Dict[str, Any]:
        """Plain data for ``--json`` (the knowledge base object left out)."""
        return {
            "index_url": self.index_url,
            "project": self.project,
            "page_url": self.page_url,
            "api": self.api,
            "api_version": self.api_version,
            "files": self.files,
            "wheels": self.wheels,
            "known": list(self.known),
            "new": [asdict(r) for r in self.new],
            "yanked": [asdict(y) for y in self.yanked],
            "missing": list(self.missing),
            "skipped": list(self.skipped),
            "warnings": list(self.warnings),
            "full_downloads": self.full_downloads,
            "bytes_fetched": self.bytes_fetched,
        }


def check(index_url: str, kb: Optional[knowledge.KnowledgeBase] = None, project: str = PROJECT,
          timeout: float = 10) -> ReleaseCheck:
    """Compare the index's torch_npu wheels with the knowledge base; nothing is written.

    Network errors, HTTP errors and malformed pages or wheels raise UserError (exit 1)
    naming the URL. Versions the knowledge base knows are only counted; for each one it
    lacks, one wheel per arch has its METADATA read and a draft entry is built.

    Example:
        >>> result = check("http://127.0.0.1:8080/simple/")            # doctest: +SKIP
        >>> result.new_versions, result.new[0].entry["requires_dist"]  # doctest: +SKIP
        (['2.15.0'], {'x86_64': 'torch==2.15.0.*, numpy, pyyaml', 'aarch64': '...'})
    """
    kb = kb or knowledge.load()
    http = Http(timeout)
    page = project_url(index_url, project)
    api, api_version, files = fetch_project_page(http, page)
    result = ReleaseCheck(index_url=index_url, project=project, page_url=page, api=api,
                          api_version=api_version, files=len(files), kb=kb)
    by_version = _group_wheels(files, project, result)
    for version in sorted(by_version, key=Version):
        pairs = by_version[version]
        result.yanked.extend(YankedFile(f.filename, version, f.yanked) for f, _ in pairs if f.yanked is not None)
        if kb.releases.torch_npu(version) is not None:
            result.known.append(version)
        else:
            result.new.append(_new_release(http, version, pairs, kb, result))
    seen = set(by_version)
    result.missing = [v for v in kb.releases.torch_npu_versions() if v not in seen]
    result.bytes_fetched = http.bytes_fetched
    return result


def _group_wheels(files: Sequence[IndexFile], project: str,
                  result: ReleaseCheck) -> Dict[str, List[Tuple[IndexFile, WheelName]]]:
    """Linux wheels of the project by normalised version; the rest goes to ``result.skipped``."""
    out: Dict[str, List[Tuple[IndexFile, WheelName]]] = {}
    for file in files:
        try:
            wheel = parse_wheel_filename(file.filename)
        except ValueError as exc:
            result.skipped.append(f"{file.filename}: {exc}")
            continue
        if canonicalize_name(wheel.name) != canonicalize_name(project):
            result.skipped.append(f"{file.filename}: another project")
        elif wheel.arch is None:
            result.skipped.append(f"{file.filename}: no Linux x86_64/aarch64 platform tag")
        elif not wheel.pythons:
            result.skipped.append(f"{file.filename}: no CPython tag (cpXY)")
        else:
            result.wheels += 1
            out.setdefault(wheel.version, []).append((file, wheel))
    return out


def _new_release(http: Http, version: str, pairs: List[Tuple[IndexFile, WheelName]],
                 kb: knowledge.KnowledgeBase, result: ReleaseCheck) -> NewRelease:
    reads = [read_metadata(http, f, w) for f, w in _one_wheel_per_arch(pairs)]
    for read in reads:
        if read.note:
            result.warnings.append(f"{read.filename}: {read.note}")
    entry = build_entry(version, [w for _, w in pairs], [f for f, _ in pairs], reads, kb)
    torches = {torch_of_pin(r.torch_pin) or r.torch_pin for r in reads if r.torch_pin}  # a range as written
    if len(torches) > 1:
        result.warnings.append(f"torch_npu {version}: the arches pin different torch releases ({', '.join(sorted(torches))})")
    return NewRelease(version=version, entry=entry, wheels=tuple(f.filename for f, _ in pairs), metadata=reads)


def _one_wheel_per_arch(pairs: Sequence[Tuple[IndexFile, WheelName]]) -> List[Tuple[IndexFile, WheelName]]:
    """Per arch, the cheapest wheel to read: not yanked, with a .metadata file, newest Python."""
    best: Dict[str, Tuple[IndexFile, WheelName]] = {}
    for file, wheel in pairs:
        key = (file.yanked is None, file.metadata is not None, max(map(python_key, wheel.pythons), default=()))
        old = best.get(wheel.arch or "")
        if old is None or key > (old[0].yanked is None, old[0].metadata is not None,
                                 max(map(python_key, old[1].pythons), default=())):
            best[wheel.arch or ""] = (file, wheel)
    return [best[a] for a in knowledge.ARCHES if a in best]
