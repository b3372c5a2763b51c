"""Talk to an OCI registry: tags, manifests and configs (every byte checked), and image indexes.

Both wings use it: the node wing chooses an image from registry labels alone (`pull`),
the build wing publishes the index that puts a cell's arches under one tag.

- **Names as Docker resolves them**: ``docker.io`` and ``index.docker.io`` mean Docker
  Hub's API host, and a one-part repository there is ``library/<name>``.
- **Auth as Docker does it**: a 401 with a ``Basic`` challenge is answered with
  credentials; with a ``Bearer`` challenge, with a token from the realm, fetched
  anonymously when no credentials are found (public repositories need none).
- **Credentials, first found wins**: arguments; ``ASCEND_BUILD_REGISTRY_USER`` /
  ``_PASSWORD``; then ``~/.docker/config.json`` in Docker's own order: ``credHelpers``
  for the host, ``credsStore``, the ``auths`` entry.
- **Transport**: HTTPS, except plain HTTP to a loopback address (as Docker treats loopback
  registries). A token realm must be HTTPS too (HTTP only on loopback), and credentials
  never follow a redirect to another host.
- **Every byte checked**: a manifest's body must hash to the digest it was asked by (or
  that the registry announced), a blob to its digest; reads stop at a size limit and a
  deadline, so a hostile or broken server can neither forge labels nor hang us.

Why not a library: oras-py (the well-kept Python OCI client) reads only the ``auths``
entries of the Docker config (no ``credHelpers``/``credsStore``) and does not map Docker
Hub names, so it would cover less than this file while adding requests and jsonschema.

Example:
    >>> api_name("docker.io", "ubuntu")
    ('registry-1.docker.io', 'library/ubuntu')
    >>> is_loopback("127.0.0.1:5000"), is_loopback("127.example.com"), is_loopback("[::1]:5000")
    (True, False, True)
    >>> reg = Registry("127.0.0.1:5000", username="ci", password="secret")   # doctest: +SKIP
    >>> reg.tags("ascend-build/pytorch")[:1]                                  # doctest: +SKIP
    ['cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64']
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import hashlib
import http.client
import ipaddress
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, ContextManager, Dict, Iterator, List, Optional, Protocol, Set, Tuple, TypeVar

from builder import bounded, documents
from builder.errors import UserError

T = TypeVar("T")

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
IMAGE_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join(INDEX_TYPES + IMAGE_TYPES)
ARCH_TO_PLATFORM = {"x86_64": "amd64", "aarch64": "arm64"}

DOCKER_HUB_NAMES = ("docker.io", "index.docker.io", "registry-1.docker.io")
DOCKER_HUB_API = "registry-1.docker.io"
DOCKER_HUB_CONFIG_KEY = "https://index.docker.io/v1/"  # how Docker stores Hub credentials

MANIFEST_LIMIT = 4 << 20   # the distribution registry's own limit for a manifest
CONFIG_LIMIT = 16 << 20    # an image config is a few KB; a label-heavy one well under this
TAG_PAGE = 1000
TAG_PAGES = 1000           # a million tags; an endless Link chain stops here
DEADLINE = 120.0           # seconds for one request, however slowly the server trickles
# Retries where retrying is safe (GET and HEAD; PUT of a manifest, the same bytes again; a blob's
# whole upload, by its digest): after HTTP 429, 500, 502, 503, 504 or a connection reset.
RETRIES = 4                # so 5 tries in all
BACKOFF = 0.5              # seconds before the first retry, doubled each time, at most BACKOFF_CAP
BACKOFF_CAP = 8.0
RETRY_AFTER_MAX = 60.0     # a Retry-After longer than this (or than the command's deadline) is not waited for
TRANSIENT_STATUS = (429, 500, 502, 503, 504)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# host[:port] as Docker reads a registry name: a DNS name, an IPv4 address or a bracketed IPv6 one
_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*"
                   r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
TAG_GRAMMAR = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # the distribution spec's tag grammar
# the distribution spec's repository name: path components of lowercase alphanumerics joined by
# '.', '_', '__' or dashes, separated by '/'; 255 characters at most (docker/distribution reference)
NAME_GRAMMAR = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")
NAME_MAX = 255
_HELPER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class Transient(UserError):
    """A failure that may pass: HTTP 429 or 5xx, or the connection reset; ``retry_after`` is the
    seconds the registry asked for (None when it named none)."""

    def __init__(self, message: str, retry_after: Optional[float] = None):
        super().__init__(message, exit_code=1, fix="the registry is failing or throttling: try again later")
        self.retry_after = retry_after


def retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds a ``Retry-After`` header asks for (a number of seconds or an HTTP date); None if none.

    Example:
        >>> retry_after("2"), retry_after(None), retry_after("soon"), retry_after("Mon, 01 Jan 1990 00:00:00 GMT")
        (2.0, None, None, 0.0)
    """
    text = str(value or "").strip()
    seconds = bounded.whole_number(text)
    if seconds is not None:
        return float(seconds)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(frozen=True)
class ImageInfo:
    """One tag as the registry describes it for one arch: the digest to pull and the image's labels."""

    tag: str
    digest: str
    labels: Dict[str, str]
    architecture: str


@dataclass(frozen=True)
class Manifest:
    """A manifest as served: its digest (checked against the body), media type and parsed body."""

    digest: str
    media_type: str
    body: bytes
    data: dict

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES or "manifests" in self.data


