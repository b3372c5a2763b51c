"""The release watcher: which torch_npu releases does the package index have that the knowledge base lacks?

``check`` asks a standard simple index (PEP 691 JSON, else PEP 503 HTML) for the
project's files, groups the wheels by version and, for every version the knowledge
base does not know, reads one wheel's METADATA per arch to learn the torch pin and
Requires-Python. It reads METADATA as cheaply as the index allows:

1. PEP 658/714: the index serves ``<wheel url>.metadata`` (a few KiB);
2. HTTP range requests: the zip's end-of-central-directory from the tail, then the
   central directory, then the METADATA member alone (tens of KiB of a wheel that
   weighs tens of MiB);
3. the whole wheel, only when the server ignores ``Range`` (the result says so).

The new releases come back as entries in the shape of ``torch_npu_releases.items``
with ``cann: null``: the CANN pairing is a human's call, never a guess. ``write``
inserts them into ``ascend-compat.yaml`` without reformatting the rest of the file,
``propose`` drafts matrix cells for them, ``format_check`` / ``to_dict`` report.

Why stdlib ``urllib``: four GETs with custom headers need no extra dependency, and
this module must work where only the package itself is installed.

Example:
    >>> from builder import releases
    >>> result = releases.check(releases.default_index_url())     # doctest: +SKIP
    >>> print(releases.format_check(result))                       # doctest: +SKIP
    index: .../simple/torch-npu/ (PEP 691 JSON, api 1.1)
    ...
"""

from __future__ import annotations

import copy
import email.parser
import hashlib
import html.parser
import http.client
import io
import json
import os
import re
import socket
import struct
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder import knowledge, versions
from builder.errors import UserError

INDEX_URL_ENV = "ASCEND_BUILD_INDEX_URL"
PROJECT = "torch-npu"

CANN_NOTE = "pairing unknown until a human confirms it"
ENTRY_SOURCES = ("PYPI_SIMPLE_JSON", "PYPI_WHEEL_METADATA")
# In a subfolder: matrix/*.yaml is the live matrix, and a draft cell with an
# unconfirmed CANN pairing must not be built until a human moves it there.
PROPOSAL_NAME = "proposed/torch_npu.yaml"

# PEP 691: prefer JSON, accept the HTML serialisations (PEP 503) as a fallback.
ACCEPT = ("application/vnd.pypi.simple.v1+json, "
          "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01")
_JSON_TYPES = ("application/vnd.pypi.simple.v1+json", "application/vnd.pypi.simple.latest+json", "application/json")
_HTML_TYPES = ("application/vnd.pypi.simple.v1+html", "application/vnd.pypi.simple.latest+html", "text/html")

# Metadata methods, as reported per wheel.
PEP658, RANGE, DOWNLOAD = "pep658", "range", "download"
_METHOD_TEXT = {PEP658: "PEP 658 .metadata", RANGE: "HTTP range reads", DOWNLOAD: "downloading the whole wheel"}

TAIL_PROBE = 16 * 1024  # first suffix read: the EOCD and, in most wheels, the whole central directory
_EOCD_MAX = 22 + 0xFFFF  # an EOCD record plus the longest zip comment
_MANYLINUX_LEGACY = {"manylinux1": "2_5", "manylinux2010": "2_12", "manylinux2014": "2_17"}
_PLATFORM = re.compile(r"^(?:(manylinux_(\d+)_(\d+))|(manylinux1|manylinux2010|manylinux2014)|linux)_(x86_64|aarch64)$")
_CPYTHON = re.compile(r"^cp(\d)(\d+)$")
_OS_PREFERENCE = ("ubuntu22.04", "ubuntu24.04", "openeuler24.03", "debian12", "openeuler22.03", "ubuntu20.04")
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def default_index_url() -> str:
    """The index to ask when the caller names none: ``$ASCEND_BUILD_INDEX_URL``, else pip's.

    Why an environment variable: sites behind a mirror set it once instead of
    passing ``--index-url`` to every run. Without one, the answer is the index
    pip itself would use (``PIP_INDEX_URL``, else pip's built-in default), so the
    public index's address lives in pip, not here.

    Example:
        >>> default_index_url().startswith("http")
        True
    """
    configured = os.environ.get(INDEX_URL_ENV) or os.environ.get("PIP_INDEX_URL")
    if configured:
        return configured
    try:
        from pip._internal.models.index import PyPI  # pip's own default, read rather than copied
    except ImportError:
        raise UserError("no package index given and pip is not importable to ask for its default",
                        fix=f"pass --index-url URL or set {INDEX_URL_ENV}")
    return PyPI.simple_url


# ---------------------------------------------------------------------------------------
# Result objects


@dataclass(frozen=True)
class IndexFile:
    """One file listed on a project page, in either serialisation.

    ``yanked`` is None when not yanked, else the reason (``""`` when none was given);
    ``metadata`` is None when the index serves no ``.metadata`` file, else its hashes
    (``{}`` when served without hashes).
    """

    filename: str
    url: str
    hashes: Mapping[str, str] = field(default_factory=dict)
    requires_python: Optional[str] = None
    yanked: Optional[str] = None
    metadata: Optional[Mapping[str, str]] = None
    upload_time: Optional[str] = None


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


@dataclass
class MetadataRead:
    """What one wheel's METADATA said, and how it was read (``pep658`` | ``range`` | ``download``)."""

    filename: str
    arch: str
    method: str
    bytes_fetched: int
    requires_dist: Tuple[str, ...]
    torch_pin: str
    requires_python: str
    note: str = ""


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


# ---------------------------------------------------------------------------------------
# HTTP


class _NoRanges(Exception):
    """The server answered a Range request with something other than that range."""


