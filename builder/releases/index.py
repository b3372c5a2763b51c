"""A project's files on a simple index: its page asked for as PEP 691 JSON, else read as PEP 503 HTML."""

from __future__ import annotations

import html.parser
import os
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from packaging.utils import canonicalize_name

from builder import documents
from builder.errors import UserError
from builder.releases.http_client import Http, url_error

INDEX_URL_ENV = "ASCEND_BUILD_INDEX_URL"
PROJECT = "torch-npu"
PUBLIC_INDEX_URL = "https://pypi.org/simple/"  # pip's own default, for when pip names no index
# This interpreter's pip, so the answer is the index an install here would use.
PIP_CONFIG_LIST = (sys.executable, "-m", "pip", "config", "list")

# PEP 691: prefer JSON, accept the HTML serialisations (PEP 503) as a fallback.
ACCEPT = ("application/vnd.pypi.simple.v1+json, "
          "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01")
_JSON_TYPES = ("application/vnd.pypi.simple.v1+json", "application/vnd.pypi.simple.latest+json", "application/json")
_HTML_TYPES = ("application/vnd.pypi.simple.v1+html", "application/vnd.pypi.simple.latest+html", "text/html")


def default_index_url() -> str:
    """The index to ask when the caller names none: ``$ASCEND_BUILD_INDEX_URL``, else pip's, else the public one.

    Why an environment variable: sites behind a mirror set it once instead of
    passing ``--index-url`` to every run. Without one, the answer is the index pip
    itself would install from (``PIP_INDEX_URL``, else its configuration files),
    and only when pip names none the public index.

    Example:
        >>> default_index_url().startswith("http")
        True
    """
    return (os.environ.get(INDEX_URL_ENV) or os.environ.get("PIP_INDEX_URL") or pip_configured_index()
            or PUBLIC_INDEX_URL)


def pip_configured_index() -> Optional[str]:
    """The ``index-url`` pip's configuration files set (``[install]`` over ``[global]``), else None.

    Why ask ``pip config list`` rather than read pip.conf: pip knows which files it
    reads on this host (user, site, ``PIP_CONFIG_FILE``) and which one wins. No pip,
    or a pip that fails, means no answer.
    """
    try:
        done = subprocess.run(PIP_CONFIG_LIST, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    values = {}
    for line in done.stdout.splitlines() if done.returncode == 0 else ():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip("'\"")  # pip prints repr()s: 'https://...'
    return values.get("install.index-url") or values.get("global.index-url") or None


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


def fetch_project_page(http: Http, url: str) -> Tuple[str, str, List[IndexFile]]:
    """GET the project page asking for JSON first; returns (api, api version, files).

    Example:
        >>> fetch_project_page(Http(5), "http://127.0.0.1:8080/simple/torch-npu/")   # doctest: +SKIP
        ('json', '1.1', [IndexFile(filename='torch_npu-2.4.0-...whl', ...), ...])
    """
    _, headers, body, final = http.get(url, {"Accept": ACCEPT})
    kind = headers.get_content_type() if headers else ""
    if kind not in _JSON_TYPES + _HTML_TYPES:  # some static mirrors send no useful type: look
        head = body.lstrip()[:1]
        kind = _JSON_TYPES[0] if head == b"{" else _HTML_TYPES[0] if head == b"<" else kind
    if kind in _JSON_TYPES:
        api, (version, files) = "json", parse_json_page(body, final)
    elif kind in _HTML_TYPES:
        api, (version, files) = "html", parse_html_page(body, final)
    else:
        raise url_error(final, f"malformed project page: content type {kind or 'none'!r} is neither JSON nor HTML")
    if not files:  # a project that publishes wheels has files: an empty page is a wrong or broken index, not "nothing new"
        raise url_error(final, "the project page lists no files at all, so nothing can be compared with the knowledge base")
    return api, version, files


def _check_api_version(version: str, url: str) -> None:
    """PEP 629: a client must refuse a major version it does not know."""
    major = version.split(".")[0]
    if major and major != "1":
        raise url_error(url, f"simple API version {version} is not supported (this tool reads 1.x)")


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
        doc = documents.load_json(body.decode("utf-8"), url)
    except documents.TooDeep:
        raise url_error(url, "malformed project page: JSON nested too deep") from None
    except (UnicodeDecodeError, ValueError) as exc:  # documents.Refused is a ValueError too
        raise url_error(url, f"malformed project page: not JSON ({getattr(exc, 'message', exc)})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise url_error(url, "malformed project page: JSON without a 'files' list")
    if "meta" in doc and not isinstance(doc["meta"], dict):  # PEP 691: an object holding api-version
        raise url_error(url, "malformed project page: 'meta' is not an object")
    meta = doc.get("meta") or {}
    version = str(meta.get("api-version", ""))
    _check_api_version(version, url)
    files = []
    for i, item in enumerate(doc["files"]):
        if not (isinstance(item, dict) and isinstance(item.get("filename"), str) and isinstance(item.get("url"), str)):
            raise url_error(url, f"malformed project page: files[{i}] lacks a filename or url")
        files.append(IndexFile(
            filename=item["filename"],
            url=_absolute(url, item["url"]),
            hashes={str(k): str(v) for k, v in _mapping(item.get("hashes")).items()},
            requires_python=_text(item.get("requires-python")),
            yanked=_json_yanked(item.get("yanked")),
            metadata=_json_metadata(item.get("core-metadata", item.get("dist-info-metadata"))),
            upload_time=_text(item.get("upload-time")),
        ))
    return version, files


def _mapping(value: Any) -> Dict[str, Any]:
    """A JSON field that should be an object; anything else counts as absent."""
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> Optional[str]:
    """A JSON field that should be a string; anything else counts as absent."""
    return value if isinstance(value, str) else None


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
        raise url_error(url, f"malformed project page: not UTF-8 ({exc})") from None
    parser = _AnchorParser()
    parser.feed(text)
    parser.close()
    if parser.tags == 0:
        raise url_error(url, "malformed project page: no HTML tags at all")
    _check_api_version(parser.api_version, url)
    files = []
    for attrs, label in parser.anchors:
        href = attrs.get("href")
        if not href:
            raise url_error(url, f"malformed project page: anchor {label!r} has no href")
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