class Reader(Protocol):
    """What reads manifests and small blobs by digest: a `Registry`, or an OCI image layout on disk
    (`builder.node.oci_layout.Layout`); `builder.trust.attached.verify` checks statements in either."""

    name: str

    def manifest(self, repository: str, reference: str) -> Manifest: ...

    def blob(self, repository: str, digest: str, limit: int = ...) -> bytes: ...


def is_loopback(host: str) -> bool:
    """True for ``localhost``, ``127.x.y.z`` and ``[::1]`` (with or without a port), nothing else
    (``127.0.0.1:80@192.0.2.2`` is no host at all)."""
    if not _HOST.fullmatch(host):
        return False
    name = host.split("]")[0].lstrip("[") if host.startswith("[") else host.rsplit(":", 1)[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def api_name(host: str, repository: str) -> Tuple[str, str]:
    """The API host and repository Docker would use for ``host/repository``."""
    if host.lower() in DOCKER_HUB_NAMES:
        return DOCKER_HUB_API, repository if "/" in repository else "library/" + repository
    return host, repository


def _hostname(key: str) -> str:
    """A config ``auths`` key to a bare host (Docker's ConvertToHostname)."""
    return re.sub(r"^[a-z]+://", "", key).split("/", 1)[0].lower()


def _from_helper(helper: str, server: str) -> Optional[Tuple[str, str]]:
    """Ask ``docker-credential-<helper>`` for ``server``'s credentials (None if it has none)."""
    if not _HELPER.match(helper):
        return None
    try:
        done = subprocess.run([f"docker-credential-{helper}", "get"], input=server, capture_output=True,
                              text=True, timeout=15)
        found = documents.load_json(done.stdout, f"docker-credential-{helper}'s answer") if done.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    user, secret = (found.get("Username"), found.get("Secret")) if isinstance(found, dict) else (None, None)
    return (user, secret) if isinstance(user, str) and isinstance(secret, str) and secret else None


def docker_config_credentials(host: str) -> Optional[Tuple[str, str]]:
    """What ``docker login`` stored for ``host``: credHelpers, then credsStore, then auths."""
    path = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    try:
        config = documents.load_json(path.read_text(), str(path)) if path.stat().st_size < (1 << 20) else {}
    except documents.Refused:
        raise
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    hub = host.lower() in DOCKER_HUB_NAMES
    server = DOCKER_HUB_CONFIG_KEY if hub else host
    wanted = "index.docker.io" if hub else host.lower()
    helpers = config["credHelpers"] if isinstance(config.get("credHelpers"), dict) else {}
    helper = helpers.get(server) or helpers.get(host)
    if isinstance(helper, str):
        return _from_helper(helper, server)
    if isinstance(config.get("credsStore"), str):
        found = _from_helper(config["credsStore"], server)
        if found:
            return found
    auths = config["auths"] if isinstance(config.get("auths"), dict) else {}
    for key, entry in auths.items():
        if _hostname(str(key)) == wanted and isinstance(entry, dict) and isinstance(entry.get("auth"), str):
            try:
                user, _, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return None
            return (user, password) if user else None
    return None


def credentials(host: str, username: Optional[str] = None, password: Optional[str] = None) -> Optional[Tuple[str, str]]:
    """Arguments, else the environment, else the Docker config; None means anonymous."""
    if username:
        return username, password or ""
    if os.environ.get("ASCEND_BUILD_REGISTRY_USER"):
        return os.environ["ASCEND_BUILD_REGISTRY_USER"], os.environ.get("ASCEND_BUILD_REGISTRY_PASSWORD", "")
    return docker_config_credentials(host)


def _host_of(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc.lower()


class RefusedRedirect(urllib.error.HTTPError):
    """A redirect `_SameHostAuth` would not follow; ``filename`` is where it pointed, ``msg`` why not."""


def _refused(exc: RefusedRedirect, name: str, method: str, what: str) -> UserError:
    return UserError(f"registry {name}: its answer to {method} {what} redirects to {_host_of(exc.filename or '')}, "
                     f"not followed: {exc.msg}", exit_code=1,
                     fix="a registry spoken to in plain HTTP may send the client only to loopback, and one over "
                         "HTTPS never to plain HTTP: serve the registry and the storage it redirects to over HTTPS")


class _SameHostAuth(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but credentials only ever go to the host they were meant for,
    never from HTTPS down to HTTP, and plain HTTP only ever to loopback (a loopback registry,
    spoken to in plain HTTP, may not send the client in clear text anywhere else)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        if req.full_url.startswith("https:") and not newurl.startswith("https:"):
            raise RefusedRedirect(newurl, code, "refusing a redirect from HTTPS to HTTP", headers, fp)
        if not newurl.startswith("https:") and not is_loopback(_host_of(newurl)):
            raise RefusedRedirect(newurl, code, "refusing a plain-HTTP redirect to a host that is not "
                                         "loopback", headers, fp)
        if _host_of(newurl) != _host_of(req.full_url):
            new.headers.pop("Authorization", None)
            new.unredirected_hdrs.pop("Authorization", None)
        return new


def split_reference(ref: str) -> Tuple[str, str, str]:
    """``host/repository:tag`` or ``host/repository@sha256:...`` -> (host, repository, tag or digest).

    Example:
        >>> split_reference("127.0.0.1:5000/team/img:v1")
        ('127.0.0.1:5000', 'team/img', 'v1')
    """
    host, _, rest = ref.partition("/")
    if "@" in rest:
        repository, _, reference = rest.partition("@")
    else:
        head, _, last = rest.rpartition("/")
        name, _, reference = last.partition(":")
        repository = f"{head}/{name}" if head else name
    if not host or not repository or not reference:
        raise UserError(f"{ref!r} is not REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:DIGEST", exit_code=2,
                        fix="write e.g. 127.0.0.1:5000/ascend-build/pytorch:<cell>-x86_64-cpu")
    return host, repository, reference


def config_labels(config: dict) -> Dict[str, str]:
    """An image config's labels as text; a config whose labels are no mapping has none.

    Example:
        >>> config_labels({"config": {"Labels": {"arch": "aarch64", "n": 1}}}), config_labels({"config": 5})
        ({'arch': 'aarch64', 'n': '1'}, {})
    """
    inner = config.get("config")
    labels = inner.get("Labels") if isinstance(inner, dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


class Registry:
    """An OCI distribution API client: read tags, manifests, configs; write manifests."""

    def __init__(self, host: str, username: Optional[str] = None, password: Optional[str] = None,
                 timeout: float = 20, deadline: float = DEADLINE, page_size: int = TAG_PAGE):
        self.name = host.rstrip("/")                     # as the user wrote it (messages, credentials)
        if not _HOST.fullmatch(self.name):
            raise UserError(f"{self.name!r} is not a registry host", exit_code=2,
                            fix="give host[:port], e.g. registry.example.com or 127.0.0.1:5000 (no scheme, user or path)")
        self.host = api_name(self.name, "x")[0]          # where the API answers
        self.base = f"{'http' if is_loopback(self.host) else 'https'}://{self.host}"
        self.timeout, self.deadline, self.page_size = timeout, deadline, page_size
        self._credentials = credentials(self.name, username, password)
        self._auth: Dict[str, str] = {}  # scope -> Authorization header value

    def repository(self, repository: str) -> str:
        """The repository name the API uses (``library/`` added on Docker Hub); a UserError for a name
        outside the distribution grammar (`NAME_GRAMMAR`), which would reach the request's path as is."""
        name = api_name(self.name, repository)[1]
        if len(name) > NAME_MAX or not NAME_GRAMMAR.fullmatch(name):
            raise UserError(f"{repository[:200]!r} (on {self.name}) is not a repository name: lowercase letters "
                            "and digits, joined by '.', '_', '__' or '-', in parts separated by '/'", exit_code=2,
                            fix="give a name like team/ascend-build (and the tag apart, after ':')")
        return name

    def _reference(self, repository: str, reference: str) -> str:
        """``reference`` when it is a tag or a sha256 digest; else a UserError (it would reach the URL path)."""
        if not (TAG_GRAMMAR.fullmatch(reference) or _DIGEST.match(reference)):
            raise UserError(f"{reference[:200]!r} (of {self.name}/{repository}) is neither a tag nor a sha256 digest",
                            exit_code=2, fix="a tag is up to 128 letters, digits, '_', '.' or '-', not starting "
                                             "with '.' or '-'; a digest is sha256: and 64 hex digits")
        return reference

    # --- HTTP -----------------------------------------------------------------

    def _fail(self, message: str, fix: str = "") -> UserError:
        return UserError(f"registry {self.name}: {message}", exit_code=1,
                         fix=fix or "check the registry address, and that it speaks the distribution API (/v2/)")

    def _open(self, request: urllib.request.Request, deadline: float):
        """The answer, its head and body bounded by ``deadline`` (`bounded.opened`); redirects followed
        by `_SameHostAuth` (one per request: a handler belongs to one opener)."""
        return bounded.opened(request, timeout=self.timeout, deadline=deadline, handlers=(_SameHostAuth(),))

    def _read(self, response, limit: int, what: str, deadline: float) -> bytes:
        """At most ``limit`` bytes, by ``deadline``, however the server sends them."""
        announced = bounded.whole_number(response.headers.get("Content-Length"))
        if announced is not None and announced > limit:
            raise self._fail(f"{what} is announced as {bounded.told(announced)} bytes, more than the {limit} allowed")
        return b"".join(bounded.chunks(response, limit=limit, deadline=deadline))

    def _cut(self, cut: bounded.Cut, what: str, limit: int) -> UserError:
        return self._fail(f"{what}: {cut} (limit {limit} bytes, {self.deadline:.0f} s)", "check the registry's health")

    def _send(self, method: str, path_or_url: str, scope: str, *, accept: str = "", data: Optional[bytes] = None,
              content_type: str = "", limit: int = MANIFEST_LIMIT, retry: Optional[bool] = None) -> Tuple[bytes, Dict[str, str]]:
        """One request, answering one 401 challenge; 404 raises LookupError. Retried (``retry``,
        by default for GET and HEAD) after a transient failure (`Transient`), `RETRIES` times with
        backoff; without ``retry`` a transient failure is raised as `Transient`."""
        retry = method in ("GET", "HEAD") if retry is None else retry
        what = urllib.parse.urlsplit(path_or_url).path
        started, attempt = time.monotonic(), 0
        while True:
            try:
                return self._send_once(method, path_or_url, scope, accept=accept, data=data,
                                       content_type=content_type, limit=limit)
            except Transient as failure:
                if not retry:
                    raise
                attempt += 1
                self._pause(failure, attempt, f"{method} {what}", started)

    def _pause(self, failure: Transient, attempt: int, what: str, started: float) -> None:
        """Wait before try ``attempt + 1``, or raise: after `RETRIES` retries, or when the wait the
        registry asks for is longer than `RETRY_AFTER_MAX` or than the command's deadline allows."""
        tries = f"{attempt} tr{'y' if attempt == 1 else 'ies'} in {time.monotonic() - started:.1f} s"
        if attempt > RETRIES:
            raise self._fail(f"{failure.message} ({tries})", "the registry is failing or throttling: try again later")
        wait = failure.retry_after if failure.retry_after is not None else min(BACKOFF_CAP, BACKOFF * 2 ** (attempt - 1))
        if wait > RETRY_AFTER_MAX:
            raise self._fail(f"{failure.message} and asked to retry after {wait:g} s, more than the {RETRY_AFTER_MAX:g} s "
                             f"waited for ({tries})", "try again later, when the registry accepts requests")
        if bounded.remaining(wait, what) < wait:
            raise self._fail(f"{failure.message} and asked to retry after {wait:g} s, past the command's deadline "
                             f"({tries})", "try again later, or allow more time with --deadline SECONDS")
        time.sleep(wait)

    def _send_once(self, method: str, path_or_url: str, scope: str, *, accept: str, data: Optional[bytes],
                   content_type: str, limit: int) -> Tuple[bytes, Dict[str, str]]:
        url = path_or_url if "://" in path_or_url else self.base + path_or_url
        what = urllib.parse.urlsplit(url).path
        deadline = time.monotonic() + self.deadline  # both attempts, from the connection to the last byte
        for attempt in range(2):
            request = urllib.request.Request(url, data=data, method=method)
            if accept:
                request.add_header("Accept", accept)
            if content_type:
                request.add_header("Content-Type", content_type)
            if scope in self._auth:
                request.add_header("Authorization", self._auth[scope])
            try:
                with self._open(request, deadline) as response:
                    # a HEAD's Content-Length is the size of what a GET would send (a layer of GBs): no body
                    body = b"" if method == "HEAD" else self._read(response, limit, what, deadline)
                    return body, {k.lower(): v for k, v in response.headers.items()}
            except bounded.Cut as cut:
                raise self._cut(cut, what, limit) from None
            except RefusedRedirect as exc:
                raise _refused(exc, self.name, method, what) from None
            except urllib.error.HTTPError as exc:
                if exc.code == 401 and attempt == 0:
                    self._authorize(str(exc.headers.get("WWW-Authenticate", ""))[:4096], scope)
                    continue
                if exc.code in (401, 403):
                    who = "refused the credentials given" if self._credentials else "refused anonymous access"
                    raise self._fail(f"{who} for {what}",
                                     "check the repository name; set ASCEND_BUILD_REGISTRY_USER/_PASSWORD or run "
                                     f"`docker login {self.name}` with an account that may read it") from exc
                if exc.code == 404:
                    raise LookupError(what) from None
                if exc.code in TRANSIENT_STATUS:
                    raise Transient(f"answered HTTP {exc.code} for {method} {what}",
                                    retry_after(exc.headers.get("Retry-After"))) from None
                if method in ("GET", "HEAD"):
                    raise self._fail(f"answered HTTP {exc.code} for {method} {what}") from exc
                raise self._fail(f"answered HTTP {exc.code} for {method} {what}",
                                 "the registry refuses this write: check that it accepts pushes (not read-only, "
                                 "not a pull-through cache) and has room") from exc
            except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, http.client.HTTPException) as exc:
                raise Transient(f"the connection broke during {method} {what} "
                                f"({type(exc).__name__})") from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", None)
                if isinstance(reason, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
                    raise Transient(f"the connection broke during {method} {what} "
                                    f"({type(reason).__name__})") from None
                raise self._fail(f"cannot be reached: {reason or exc}",
                                 "check the address and port, and that the registry is running") from exc
        raise AssertionError("unreachable")

    def _basic(self) -> Optional[str]:
        if not self._credentials:
            return None
        user, secret = self._credentials
        return "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()

    def _authorize(self, challenge: str, scope: str) -> None:
        """Answer a 401: basic credentials, or a bearer token from the challenge's realm."""
        kind = challenge.split(" ", 1)[0].lower()
        if kind == "basic":
            basic = self._basic()
            if basic is None:
                raise self._fail("requires authentication",
                                 f"set ASCEND_BUILD_REGISTRY_USER/_PASSWORD or run `docker login {self.name}`")
            self._auth[scope] = basic
            return
        if kind != "bearer":
            raise self._fail(f"asked for an authentication scheme this tool does not speak: {kind or 'none given'}")
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.get("realm", "")
        parts = urllib.parse.urlsplit(realm)
        if (not (parts.scheme == "https" or (parts.scheme == "http" and is_loopback(parts.netloc)))
                or not _HOST.fullmatch(parts.netloc)):  # no user@ part: "127.0.0.1:80@elsewhere" is elsewhere
            raise self._fail(f"its token realm {realm!r} is not an HTTPS address; no credentials were sent there",
                             "the registry's token service must be served over HTTPS")
        query = {"service": params.get("service", ""), "scope": scope}
        request = urllib.request.Request(realm + ("&" if parts.query else "?") + urllib.parse.urlencode(query))
        basic = self._basic()  # None without credentials
        if basic is not None:
            request.add_header("Authorization", basic)
        deadline = time.monotonic() + self.deadline
        try:
            with self._open(request, deadline) as response:
                body = documents.load_json(self._read(response, 1 << 20, "the token", deadline), "the token")
        except bounded.Cut as cut:
            raise self._cut(cut, "the token", 1 << 20) from None
        except RefusedRedirect as exc:
            raise _refused(exc, self.name, "GET", "the token") from None
        except urllib.error.HTTPError as exc:
            who = "the credentials given" if self._credentials else "an anonymous token"
            raise self._fail(f"its token service refused {who} (HTTP {exc.code})",
                             f"check the credentials (ASCEND_BUILD_REGISTRY_USER/_PASSWORD or `docker login {self.name}`)") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: no JSON, or documents.Refused
            raise self._fail(f"getting a token failed: {getattr(exc, 'reason', exc)}",
                             "check the token service named by the registry's challenge") from exc
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise self._fail("its token service answered without a token")
        self._auth[scope] = f"Bearer {token}"

    def _json(self, body: bytes, what: str) -> dict:
        try:
            data = documents.load_json(body, what)
        except ValueError:  # no JSON, or documents.Refused
            data = None
        if not isinstance(data, dict):
            raise self._fail(f"sent something other than a JSON object for {what}")
        return data

    # --- reading --------------------------------------------------------------

    def tags(self, repository: str) -> List[str]:
        """Every tag of ``repository``, across every page (empty when the repository does not exist)."""
        repository = self.repository(repository)
        scope = f"repository:{repository}:pull"
        url = f"/v2/{repository}/tags/list?n={self.page_size}"
        found: Set[str] = set()
        for _ in range(TAG_PAGES):
            try:
                body, headers = self._send("GET", url, scope)
            except LookupError:
                return sorted(found)
            tags = self._json(body, f"the tags of {repository}").get("tags") or []
            if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                raise self._fail(f"sent a malformed tag list for {repository}")
            found.update(t for t in tags if TAG_GRAMMAR.fullmatch(t))  # no image of ours has another
            match = re.match(r'\s*<([^>]*)>\s*;\s*rel="?next"?', headers.get("link", ""))
            if not match:
                return sorted(found)
            url = urllib.parse.urljoin(self.base + "/", match.group(1))
            if _host_of(url) != _host_of(self.base):
                raise self._fail(f"sent a next-page link to another host ({_host_of(url)})")
        raise self._fail(f"sent more than {TAG_PAGES} pages of tags for {repository}")

    def manifest(self, repository: str, reference: str) -> Manifest:
        """The manifest (or index) ``reference`` names; its body must hash to its digest."""
        repository = self.repository(repository)
        reference = self._reference(repository, reference)
        body, headers = self._send("GET", f"/v2/{repository}/manifests/{reference}",
                                   f"repository:{repository}:pull", accept=ACCEPT)
        actual = "sha256:" + hashlib.sha256(body).hexdigest()
        expected = reference if reference.startswith("sha256:") else headers.get("docker-content-digest", actual)
        if expected != actual:
            asked = "the digest asked for" if reference.startswith("sha256:") else "the digest it announced"
            raise self._fail(f"the manifest of {repository}@{reference} hashes to {actual}, not {expected}: "
                             f"the registry served other bytes than {asked}",
                             "nothing was used; check the registry and any proxy before it")
        data = self._json(body, f"{repository}:{reference}")
        media_type = data.get("mediaType") or headers.get("content-type", "").split(";")[0]
        return Manifest(actual, str(media_type), body, data)

    def config(self, repository: str, manifest: Manifest) -> dict:
        """The image config an image manifest points at, checked against its digest."""
        repository = self.repository(repository)
        config = manifest.data.get("config")
        digest = config.get("digest") if isinstance(config, dict) else None
        if not isinstance(digest, str) or not _DIGEST.match(digest):
            raise self._fail(f"the manifest {repository}@{manifest.digest} names no sha256 image config")
        body, _ = self._send("GET", f"/v2/{repository}/blobs/{digest}", f"repository:{repository}:pull",
                             limit=CONFIG_LIMIT)
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise self._fail(f"the config blob {digest} of {repository} does not hash to its digest",
                             "the registry served bytes other than the ones named; nothing was used")
        return self._json(body, f"the config {digest}")

    def inspect(self, repository: str, tag: str, arch: str) -> Optional[ImageInfo]:
        """Digest and labels of ``repository:tag`` for ``arch``; None if the tag does not exist.

        A multi-arch index resolves to this arch's manifest; when it has none, the
        result has no labels and names the arches it does have.
        """
        try:
            top = self.manifest(repository, tag)
            chosen = top
            if top.is_index:
                wanted = ARCH_TO_PLATFORM.get(arch, arch)
                listed = top.data.get("manifests")
                entries = [m for m in listed if isinstance(m, dict)] if isinstance(listed, list) else []
                platforms = [m["platform"] if isinstance(m.get("platform"), dict) else {} for m in entries]
                match = next((m for m, p in zip(entries, platforms) if p.get("architecture") == wanted), None)
                if match is None:
                    return ImageInfo(tag, top.digest, {}, "none of: " + ", ".join(
                        str(p.get("architecture", "?")) for p in platforms))
                if not isinstance(match.get("digest"), str) or not _DIGEST.match(match["digest"]):
                    raise self._fail(f"the index {repository}:{tag} names a manifest without a sha256 digest")
                chosen = self.manifest(repository, match["digest"])
            config = self.config(repository, chosen)
        except LookupError:
            return None
        return ImageInfo(tag, chosen.digest, config_labels(config), str(config.get("architecture", "")))

    def referrers(self, repository: str, digest: str) -> Optional[dict]:
        """The referrers API's image index of ``digest`` (OCI distribution spec v1.1, "Listing
        Referrers"); None when the registry has no such API (it answers 404, as docker-registry
        2.8 does, or 200 with something other than an image index)."""
        repository = self.repository(repository)
        if not _DIGEST.match(digest):
            raise self._fail(f"{digest!r} is not a sha256 digest")
        try:
            body, headers = self._send("GET", f"/v2/{repository}/referrers/{digest}",
                                       f"repository:{repository}:pull", accept=OCI_INDEX)
        except LookupError:
            return None
        try:
            data = documents.load_json(body, f"the referrers of {repository}@{digest}")
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("manifests"), list) or \
                (data.get("mediaType") or headers.get("content-type", "").split(";")[0]) != OCI_INDEX:
            return None
        return data

    # --- writing --------------------------------------------------------------

    def put_manifest(self, repository: str, tag: str, body: bytes, media_type: str) -> str:
        """Store a manifest (or index) under ``tag``; returns its digest, as the registry confirmed it."""
        repository = self.repository(repository)
        tag = self._reference(repository, tag)
        _, headers = self._send("PUT", f"/v2/{repository}/manifests/{tag}", f"repository:{repository}:pull,push",
                                data=body, content_type=media_type, retry=True)  # the same bytes again: safe
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        stored = headers.get("docker-content-digest", digest)
        if stored != digest:
            raise self._fail(f"stored the manifest for {repository}:{tag} as {stored}, not {digest}")
        return digest

    # --- blobs (attestations: see `builder.trust.attached`) ---------------------------

    def blob(self, repository: str, digest: str, limit: int = CONFIG_LIMIT) -> bytes:
        """The blob ``digest`` of ``repository``, at most ``limit`` bytes, checked against its digest;
        LookupError when the registry has none."""
        repository = self.repository(repository)
        if not _DIGEST.match(digest):
            raise self._fail(f"{digest!r} is not a sha256 digest")
        body, _ = self._send("GET", f"/v2/{repository}/blobs/{digest}", f"repository:{repository}:pull", limit=limit)
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise self._fail(f"the blob {digest} of {repository} does not hash to its digest",
                             "the registry served bytes other than the ones named; nothing was used")
        return body

    def has_blob(self, repository: str, digest: str) -> bool:
        """Whether ``repository`` holds the blob ``digest`` (a HEAD request: nothing is read)."""
        repository = self.repository(repository)
        try:
            self._send("HEAD", f"/v2/{repository}/blobs/{digest}", f"repository:{repository}:pull,push")
        except LookupError:
            return False
        return True

    def put_blob(self, repository: str, data: bytes) -> str:
        """Upload ``data`` as a blob of ``repository`` (unless it is there already); its digest.

        The distribution API's two-step monolithic upload: POST opens an upload session, whose
        ``Location`` must stay on this registry's host (credentials go there), then one PUT with
        the bytes and their digest, which the registry checks.
        """
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        started, attempt = time.monotonic(), 0
        while True:  # the whole upload again after a transient failure: a blob is named by its digest
            try:
                return self._put_blob_once(repository, data, digest)
            except Transient as failure:
                attempt += 1
                self._pause(failure, attempt, f"the upload of {digest}", started)

    def _put_blob_once(self, repository: str, data: bytes, digest: str) -> str:
        if self.has_blob(repository, digest):
            return digest
        repository = self.repository(repository)
        scope = f"repository:{repository}:pull,push"
        try:
            _, headers = self._send("POST", f"/v2/{repository}/blobs/uploads/", scope, data=b"")
        except LookupError:
            raise self._fail(f"refused to start a blob upload in {repository} (404)") from None
        location = urllib.parse.urljoin(self.base + "/", headers.get("location", ""))
        if not headers.get("location") or _host_of(location) != _host_of(self.base):
            raise self._fail(f"sent an upload location on another host ({_host_of(location) or 'none'})")
        separator = "&" if urllib.parse.urlsplit(location).query else "?"
        try:
            self._send("PUT", location + separator + urllib.parse.urlencode({"digest": digest}), scope, data=data,
                       content_type="application/octet-stream")
        except LookupError:
            raise self._fail(f"lost the upload session of {digest} in {repository} (404)") from None
        return digest

    # --- streaming blobs (`builder.node.mirror`: layers of GBs, never held in memory) -------------------

    def blob_deadline(self, size: int) -> float:
        """Seconds one blob of ``size`` bytes may take to stream: the request deadline, plus
        ``size`` at `STREAM_FLOOR` bytes a second (a GB layer gets about 17 minutes more)."""
        return self.deadline + max(0, size) / STREAM_FLOOR

    @contextlib.contextmanager
    def open_blob(self, repository: str, digest: str, size: int) -> Iterator["Checked"]:
        """The blob ``digest`` of ``repository`` as a stream (`Checked`): nothing is held in memory;
        reading past ``size`` bytes, or to an end whose sha256 is not ``digest``, raises `BadBlob`.
        LookupError when the registry has none. Not retried: the caller reopens it."""
        with self._blob_get(repository, digest, time.monotonic() + self.blob_deadline(size), size) as (response, _):
            # the consumer's own failures (a full disk, a refused upload) pass through unchanged
            yield Checked(response, digest, size, f"{self.name}/{self.repository(repository)}@{digest}",
                          floor=STREAM_FLOOR, grace=self.deadline)

    @contextlib.contextmanager
    def _blob_get(self, repository: str, digest: str, deadline: float, size: int,
                  headers: Optional[Dict[str, str]] = None) -> Iterator[Tuple[Any, str]]:
        """One GET of the blob ``digest`` (with ``headers``), authorized once on a 401: (the open
        answer, its path) while the block runs. ``size``: the bytes expected, for a cut's message."""
        repository = self.repository(repository)
        if not _DIGEST.match(digest):
            raise self._fail(f"{digest!r} is not a sha256 digest")
        path = f"/v2/{repository}/blobs/{digest}"
        scope = f"repository:{repository}:pull"
        with contextlib.ExitStack() as stack:
            for attempt in range(2):
                request = urllib.request.Request(self.base + path, method="GET", headers=dict(headers or {}))
                if scope in self._auth:
                    request.add_header("Authorization", self._auth[scope])
                try:
                    response = stack.enter_context(self._open(request, deadline))
                    break
                except urllib.error.HTTPError as exc:
                    if exc.code == 401 and attempt == 0:
                        self._authorize(str(exc.headers.get("WWW-Authenticate", ""))[:4096], scope)
                        continue
                    raise self._http_failure(exc, "GET", path) from None
                except bounded.Cut as cut:
                    raise self._cut(cut, path, size) from None
                except (http.client.HTTPException, OSError) as exc:
                    raise Transient(f"the connection broke during GET {path} ({type(exc).__name__})") from None
            yield response, path

    def holds_blob(self, repository: str, digest: str) -> bool:
        """Ask for the first byte of the blob ``digest`` (``Range: bytes=0-0``) and hang up as soon as
        the answer's head arrives, reading none of its body. True when the registry answered 206 (it
        served the range from a blob it stores); False when it answered 200, which is how
        docker-registry as a pull-through cache answers for a blob it does not store yet: it streams
        the whole blob from its source, and starts storing it (`builder.node.cache_warm`).
        LookupError when the registry has no such blob. Unlike a HEAD, which such a cache answers by
        reading the whole blob from its source, the hang-up stops the stream after what was in flight."""
        return self._ranged_get(repository, digest, 0, 1, time.monotonic() + self.deadline,
                                lambda response, path, deadline: bool(response.status == 206))  # closed unread

    def blob_range(self, repository: str, digest: str, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` (exclusive) of the blob ``digest``, by one HTTP Range request
        (`builder.estargz` reads a layer's TOC and chunks so). The registry must answer 206 with
        exactly that range: a 200 (the whole blob) is refused, not read. The bytes cannot be checked
        against the blob's digest here: the caller checks what they hold (eStargz chunk digests).
        LookupError when the registry has none."""
        if not 0 <= start < end:
            raise ValueError(f"range {start}-{end} is empty")
        want = end - start

        def read(response, path: str, deadline: float) -> bytes:
            status = getattr(response, "status", 200)
            told = str(response.headers.get("Content-Range", ""))
            if status != 206 or not told.startswith(f"bytes {start}-{end - 1}/"):
                raise self._fail(f"answered GET {path} with HTTP {status} ({told or 'no Content-Range'}), "
                                 f"not the 206 range {start}-{end - 1} asked for",
                                 "a lazy read needs a registry that answers HTTP Range requests")
            return self._read(response, want, path, deadline)

        return self._ranged_get(repository, digest, start, end, time.monotonic() + self.blob_deadline(want), read)

    def _ranged_get(self, repository: str, digest: str, start: int, end: int, deadline: float,
                    handle: Callable[[Any, str, float], T]) -> T:
        """One GET of bytes ``start`` to ``end`` (exclusive) of a blob (`_blob_get`);
        ``handle(response, path, deadline)`` reads (or does not read) the answer."""
        with self._blob_get(repository, digest, deadline, end - start,
                            {"Range": f"bytes={start}-{end - 1}"}) as (response, path):
            try:
                return handle(response, path, deadline)
            except bounded.Cut as cut:
                raise self._cut(cut, path, end - start) from None
            except (http.client.HTTPException, OSError) as exc:
                raise Transient(f"the connection broke during GET {path} ({type(exc).__name__})") from None

    def _http_failure(self, exc: urllib.error.HTTPError, method: str, what: str) -> Exception:
        if isinstance(exc, RefusedRedirect):
            return _refused(exc, self.name, method, what)
        if exc.code == 404:
            return LookupError(what)
        if exc.code in TRANSIENT_STATUS:
            return Transient(f"answered HTTP {exc.code} for {method} {what}", retry_after(exc.headers.get("Retry-After")))
        if exc.code in (401, 403):
            return self._fail(f"refused {method} {what} (HTTP {exc.code})",
                              "check the credentials (ASCEND_BUILD_REGISTRY_USER/_PASSWORD or "
                              f"`docker login {self.name}`) and that they may write there")
        return self._fail(f"answered HTTP {exc.code} for {method} {what}",
                          "check that the registry accepts writes (not read-only) and has room")

    def mount_blob(self, repository: str, digest: str, source_repository: str) -> Optional[str]:
        """Ask the registry to mount ``digest`` from ``source_repository`` into ``repository`` (the
        distribution API's cross-repository mount: no byte is sent). None when it mounted it; else
        the upload location it opened instead (the registry may decline a mount)."""
        repository, source_repository = self.repository(repository), self.repository(source_repository)
        query = urllib.parse.urlencode({"mount": digest, "from": source_repository})
        try:
            _, headers = self._send("POST", f"/v2/{repository}/blobs/uploads/?{query}",
                                    f"repository:{repository}:pull,push", data=b"")
        except LookupError:
            raise self._fail(f"refused to start a blob upload in {repository} (404)") from None
        if "docker-upload-uuid" not in headers and headers.get("docker-content-digest") == digest:
            return None
        return self._upload_location(headers)

    def _upload_location(self, headers: Dict[str, str]) -> str:
        location = urllib.parse.urljoin(self.base + "/", headers.get("location", ""))
        if not headers.get("location") or _host_of(location) != _host_of(self.base):
            raise self._fail(f"sent an upload location on another host ({_host_of(location) or 'none'})")
        return location

    def put_blob_stream(self, repository: str, digest: str, size: int,
                        source: Callable[[], ContextManager[BinaryIO]], mount_from: Optional[str] = None) -> int:
        """Upload the blob ``digest`` of ``size`` bytes from the stream ``source()`` opens, unless
        ``repository`` holds it already or can mount it from ``mount_from`` (a repository of this
        registry); the bytes sent (0 when it was there or mounted).

        One monolithic PUT with Content-Length, read from the stream as it goes: the registry checks
        the digest, and a `Checked` source checks it while it is read. After a transient failure the
        whole upload is made again from a new ``source()``, `RETRIES` times.
        """
        if not _DIGEST.match(digest):
            raise self._fail(f"{digest!r} is not a sha256 digest")
        started, attempt = time.monotonic(), 0
        while True:
            try:
                if self.has_blob(repository, digest):
                    return 0
                location = None
                if mount_from is not None:
                    location = self.mount_blob(repository, digest, mount_from)
                    if location is None:
                        return 0
                return self._stream_once(repository, digest, size, source, location)
            except Transient as failure:
                attempt += 1
                self._pause(failure, attempt, f"the upload of {digest}", started)

    def _stream_once(self, repository: str, digest: str, size: int, source: Callable[[], ContextManager[BinaryIO]],
                     location: Optional[str]) -> int:
        api_repository = self.repository(repository)
        scope = f"repository:{api_repository}:pull,push"
        if location is None:
            try:
                _, headers = self._send("POST", f"/v2/{api_repository}/blobs/uploads/", scope, data=b"")
            except LookupError:
                raise self._fail(f"refused to start a blob upload in {api_repository} (404)") from None
            location = self._upload_location(headers)
        separator = "&" if urllib.parse.urlsplit(location).query else "?"
        url = location + separator + urllib.parse.urlencode({"digest": digest})
        what = f"/v2/{api_repository}/blobs/{digest}"
        deadline = time.monotonic() + self.blob_deadline(size)
        with source() as stream:
            request = urllib.request.Request(url, data=stream, method="PUT")
            request.add_header("Content-Type", "application/octet-stream")
            request.add_header("Content-Length", str(size))
            if scope in self._auth:  # the POST above (or the HEAD before it) answered the challenge
                request.add_header("Authorization", self._auth[scope])
            try:
                with self._open(request, deadline) as response:
                    self._read(response, MANIFEST_LIMIT, what, deadline)
                    stored = response.headers.get("Docker-Content-Digest") or digest
            except urllib.error.HTTPError as exc:
                raise self._http_failure(exc, "PUT", what) from None
            except bounded.Cut as cut:
                raise self._cut(cut, what, size) from None
            except (http.client.HTTPException, OSError) as exc:
                raise Transient(f"the connection broke during PUT {what} ({type(exc).__name__})") from None
        if stored != digest:
            raise self._fail(f"stored the blob {digest} of {api_repository} as {stored}")
        return size


STREAM_FLOOR = 1 << 20  # bytes a second a blob stream may not fall below on average (see `Registry.blob_deadline`)


class BadBlob(UserError):
    """A blob's bytes are not the ones its digest and size name."""

    def __init__(self, message: str):
        super().__init__(message, exit_code=1, fix="the source served bytes other than the ones named; nothing of "
                                                    "this blob was kept: check the source, then run again")


class Checked:
    """A readable stream of one blob that hashes what passes through it: more than ``size`` bytes,
    or an end whose sha256 is not ``digest`` or that comes before ``size`` bytes, raises `BadBlob`
    (so a consumer that reads to the end has read the named bytes, or fails).

    Example:
        >>> import io
        >>> blob = b"layer"
        >>> Checked(io.BytesIO(blob), "sha256:" + hashlib.sha256(blob).hexdigest(), 5, "x").read()
        b'layer'
        >>> other = Checked(io.BytesIO(b"other"), "sha256:" + hashlib.sha256(blob).hexdigest(), 5, "x")
        >>> try:
        ...     other.read(), other.read()
        ... except BadBlob as bad:
        ...     print(bad.message.split(":")[0])
        x does not hash to its digest
    """

    def __init__(self, stream, digest: str, size: int, what: str, floor: int = 0, grace: float = 0.0):
        self._stream, self.digest, self.size, self.what = stream, digest, size, what
        self._hash = hashlib.sha256()
        self.read_bytes = 0
        # the throughput floor: past ``grace`` seconds, the bytes that came must keep up with ``floor``
        # bytes a second, whatever size the source declared (a declared 2**62 bytes buys no time)
        self._floor, self._grace, self._start = floor, grace, time.monotonic()

    def read(self, n: int = -1) -> bytes:
        want = bounded.CHUNK if n is None or n < 0 else min(n, bounded.CHUNK)
        read = self._stream.read1 if hasattr(self._stream, "read1") else self._stream.read
        chunk = read(min(want, self.size + 1 - self.read_bytes))
        self.read_bytes += len(chunk)
        if self.read_bytes > self.size:
            raise BadBlob(f"{self.what} is longer than the {self.size} bytes its descriptor names")
        self._hash.update(chunk)
        took = time.monotonic() - self._start
        if self._floor and chunk and took > self._grace + self.read_bytes / self._floor:
            raise BadBlob(f"{self.what} came slower than {self._floor} bytes a second: {self.read_bytes} bytes in "
                          f"{took:.0f} s (its descriptor names {self.size})")
        if not chunk:
            if self.read_bytes != self.size:
                raise BadBlob(f"{self.what} ended after {self.read_bytes} of its {self.size} bytes")
            if "sha256:" + self._hash.hexdigest() != self.digest:
                raise BadBlob(f"{self.what} does not hash to its digest")
        return chunk