class _Http:
    """GETs with one timeout, errors turned into UserError, and a count of body bytes read.

    Why count bytes: the result says what reading METADATA cost, and the tests prove
    that no whole wheel was fetched.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.bytes_fetched = 0

    def get(self, url: str, headers: Optional[Mapping[str, str]] = None,
            ok: Sequence[int] = (200,)) -> Tuple[int, Any, bytes, str]:
        """(status, headers, body, final url); a status outside ``ok`` raises UserError (404 too)."""
        request = urllib.request.Request(url, headers={"User-Agent": "ascend-build", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status = response.status
                if status not in ok:
                    if status == 200 and 206 in ok:
                        raise _NoRanges(url)
                    raise _fail(url, f"unexpected HTTP {status} {response.reason}")
                body = response.read()
                self.bytes_fetched += len(body)
                return status, response.headers, body, response.geturl()
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and 206 in ok:
                raise _NoRanges(url)
            raise _fail(url, f"HTTP {exc.code} {exc.reason}", _http_fix(exc.code)) from None
        except urllib.error.URLError as exc:
            raise _fail(url, _reason(exc.reason)) from None
        except (socket.timeout, TimeoutError):
            raise _fail(url, f"no answer within {self.timeout:g} s") from None
        except (http.client.HTTPException, OSError) as exc:
            raise _fail(url, f"connection broken: {exc or type(exc).__name__}") from None


def _reason(reason: Any) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "no answer in time (timeout)"
    if isinstance(reason, socket.gaierror):
        return f"host name not resolved ({reason.strerror})"
    return str(getattr(reason, "strerror", None) or reason)


def _http_fix(code: int) -> str:
    if code == 404:
        return "check --index-url (it must be a simple index root) and the project name"
    if code >= 500:
        return "the index failed; try again later or use another mirror with --index-url"
    return "check --index-url and any credentials or proxy the index needs"


def _fail(url: str, what: str, fix: str = "") -> UserError:
    return UserError(f"{url}: {what}", fix=fix or "check --index-url, the network and any proxy, then run again",
                     exit_code=1)


# ---------------------------------------------------------------------------------------
# Project pages (PEP 691 JSON and PEP 503 HTML)


def project_url(index_url: str, project: str) -> str:
    """The project page under a simple index root (PEP 503 normalised name, trailing slash).

    Example:
        >>> project_url("http://127.0.0.1:8080/simple", "Torch_NPU")
        'http://127.0.0.1:8080/simple/torch-npu/'
    """
    parts = urllib.parse.urlsplit(index_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(f"index URL {index_url!r} is not an http(s) URL",
                        fix="pass the simple index root, e.g. --index-url http://HOST/simple/")
    return index_url.rstrip("/") + "/" + canonicalize_name(project) + "/"


def fetch_project_page(http: _Http, url: str) -> Tuple[str, str, List[IndexFile]]:
    """GET the project page asking for JSON first; returns (api, api version, files).

    Example:
        >>> fetch_project_page(_Http(5), "http://127.0.0.1:8080/simple/torch-npu/")   # doctest: +SKIP
        ('json', '1.1', [IndexFile(filename='torch_npu-2.4.0-...whl', ...), ...])
    """
    _, headers, body, final = http.get(url, {"Accept": ACCEPT})
    kind = headers.get_content_type() if headers else ""
    if kind not in _JSON_TYPES + _HTML_TYPES:  # some static mirrors send no useful type: look
        head = body.lstrip()[:1]
        kind = _JSON_TYPES[0] if head == b"{" else _HTML_TYPES[0] if head == b"<" else kind
    if kind in _JSON_TYPES:
        version, files = parse_json_page(body, final)
        return "json", version, files
    if kind in _HTML_TYPES:
        version, files = parse_html_page(body, final)
        return "html", version, files
    raise _fail(final, f"malformed project page: content type {kind or 'none'!r} is neither JSON nor HTML")


def _check_api_version(version: str, url: str) -> None:
    """PEP 629: a client must refuse a major version it does not know."""
    major = version.split(".")[0]
    if major and major != "1":
        raise _fail(url, f"simple API version {version} is not supported (this tool reads 1.x)")


def parse_json_page(body: bytes, url: str) -> Tuple[str, List[IndexFile]]:
    """Files of a PEP 691 JSON project page; UserError (exit 1) when it is malformed.

    Example:
        >>> page = b'{"meta": {"api-version": "1.1"}, "name": "torch-npu", "files": [{"filename":'
        >>> page += b' "torch_npu-2.4.0-cp310-cp310-manylinux_2_17_x86_64.whl", "url": "../../f/t.whl",'
        >>> page += b' "hashes": {}, "core-metadata": {"sha256": "ab"}, "yanked": "broken"}]}'
        >>> _, files = parse_json_page(page, "http://127.0.0.1/simple/torch-npu/")
        >>> files[0].url, files[0].yanked, dict(files[0].metadata)
        ('http://127.0.0.1/f/t.whl', 'broken', {'sha256': 'ab'})
    """
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _fail(url, f"malformed project page: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise _fail(url, "malformed project page: JSON without a 'files' list")
    version = str((doc.get("meta") or {}).get("api-version", ""))
    _check_api_version(version, url)
    files = []
    for i, item in enumerate(doc["files"]):
        if not (isinstance(item, dict) and isinstance(item.get("filename"), str) and isinstance(item.get("url"), str)):
            raise _fail(url, f"malformed project page: files[{i}] lacks a filename or url")
        files.append(IndexFile(
            filename=item["filename"],
            url=_absolute(url, item["url"]),
            hashes={str(k): str(v) for k, v in (item.get("hashes") or {}).items()},
            requires_python=item.get("requires-python"),
            yanked=_json_yanked(item.get("yanked")),
            metadata=_json_metadata(item.get("core-metadata", item.get("dist-info-metadata"))),
            upload_time=item.get("upload-time"),
        ))
    return version, files


def _json_yanked(value: Any) -> Optional[str]:
    if value is True:
        return ""
    return value if isinstance(value, str) else None


def _json_metadata(value: Any) -> Optional[Dict[str, str]]:
    if value is True:
        return {}
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    return None


def _absolute(page_url: str, href: str) -> str:
    """The file URL resolved against the page, without its ``#sha256=`` fragment."""
    return urllib.parse.urldefrag(urllib.parse.urljoin(page_url, href))[0]


class _AnchorParser(html.parser.HTMLParser):
    """Collects the anchors and the repository-version meta of a PEP 503 page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: List[Tuple[Dict[str, Optional[str]], str]] = []
        self.api_version = ""
        self.tags = 0
        self._open: Optional[Dict[str, Optional[str]]] = None
        self._text: List[str] = []

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        self.tags += 1
        attributes = dict(attrs)
        if tag == "meta" and attributes.get("name") == "pypi:repository-version":
            self.api_version = attributes.get("content") or ""
        elif tag == "a":
            self._open, self._text = attributes, []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.anchors.append((self._open, "".join(self._text).strip()))
            self._open = None


def parse_html_page(body: bytes, url: str) -> Tuple[str, List[IndexFile]]:
    """Files of a PEP 503 HTML project page; UserError (exit 1) when it is malformed.

    Example:
        >>> page = (b'<html><body><a href="/f/torch_npu-2.4.0-cp310-cp310-manylinux_2_17_x86_64.whl#sha256=ab"'
        ...         b' data-core-metadata="sha256=cd" data-yanked="">torch_npu-2.4.0-cp310-cp310-'
        ...         b'manylinux_2_17_x86_64.whl</a></body></html>')
        >>> _, files = parse_html_page(page, "http://127.0.0.1/simple/torch-npu/")
        >>> f = files[0]
        >>> f.url, dict(f.hashes), dict(f.metadata), f.yanked
        ('http://127.0.0.1/f/torch_npu-2.4.0-cp310-cp310-manylinux_2_17_x86_64.whl', {'sha256': 'ab'}, {'sha256': 'cd'}, '')
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(url, f"malformed project page: not UTF-8 ({exc})") from None
    parser = _AnchorParser()
    parser.feed(text)
    parser.close()
    if parser.tags == 0:
        raise _fail(url, "malformed project page: no HTML tags at all")
    _check_api_version(parser.api_version, url)
    files = []
    for attrs, label in parser.anchors:
        href = attrs.get("href")
        if not href:
            raise _fail(url, f"malformed project page: anchor {label!r} has no href")
        fragment = urllib.parse.urldefrag(href)[1]
        name = label or urllib.parse.unquote(urllib.parse.urlsplit(href).path.rsplit("/", 1)[-1])
        files.append(IndexFile(
            filename=name,
            url=_absolute(url, href),
            hashes=_hash_pair(fragment),
            requires_python=attrs.get("data-requires-python"),
            yanked=attrs.get("data-yanked") if "data-yanked" in attrs else None,
            metadata=_html_metadata(attrs),
        ))
    return parser.api_version, files


def _hash_pair(text: Optional[str]) -> Dict[str, str]:
    """``sha256=abc`` -> {"sha256": "abc"}; anything else -> {}."""
    name, _, value = (text or "").partition("=")
    return {name: value} if name and value else {}


def _html_metadata(attrs: Mapping[str, Optional[str]]) -> Optional[Dict[str, str]]:
    """PEP 714 ``data-core-metadata`` (or PEP 658's older ``data-dist-info-metadata``)."""
    for key in ("data-core-metadata", "data-dist-info-metadata"):
        if key in attrs:
            value = attrs[key] or "true"
            return {} if value == "true" else _hash_pair(value) or None
    return None


# ---------------------------------------------------------------------------------------
# Wheel file names


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
    try:
        version = str(Version(version_text))
    except InvalidVersion:
        raise ValueError(f"version {version_text!r} is not PEP 440") from None
    arches = {m.group(5) for m in map(_PLATFORM.match, plat) if m}
    floors = [_glibc_of(m) for m in map(_PLATFORM.match, plat) if m and _glibc_of(m)]
    pythons = tuple(sorted({f"{m.group(1)}.{m.group(2)}" for m in map(_CPYTHON.match, py) if m}, key=_py_key))
    return WheelName(
        filename=filename, name=name, version=version, build=build, python_tags=py, abi_tags=abi,
        platform_tags=plat, arch=(arches.pop() if len(arches) == 1 else None), pythons=pythons,
        manylinux=(min(floors, key=_glibc_key) if floors else None),
    )


def _glibc_of(m: "re.Match[str]") -> Optional[str]:
    if m.group(1):
        return f"{m.group(2)}_{m.group(3)}"
    return _MANYLINUX_LEGACY.get(m.group(4) or "")


def _glibc_key(tag: str) -> Tuple[int, ...]:
    return tuple(int(x) for x in tag.split("_"))


def _py_key(py: str) -> Tuple[int, ...]:
    return tuple(int(x) for x in py.split("."))


# ---------------------------------------------------------------------------------------
# METADATA: PEP 658, range reads of the zip, or the whole wheel


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
            try:
                return Version(text).base_version
            except InvalidVersion:
                return None
    return None


def _is_metadata_member(name: str, wheel: WheelName) -> int:
    """0 = not METADATA; 2 = the wheel's own ``<name>-<version>.dist-info/METADATA``; 1 = another one."""
    folder, _, leaf = name.rpartition("/")
    if leaf != "METADATA" or not folder.endswith(".dist-info") or "/" in folder:
        return 0
    return 2 if canonicalize_name(folder[: -len(".dist-info")].rsplit("-", 1)[0]) == canonicalize_name(wheel.name) else 1


def _verify_hash(url: str, body: bytes, hashes: Mapping[str, str]) -> None:
    for name, expected in hashes.items():
        if name in hashlib.algorithms_guaranteed:
            if hashlib.new(name, body).hexdigest() != expected.lower():
                raise _fail(url, f"{name} of the download does not match the index ({expected})",
                            "the index or a proxy serves a corrupted file; try again or use another mirror")
            return


def _metadata_pep658(http: _Http, file: IndexFile) -> bytes:
    url = file.url + ".metadata"
    _, _, body, _ = http.get(url)
    _verify_hash(url, body, file.metadata or {})
    return body


def _metadata_download(http: _Http, file: IndexFile, wheel: WheelName) -> bytes:
    _, _, body, _ = http.get(file.url)
    _verify_hash(file.url, body, file.hashes)
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            name = _pick_member(archive.namelist(), wheel, file.url)
            return archive.read(name)
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError) as exc:
        raise _fail(file.url, f"malformed wheel: {exc}") from None


def _pick_member(names: Sequence[str], wheel: WheelName, url: str) -> str:
    ranked = sorted(((_is_metadata_member(n, wheel), n) for n in names), reverse=True)
    if not ranked or ranked[0][0] == 0:
        raise _fail(url, "malformed wheel: no .dist-info/METADATA inside")
    return ranked[0][1]


# The zip records the range reader needs (APPNOTE 4.3): little-endian, fixed sizes.
_EOCD = struct.Struct("<4s4H2LH")  # 22 bytes: sig, disk, cd disk, entries here, entries, cd size, cd offset, comment
_ZIP64_LOCATOR = struct.Struct("<4sLQL")  # 20 bytes: sig, disk, zip64 EOCD offset, disks
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")  # 56 bytes: ..., entries here, entries, cd size, cd offset
_CENTRAL = struct.Struct("<4s6H3L5H2L")  # 46 bytes per central directory header
_LOCAL = struct.Struct("<4s5H3L2H")  # 30 bytes per local file header
_U16, _U32 = 0xFFFF, 0xFFFFFFFF


class RemoteZip:
    """Reads one member of a zip over HTTP range requests, without fetching the rest.

    Why: a torch_npu wheel weighs tens of MiB; its METADATA is a few KiB near the end of
    the central directory's pointers. Three small reads find it: the tail (end-of-central-
    directory record), the central directory (often inside that same tail), and the
    member's local header + compressed bytes. Stored and deflated members are read;
    anything else (or a server that ignores ``Range``) raises ``_NoRanges`` so the caller
    can fall back to a whole download.

    Example:
        >>> RemoteZip(_Http(5), "http://127.0.0.1:8080/files/t.whl").read(lambda n: n.endswith("METADATA"))  # doctest: +SKIP
        ('torch_npu-2.15.0.dist-info/METADATA', b'Metadata-Version: 2.1...')
    """

    def __init__(self, http: _Http, url: str) -> None:
        self.http, self.url = http, url
        self.size = 0
        self._cache = b""
        self._cache_start = 0

    def read(self, rank: Callable[[str], int]) -> Tuple[str, bytes]:
        """The member whose name ranks highest (> 0) under ``rank``, decompressed and CRC-checked."""
        cd_offset, cd_size = self._central_directory_location()
        entries = self._central_directory(cd_offset, cd_size)
        best = max(entries, key=lambda e: rank(e[0]), default=None)
        if best is None or rank(best[0]) <= 0:
            raise _fail(self.url, "malformed wheel: no .dist-info/METADATA inside")
        return best[0], self._member(*best[1:])

    # -- reads ---------------------------------------------------------------------------

    def _tail(self, length: int) -> None:
        status, headers, body, _ = self.http.get(self.url, {"Range": f"bytes=-{length}"}, ok=(206,))
        start, total = _content_range(headers.get("Content-Range", ""), self.url)
        self.size, self._cache, self._cache_start = total, body, start

    def _bytes(self, start: int, length: int) -> bytes:
        """Bytes [start, start+length) from the cached tail, else one more range request."""
        end = start + length
        if start < 0 or end > self.size:
            raise _fail(self.url, f"malformed wheel: zip record points outside the file ({start}..{end} of {self.size})")
        if self._cache_start <= start and end <= self._cache_start + len(self._cache):
            return self._cache[start - self._cache_start: end - self._cache_start]
        if length == 0:
            return b""
        _, headers, body, _ = self.http.get(self.url, {"Range": f"bytes={start}-{end - 1}"}, ok=(206,))
        got, _ = _content_range(headers.get("Content-Range", ""), self.url)
        if got != start or len(body) != length:
            raise _NoRanges(self.url)
        return body

    # -- records -------------------------------------------------------------------------

    def _central_directory_location(self) -> Tuple[int, int]:
        self._tail(TAIL_PROBE)
        pos = self._cache.rfind(b"PK\x05\x06")
        if pos < 0 and self._cache_start > 0:  # a long zip comment: look further back once
            self._tail(min(self.size, _EOCD_MAX + _ZIP64_LOCATOR.size))
            pos = self._cache.rfind(b"PK\x05\x06")
        if pos < 0 or pos + _EOCD.size > len(self._cache):
            raise _fail(self.url, "malformed wheel: no zip end-of-central-directory record")
        eocd_at = self._cache_start + pos
        _, _, _, _, count, cd_size, cd_offset, _ = _EOCD.unpack(self._bytes(eocd_at, _EOCD.size))
        if count == _U16 or _U32 in (cd_size, cd_offset):
            return self._zip64_location(eocd_at)
        return cd_offset, cd_size

    def _zip64_location(self, eocd_at: int) -> Tuple[int, int]:
        sig, _, record_at, _ = _ZIP64_LOCATOR.unpack(self._bytes(eocd_at - _ZIP64_LOCATOR.size, _ZIP64_LOCATOR.size))
        if sig != b"PK\x06\x07":
            raise _fail(self.url, "malformed wheel: zip64 sizes without a zip64 locator")
        record = _ZIP64_EOCD.unpack(self._bytes(record_at, _ZIP64_EOCD.size))
        if record[0] != b"PK\x06\x06":
            raise _fail(self.url, "malformed wheel: zip64 locator points at no zip64 record")
        return record[9], record[8]

    def _central_directory(self, offset: int, size: int) -> List[Tuple[str, int, int, int, int, int]]:
        """(name, method, flags, crc, compressed size, local header offset) per member."""
        data, pos, out = self._bytes(offset, size), 0, []
        while pos + _CENTRAL.size <= len(data):
            (sig, _, _, flags, method, _, _, crc, csize, usize, n_name, n_extra, n_comment,
             _, _, _, local) = _CENTRAL.unpack_from(data, pos)
            if sig != b"PK\x01\x02":
                raise _fail(self.url, "malformed wheel: bad central directory header")
            start = pos + _CENTRAL.size
            raw = data[start: start + n_name]
            name = raw.decode("utf-8" if flags & 0x800 else "cp437")
            extra = data[start + n_name: start + n_name + n_extra]
            usize, csize, local = _zip64_extra(extra, usize, csize, local)
            out.append((name, method, flags, crc, csize, local))
            pos = start + n_name + n_extra + n_comment
        return out

    def _member(self, method: int, flags: int, crc: int, csize: int, local: int) -> bytes:
        if flags & 0x1 or method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise _NoRanges(self.url)  # encrypted or another codec: let zipfile handle a download
        head = self._bytes(local, _LOCAL.size)
        sig, _, _, _, _, _, _, _, _, n_name, n_extra = _LOCAL.unpack(head)
        if sig != b"PK\x03\x04":
            raise _fail(self.url, "malformed wheel: bad local file header")
        data = self._bytes(local + _LOCAL.size + n_name + n_extra, csize)
        try:
            out = zlib.decompressobj(-15).decompress(data) if method == zipfile.ZIP_DEFLATED else data
        except zlib.error as exc:
            raise _fail(self.url, f"malformed wheel: METADATA does not inflate ({exc})") from None
        if zlib.crc32(out) & _U32 != crc:
            raise _fail(self.url, "malformed wheel: METADATA fails its CRC-32")
        return out


def _zip64_extra(extra: bytes, usize: int, csize: int, local: int) -> Tuple[int, int, int]:
    """Replace the 0xFFFFFFFF sentinels with the 64-bit values of the zip64 extra field (id 1)."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, size = struct.unpack_from("<2H", extra, pos)
        if tag == 1:
            values, at = [], pos + 4
            for value in (usize, csize, local):
                if value == _U32:
                    value = struct.unpack_from("<Q", extra, at)[0]
                    at += 8
                values.append(value)
            return values[0], values[1], values[2]
        pos += 4 + size
    return usize, csize, local


def _content_range(text: str, url: str) -> Tuple[int, int]:
    """``bytes START-END/TOTAL`` -> (START, TOTAL); a missing or odd header means no range support."""
    m = re.match(r"^\s*bytes\s+(\d+)-(\d+)/(\d+)\s*$", text or "")
    if not m:
        raise _NoRanges(url)
    return int(m.group(1)), int(m.group(3))


def read_metadata(http: _Http, file: IndexFile, wheel: WheelName) -> MetadataRead:
    """One wheel's METADATA by the cheapest way the index allows (PEP 658, ranges, download).

    Example:
        >>> read_metadata(_Http(5), file, parse_wheel_filename(file.filename)).method   # doctest: +SKIP
        'pep658'
    """
    before, notes = http.bytes_fetched, []
    raw, method = None, PEP658
    if file.metadata is not None:
        try:
            raw = _metadata_pep658(http, file)
        except UserError as exc:
            if "HTTP 404" not in exc.message:
                raise
            notes.append("the index advertised a .metadata file but had none")
    if raw is None:
        try:
            method = RANGE
            raw = RemoteZip(http, file.url).read(lambda n: _is_metadata_member(n, wheel))[1]
        except _NoRanges:
            method = DOWNLOAD  # ReleaseCheck.full_downloads and the report say so
            raw = _metadata_download(http, file, wheel)
    name, version, requires, requires_python = parse_metadata(raw.decode("utf-8", "replace"))
    if canonicalize_name(name) != canonicalize_name(wheel.name) or _normal(version) != wheel.version:
        notes.append(f"METADATA names {name} {version}, the file name {wheel.name} {wheel.version}")
    return MetadataRead(
        filename=file.filename, arch=wheel.arch or "", method=method, bytes_fetched=http.bytes_fetched - before,
        requires_dist=requires, torch_pin=torch_pin(requires), requires_python=requires_python, note="; ".join(notes),
    )


def _normal(text: str) -> str:
    try:
        return str(Version(text))
    except InvalidVersion:
        return text


# ---------------------------------------------------------------------------------------
# check


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
    http = _Http(timeout)
    page = project_url(index_url, project)
    api, api_version, files = fetch_project_page(http, page)
    result = ReleaseCheck(index_url=index_url, project=project, page_url=page, api=api,
                          api_version=api_version, files=len(files), kb=kb)
    by_version = _group_wheels(files, project, result)
    for version in sorted(by_version, key=Version):
        pairs = by_version[version]
        result.yanked.extend(YankedFile(f.filename, version, f.yanked) for f, _ in pairs if f.yanked is not None)
        if kb.torch_npu(version) is not None:
            result.known.append(version)
        else:
            result.new.append(_new_release(http, version, pairs, kb, result))
    seen = set(by_version)
    result.missing = [v for v in kb.torch_npu_versions() if v not in seen]
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
        else:
            result.wheels += 1
            out.setdefault(wheel.version, []).append((file, wheel))
    return out


def _new_release(http: _Http, version: str, pairs: List[Tuple[IndexFile, WheelName]],
                 kb: knowledge.KnowledgeBase, result: ReleaseCheck) -> NewRelease:
    reads = [read_metadata(http, f, w) for f, w in _one_wheel_per_arch(pairs)]
    for read in reads:
        if read.note:
            result.warnings.append(f"{read.filename}: {read.note}")
    entry = build_entry(version, [w for _, w in pairs], [f for f, _ in pairs], reads, kb)
    torches = {torch_of_pin(r.torch_pin) for r in reads if r.torch_pin}
    if len(torches) > 1:
        result.warnings.append(f"torch_npu {version}: the arches pin different torch releases ({', '.join(sorted(torches))})")
    return NewRelease(version=version, entry=entry, wheels=tuple(f.filename for f, _ in pairs), metadata=reads)


def _one_wheel_per_arch(pairs: Sequence[Tuple[IndexFile, WheelName]]) -> List[Tuple[IndexFile, WheelName]]:
    """Per arch, the cheapest wheel to read: not yanked, with a .metadata file, newest Python."""
    best: Dict[str, Tuple[IndexFile, WheelName]] = {}
    for file, wheel in pairs:
        key = (file.yanked is None, file.metadata is not None, max(map(_py_key, wheel.pythons), default=()))
        old = best.get(wheel.arch or "")
        if old is None or key > (old[0].yanked is None, old[0].metadata is not None,
                                 max(map(_py_key, old[1].pythons), default=())):
            best[wheel.arch or ""] = (file, wheel)
    return [best[a] for a in knowledge.ARCHES if a in best]


def build_entry(version: str, wheels: Sequence[WheelName], files: Sequence[IndexFile],
                reads: Sequence[MetadataRead], kb: knowledge.KnowledgeBase) -> Dict[str, Any]:
    """A ``torch_npu_releases.items`` entry for a version found on the index, ``cann: null``.

    Example:
        >>> w = parse_wheel_filename("torch_npu-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl")
        >>> m = MetadataRead(w.filename, "x86_64", "pep658", 900, ("torch==2.15.0.*", "numpy"), "torch==2.15.0.*", ">=3.10")
        >>> e = build_entry("2.15.0", [w], [IndexFile(w.filename, "u", upload_time="2026-12-01T08:00:00Z")], [m], load_kb())
        >>> e["torch"], e["requires_dist"], e["python"], e["manylinux"], e["cann"], e["first_upload"]
        ('2.15.0', {'x86_64': 'torch==2.15.0.*, numpy'}, {'x86_64': ['3.11']}, {'x86_64': 'manylinux_2_28'}, None, '2026-12-01')
    """
    arches = [a for a in knowledge.ARCHES if any(w.arch == a for w in wheels)]
    by_arch = {r.arch: r for r in reads}
    pins = [torch_of_pin(by_arch[a].torch_pin) for a in arches if a in by_arch and by_arch[a].torch_pin]
    pinned = next((p for p in pins if p), None)
    entry: Dict[str, Any] = {
        "version": version,
        "prerelease": Version(version).is_prerelease,
        "torch": pinned or Version(version).base_version,
        "torch_source": "wheel METADATA Requires-Dist" if pinned else "version prefix only (wheel declares no torch requirement)",
        "requires_dist": {a: ", ".join(by_arch[a].requires_dist) for a in arches if a in by_arch},
        "python": {a: _pythons(wheels, a) for a in arches},
        "manylinux": {a: f"manylinux_{_floor(wheels, a)}" for a in sorted(arches) if _floor(wheels, a)},
        "first_upload": _first_upload(files),
        "cann": None,
        "cann_source": [],
        "cann_note": CANN_NOTE,
        "branch": None,
        "note": _entry_note(version, files, kb),
        "source": list(ENTRY_SOURCES),
    }
    return entry


def load_kb() -> knowledge.KnowledgeBase:
    """The shipped knowledge base (``knowledge.load``); a short name for examples."""
    return knowledge.load()


def _pythons(wheels: Sequence[WheelName], arch: str) -> List[str]:
    found = {p for w in wheels if w.arch == arch for p in w.pythons}
    return sorted(found, key=_py_key)


def _floor(wheels: Sequence[WheelName], arch: str) -> Optional[str]:
    """The highest manylinux floor among the arch's wheels: one glibc that suits every Python's wheel."""
    floors = [w.manylinux for w in wheels if w.arch == arch and w.manylinux]
    return max(floors, key=_glibc_key) if floors else None


def _first_upload(files: Sequence[IndexFile]) -> Optional[str]:
    dates = sorted(str(f.upload_time)[:10] for f in files if f.upload_time)
    return dates[0] if dates else None


def _entry_note(version: str, files: Sequence[IndexFile], kb: knowledge.KnowledgeBase) -> str:
    note = f"found on the package index by `ascend-build releases check` on {date.today().isoformat()}"
    if files and all(f.yanked is not None for f in files):
        note += "; every file is yanked"
    unpublished = kb.unpublished(version)
    if unpublished is not None:
        note += "; listed under torch_npu_not_on_pypi before"
        if unpublished.get("cann"):
            note += f" (with CANN {unpublished['cann']} there)"
    return note


# ---------------------------------------------------------------------------------------
# write: insert the entries into ascend-compat.yaml


def write(result: ReleaseCheck, data_path: Optional[Path] = None) -> List[str]:
    """Insert the new entries into ``torch_npu_releases.items``, in version order; the versions written.

    The rest of the file keeps its bytes: the entries are dumped as YAML text and
    inserted before the first item with a higher version (after the last item
    otherwise). Before the file is replaced (atomically, temp file + os.replace), the
    new text must parse to the old document plus exactly those entries, and a
    knowledge base built from it must see each new version with ``cann`` None; after,
    the file is read back and checked again, and any failure restores the original
    bytes. Versions the file already lists are left alone.

    Example:
        >>> write(check("http://127.0.0.1:8080/simple/"), Path("/tmp/ascend-compat.yaml"))   # doctest: +SKIP
        ['2.15.0']
    """
    path = Path(data_path) if data_path else knowledge.DATA_DIR / "ascend-compat.yaml"
    original = _read_bytes(path)
    text = original.decode("utf-8")
    old_doc = _parse(text, path)
    have = {_normal(str(i.get("version"))) for i in old_doc["torch_npu_releases"]["items"]}
    entries = [copy.deepcopy(r.entry) for r in result.new if _normal(r.version) not in have]
    if not entries:
        return []
    new_text = insert_entries(text, entries, path)
    _verify(old_doc, new_text, entries, path)
    _replace(path, new_text.encode("utf-8"), expect=original)
    try:
        _verify(old_doc, _read_bytes(path).decode("utf-8"), entries, path)
    except Exception:
        _replace(path, original, expect=original, check=False)
        raise
    return [str(e["version"]) for e in entries]


def insert_entries(text: str, entries: Sequence[Mapping[str, Any]], path: Path) -> str:
    """``text`` with each entry dumped in place among ``torch_npu_releases.items`` (sorted by version)."""
    items, end_line = _items_layout(text, path)
    lines = text.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    dash = items[0][2] if items else 2
    inserts: Dict[int, List[Mapping[str, Any]]] = {}
    for entry in sorted(entries, key=lambda e: Version(str(e["version"]))):
        version = Version(str(entry["version"]))
        at = next((line for v, line, _ in items if v is not None and v > version), end_line)
        inserts.setdefault(at, []).append(entry)
    for at in sorted(inserts, reverse=True):
        block = "".join(_dump_item(e, dash, newline) for e in inserts[at])
        if at > 0 and at == len(lines) and not lines[-1].endswith("\n"):
            lines[-1] += newline
        lines[at:at] = [block]
    return "".join(lines)


def _items_layout(text: str, path: Path) -> Tuple[List[Tuple[Optional[Version], int, int]], int]:
    """Per existing item (version, line its ``- `` sits on, its column); and the line after the last item."""
    try:
        root = yaml.compose(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc})", fix="repair the file before adding releases", exit_code=1)
    seq = _node_at(root, ("torch_npu_releases", "items"))
    if not isinstance(seq, yaml.SequenceNode) or seq.flow_style:
        raise UserError(f"{path}: torch_npu_releases.items is not a block list", exit_code=1,
                        fix="keep torch_npu_releases.items as a '- version: ...' list")
    lines = text.splitlines()
    items = []
    for node in seq.value:
        line = node.start_mark.line
        while line > 0 and not lines[line].lstrip().startswith("-"):
            line -= 1
        line = _above_comments(lines, line)
        items.append((_node_version(node), line, lines[line].index("-") if "-" in lines[line] else 2))
    if not items:
        return [], seq.end_mark.line + (1 if seq.end_mark.column else 0)
    end = seq.value[-1].end_mark.line + (1 if seq.value[-1].end_mark.column else 0)
    while end > 0 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1  # blank lines and comments above the next key belong to that key
    return items, end


def _above_comments(lines: List[str], line: int) -> int:
    """Move up over comment lines directly above an item: they describe it."""
    while line > 0 and lines[line - 1].lstrip().startswith("#"):
        line -= 1
    return line


def _node_at(node: Any, keys: Sequence[str]) -> Any:
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            return None
        node = next((v for k, v in node.value if getattr(k, "value", None) == key), None)
    return node


def _node_version(node: Any) -> Optional[Version]:
    value = _node_at(node, ("version",))
    try:
        return Version(str(value.value)) if isinstance(value, yaml.ScalarNode) else None
    except InvalidVersion:
        return None


def _dump_item(entry: Mapping[str, Any], dash: int, newline: str) -> str:
    text = yaml.safe_dump([dict(entry)], default_flow_style=False, sort_keys=False, allow_unicode=True, width=4096)
    return "".join(" " * dash + line + newline for line in text.splitlines())


def _verify(old_doc: Mapping[str, Any], new_text: str, entries: Sequence[Mapping[str, Any]], path: Path) -> None:
    """The new text is the old document plus exactly ``entries``, sorted, and the KB reads them with cann None."""
    new_doc = _parse(new_text, path)
    items = new_doc["torch_npu_releases"]["items"]
    added = {_normal(str(e["version"])) for e in entries}
    kept = [i for i in items if _normal(str(i.get("version"))) not in added]
    rest_new = {k: v for k, v in new_doc.items() if k != "torch_npu_releases"}
    rest_old = {k: v for k, v in old_doc.items() if k != "torch_npu_releases"}
    problems = []
    if kept != old_doc["torch_npu_releases"]["items"] or rest_new != rest_old:
        problems.append("the existing data changed")
    if len(items) != len(kept) + len(entries):
        problems.append("the new entries did not land in torch_npu_releases.items")
    order = [Version(str(i["version"])) for i in items]
    if order != sorted(order):
        problems.append("the items are out of version order")
    kb = _kb_from(new_doc, path.parent)
    for entry in entries:
        rel = kb.torch_npu(str(entry["version"]))
        if rel is None or rel.cann is not None:
            problems.append(f"the knowledge base does not read {entry['version']} back with cann null")
    if problems:
        raise UserError(f"{path}: adding {', '.join(sorted(added))} went wrong: {'; '.join(problems)}",
                        fix="the file was left as it was; report this with the file attached", exit_code=1)


def _kb_from(compat: Mapping[str, Any], folder: Path) -> knowledge.KnowledgeBase:
    """A KnowledgeBase built like ``knowledge.load()``, from the sibling data files when present."""
    def doc(name: str) -> Dict[str, Any]:
        path = folder / name if (folder / name).exists() else knowledge.DATA_DIR / name
        if name.endswith(".json"):
            return json.loads(path.read_text(encoding="utf-8"))
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_YAML_LOADER) or {}
    return knowledge.KnowledgeBase(compat=compat, packages=doc("cann-packages.json"),
                                   os_doc=doc("os.yaml"), conda_doc=doc("conda.yaml"))


def _parse(text: str, path: Path) -> Dict[str, Any]:
    try:
        doc = yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc})", fix="repair the file before adding releases", exit_code=1)
    if not isinstance(doc, dict) or not isinstance((doc.get("torch_npu_releases") or {}).get("items"), list):
        raise UserError(f"{path}: no torch_npu_releases.items list", exit_code=1,
                        fix="point at builder/data/ascend-compat.yaml or a copy of it")
    return doc


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}", fix="check the path and its permissions", exit_code=1)


def _replace(path: Path, data: bytes, expect: Optional[bytes], check: bool = True) -> None:
    """Write ``data`` to a temp file beside ``path`` and rename it over.

    With ``check``, refuse when the file no longer holds ``expect`` (None: no file),
    so an edit made meanwhile by someone else is never lost.
    """
    current = _read_bytes(path) if path.exists() else None
    if check and current != expect:
        raise UserError(f"{path} changed while releases were being added; nothing was written",
                        fix="run the command again", exit_code=1)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise UserError(f"cannot write {path}: {exc.strerror}", fix="check the folder's permissions and free space",
                        exit_code=1)


# ---------------------------------------------------------------------------------------
# propose: draft matrix cells


def default_proposal_path() -> Path:
    """``./matrix/proposed/torch_npu.yaml`` when ./matrix exists, else beside the shipped matrix/."""
    here = Path("matrix")
    folder = here if here.is_dir() else Path(knowledge.__file__).resolve().parent.parent / "matrix"
    return folder / PROPOSAL_NAME


def propose(result: ReleaseCheck, matrix_path: Optional[Path] = None,
            kb: Optional[knowledge.KnowledgeBase] = None) -> str:
    """Append one draft matrix cell per new release to the proposal file; the text appended.

    Each cell carries a ``# TODO: confirm CANN pairing`` comment: its CANN is the newest
    one the knowledge base pairs with the same torch line (X.Y), else the newest it
    pairs with any torch_npu release. Python is the newest tag with a wheel on every
    arch, arch the arches with wheels, os the first preferred base OS whose glibc
    meets the wheels' manylinux floor, chip 910b. Existing cells are never touched: the
    text is appended, and a release the file already proposes is skipped. ``""`` when
    nothing was appended. The file is created as a complete matrix when missing.

    Example:
        >>> print(propose(check("http://127.0.0.1:8080/simple/"), Path("/tmp/proposed.yaml")))  # doctest: +SKIP
          # torch_npu 2.15.0 (torch 2.15.0) found on the package index ...
          # TODO: confirm CANN pairing: ...
          - cann: 9.1.0
          ...
    """
    kb = kb or result.kb or knowledge.load()
    path = Path(matrix_path) if matrix_path else default_proposal_path()
    original = _read_bytes(path) if path.exists() else None
    text = original.decode("utf-8") if original is not None else ""
    already, dash = _proposal_layout(text, path)
    cells = [_cell_text(r, kb, dash) for r in result.new if _normal(r.version) not in already]
    cells = [c for c in cells if c]
    if not cells:
        return ""
    block = "\n".join(cells)
    if not text.strip():
        new_text = _PROPOSAL_HEAD + block
    else:
        new_text = text + ("" if text.endswith("\n") else "\n") + "\n" + block
    _check_proposal(text, new_text, len(cells), path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _replace(path, new_text.encode("utf-8"), expect=original)
    return block


_PROPOSAL_HEAD = """\
# Draft cells for torch_npu releases found by `ascend-build releases check --propose`.
# Every CANN value here is a guess until a human confirms the pairing (see each TODO);
# move a cell into the shipped matrix only after that.
cells:
"""


def _proposal_layout(text: str, path: Path) -> Tuple[set, int]:
    """(torch_npu versions the file already proposes, column of its cells' ``-``).

    Appending is only safe when ``cells`` is a block list and the file's last key.
    """
    if not text.strip():
        return set(), 2
    try:
        root = yaml.compose(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc})", fix="repair or move the proposal file", exit_code=1)
    keys = [k.value for k, _ in root.value] if isinstance(root, yaml.MappingNode) else []
    cells = _node_at(root, ("cells",))
    if not isinstance(cells, yaml.SequenceNode) or cells.flow_style or keys[-1:] != ["cells"]:
        raise UserError(f"{path}: 'cells' is not the last key, so new cells cannot be appended safely",
                        fix="make 'cells:' a '- ...' list at the end of the file, or pass another file", exit_code=1)
    lines = text.splitlines()
    dash = 2
    if cells.value:
        line = lines[cells.value[0].start_mark.line]
        dash = line.index("-") if line.lstrip().startswith("-") else cells.value[0].start_mark.column
    found = set()
    for node in cells.value:
        value = _node_at(node, ("torch_npu",))
        if isinstance(value, yaml.ScalarNode):
            found.add(_normal(value.value))
    return found, dash


def _check_proposal(old_text: str, new_text: str, added: int, path: Path) -> None:
    """The appended text must parse as exactly ``added`` more cells, or nothing is written."""
    def count(text: str) -> int:
        doc = yaml.load(text, Loader=_YAML_LOADER) if text.strip() else {}
        return len(doc.get("cells") or []) if isinstance(doc, dict) else -1
    try:
        ok = count(new_text) == count(old_text) + added
    except yaml.YAMLError:
        ok = False
    if not ok:
        raise UserError(f"{path}: appending the proposed cells would not yield {added} more cells; nothing was written",
                        fix="check the file's indentation of 'cells', or pass another file", exit_code=1)


def _cell_text(release: NewRelease, kb: knowledge.KnowledgeBase, dash: int = 2) -> str:
    entry = release.entry
    arches = [a for a in knowledge.ARCHES if entry["python"].get(a)]
    python = _common_python(entry["python"], arches)
    if python is None:
        return ""
    arches = [a for a in arches if python in entry["python"][a]]
    cann, why = suggest_cann(kb, entry["torch"])
    floor = max((entry["manylinux"].get(a, "manylinux_2_17")[len("manylinux_"):] for a in arches), key=_glibc_key)
    os_id = _os_for(kb, floor)
    arch_text = arches[0] if len(arches) == 1 else "[" + ", ".join(sorted(arches)) + "]"
    lines = [
        f"# torch_npu {release.version} (torch {entry['torch']}) found on the package index; no CANN pairing is published.",
        f"# TODO: confirm CANN pairing: {cann} is {why}.",
        f"- cann: {cann}",
        "  chip: 910b",
        f"  arch: {arch_text}",
        f"  os: {os_id}",
        f'  python: "{python}"',
        f"  torch_npu: {release.version}",
    ]
    return "".join(" " * dash + line + "\n" for line in lines)


def _common_python(pythons: Mapping[str, Sequence[str]], arches: Sequence[str]) -> Optional[str]:
    """Newest Python with a wheel on every arch; else the newest on any (the arch list shrinks to fit)."""
    sets = [set(pythons[a]) for a in arches]
    common = set.intersection(*sets) if sets else set()
    pool = (common or set.union(*sets)) if sets else set()
    return max(pool, key=_py_key) if pool else None


def suggest_cann(kb: knowledge.KnowledgeBase, torch: str) -> Tuple[str, str]:
    """(CANN, why) to draft a cell with: newest paired on the torch line, else newest paired at all.

    Example:
        >>> suggest_cann(load_kb(), "2.8.0")
        ('9.0.0', 'the newest CANN paired with a torch 2.8 torch_npu release')
    """
    line = ".".join(Version(torch).base_version.split(".")[:2])
    same, anywhere = [], []
    for version in kb.torch_npu_versions():
        rel = kb.torch_npu(version)
        if rel is None or not rel.cann:
            continue
        anywhere.append(rel.cann)
        if ".".join(Version(rel.torch).base_version.split(".")[:2]) == line:
            same.append(rel.cann)
    if same:
        return max(same, key=versions.cann), f"the newest CANN paired with a torch {line} torch_npu release"
    if anywhere:
        return max(anywhere, key=versions.cann), f"the newest CANN paired with any torch_npu release (none on torch {line})"
    return kb.cann_releases()[-1], "the newest CANN the knowledge base knows (it pairs none)"


def _os_for(kb: knowledge.KnowledgeBase, floor: str) -> str:
    need = _glibc_key(floor)
    for os_id in _OS_PREFERENCE:
        info = kb.os_info(os_id)
        if info is not None and info.glibc >= need:
            return os_id
    return _OS_PREFERENCE[0]


# ---------------------------------------------------------------------------------------
# Text report


def format_check(result: ReleaseCheck) -> str:
    """The human report of a check: index, counts, each new release per arch, yanked files.

    Example:
        >>> r = ReleaseCheck(index_url="http://127.0.0.1:1/simple/", project="torch-npu",
        ...                  page_url="http://127.0.0.1:1/simple/torch-npu/", api="html", api_version="1.0")
        >>> print(format_check(r).splitlines()[0])
        index: http://127.0.0.1:1/simple/torch-npu/ (PEP 503 HTML, api 1.0)
    """
    api = "PEP 691 JSON" if result.api == "json" else "PEP 503 HTML"
    out = [
        f"index: {result.page_url} ({api}, api {result.api_version or 'unstated'})",
        f"files: {result.files} ({result.wheels} Linux wheels, {len(result.skipped)} skipped); "
        f"versions: {len(result.known) + len(result.new)} ({len(result.known)} known, {len(result.new)} new); "
        f"{_size(result.bytes_fetched)} fetched",
    ]
    if not result.new:
        out.append("no new torch_npu releases")
    else:
        out.append(f"new torch_npu releases ({len(result.new)}):")
        for release in result.new:
            out.extend(_format_release(release))
    if result.yanked:
        out.append(f"yanked files ({len(result.yanked)}):")
        out.extend(f"  {y.filename}" + (f": {y.reason}" if y.reason else "") for y in result.yanked)
    if result.full_downloads:
        out.append(f"downloaded whole (the server ignores Range): {', '.join(result.full_downloads)}")
    out.extend(f"warning: {w}" for w in result.warnings)
    if result.missing:
        out.append(f"{len(result.missing)} known release(s) not on this index (see --json 'missing')")
    if result.new:
        out.append("next: --write adds them to the knowledge base with cann: null; --propose drafts matrix cells")
    return "\n".join(out)


def _format_release(release: NewRelease) -> List[str]:
    e = release.entry
    flags = " (pre-release)" if e.get("prerelease") else ""
    lines = [f"  torch_npu {release.version}{flags}: torch {e['torch']}, first upload {e.get('first_upload') or 'unknown'}, "
             f"CANN unknown ({CANN_NOTE})"]
    reads = {m.arch: m for m in release.metadata}
    for arch in knowledge.ARCHES:
        if arch not in e["python"]:
            continue
        m = reads.get(arch)
        pin = (m.torch_pin or "no torch requirement") if m else "METADATA not read"
        lines.append(
            f"    {arch:<8} {pin:<18} python {', '.join(e['python'][arch])}; {e['manylinux'].get(arch, 'no manylinux tag')}"
            + (f"; Requires-Python {m.requires_python or 'unset'}; METADATA by {_METHOD_TEXT[m.method]} ({_size(m.bytes_fetched)})"
               if m else ""))
    return lines


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


__all__ = [
    "INDEX_URL_ENV", "PROJECT", "ReleaseCheck", "NewRelease", "MetadataRead", "YankedFile",
    "IndexFile", "WheelName", "RemoteZip", "check", "write", "propose", "format_check", "default_index_url",
    "default_proposal_path", "parse_wheel_filename", "parse_metadata", "torch_pin", "torch_of_pin",
    "suggest_cann", "build_entry", "insert_entries",
]
