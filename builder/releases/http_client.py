"""HTTP reads from the package index: GETs with a timeout and a size cap, and a file over range requests.

Why stdlib ``urllib``: a handful of GETs with custom headers need no extra
dependency, and the watcher must work where only ascend-build itself is installed.
"""

from __future__ import annotations

import http.client
import io
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Mapping, Optional, Sequence, Tuple

from builder import bounded
from builder.errors import UserError

# The most one answer may carry: a project page or a whole wheel fits many times
# over, and a server that streams without end cannot exhaust memory.
MAX_BODY = 256 << 20
DEADLINE = 300.0  # seconds for one answer, however it trickles
TAIL = 16 * 1024  # RangeFile's first read: the zip's end records and, in most wheels, its central directory
WINDOW = 64 * 1024  # the least a later RangeFile miss fetches: a member's local header and its data at once


class NoRanges(Exception):
    """The server answered a Range request with something other than that range."""


def url_error(url: str, what: str, fix: str = "") -> UserError:
    """The UserError (exit 1) for anything that went wrong at ``url``: the message names it.

    Example:
        >>> url_error("http://127.0.0.1/simple/x/", "HTTP 404 Not Found").message
        'http://127.0.0.1/simple/x/: HTTP 404 Not Found'
    """
    return UserError(f"{url}: {what}", fix=fix or "check --index-url, the network and any proxy, then run again",
                     exit_code=1)


class Http:
    """GETs with one timeout, errors turned into UserError, bodies capped, and a count of body bytes read.

    Why count bytes: the result says what reading METADATA cost, and the tests prove
    that no whole wheel was fetched.

    Example:
        >>> Http(5).get("http://127.0.0.1:8080/simple/torch-npu/")[0]   # doctest: +SKIP
        200
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.bytes_fetched = 0

    def get(self, url: str, headers: Optional[Mapping[str, str]] = None,
            ok: Sequence[int] = (200,)) -> Tuple[int, Any, bytes, str]:
        """(status, headers, body, final url); a status outside ``ok`` raises UserError (404 too).

        When ``ok`` is ``(206,)`` (a Range request), a 200 or 416 raises NoRanges instead.
        """
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):  # an index may list file:// links
            raise url_error(url, "is not an http(s) URL; not fetched", "a package index serves files over http(s) only")
        # non-ASCII in a URL (a path, a digit) is sent percent-encoded, as browsers do
        url = urllib.parse.quote(url, safe=":/?#[]@!$&'()*+,;=%~")
        request = urllib.request.Request(url, headers={"User-Agent": "ascend-build", **(headers or {})})
        deadline = time.monotonic() + DEADLINE
        try:
            with bounded.opened(request, timeout=self.timeout, deadline=deadline) as response:
                status = response.status
                if status not in ok:
                    if status == 200 and 206 in ok:
                        raise NoRanges(url)
                    raise url_error(url, f"unexpected HTTP {status} {response.reason}")
                body = b"".join(bounded.chunks(response, limit=MAX_BODY, deadline=deadline))
                self.bytes_fetched += len(body)
                return status, response.headers, body, response.geturl()
        except bounded.Cut as cut:
            if cut.too_large:
                raise url_error(url, f"the answer is larger than {MAX_BODY} bytes; refused",
                                "check --index-url: a package index serves no file that large") from None
            raise url_error(url, f"the answer did not arrive within {DEADLINE:g} s; refused",
                            "check the index's health, or use another with --index-url") from None
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and 206 in ok:
                raise NoRanges(url) from None
            raise url_error(url, f"HTTP {exc.code} {exc.reason}", _http_fix(exc.code)) from None
        except urllib.error.URLError as exc:
            raise url_error(url, _reason(exc.reason)) from None
        except (socket.timeout, TimeoutError):
            raise url_error(url, f"no answer within {self.timeout:g} s") from None
        except (http.client.HTTPException, OSError) as exc:
            raise url_error(url, f"connection broken: {exc or type(exc).__name__}") from None



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


class RangeFile:
    """A read-only, seekable file over HTTP range requests, for ``zipfile.ZipFile`` to read a wheel in place.

    Why: a torch_npu wheel weighs tens of MiB, its METADATA a few KiB. zipfile reads
    the end-of-central-directory record, then the central directory, then the one
    member asked for. The first request fetches the last ``TAIL`` bytes (and learns
    the size); a read the cached tail or window cannot serve fetches at least
    ``WINDOW`` bytes from where it starts. So a METADATA read costs one to three
    requests: the tail, often holding the central directory and the dist-info
    members too, then the central directory, then the member. A server that ignores
    ``Range`` raises NoRanges, at any request, so the caller can download instead.

    Example:
        >>> wheel = zipfile.ZipFile(RangeFile(Http(5), "http://127.0.0.1:8080/files/t.whl"))   # doctest: +SKIP
        >>> wheel.read("torch_npu-2.15.0.dist-info/METADATA")                                 # doctest: +SKIP
        b'Metadata-Version: 2.1...'
    """

    def __init__(self, http: Http, url: str) -> None:
        self.http, self.url = http, url
        self.size = 0
        self._tail = self._window = self._fetch(f"-{TAIL}")
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:  # an OSError, as from a real file: zipfile probes short files this way
            raise OSError(f"{self.url}: seek to {base + offset}, before the start")
        self._pos = base + offset
        return self._pos

    def read(self, n: Optional[int] = -1) -> bytes:
        start = self._pos
        end = self.size if n is None or n < 0 else min(self.size, start + n)
        if end <= start:
            return b""
        for at, block in (self._tail, self._window):
            if at <= start and end <= at + len(block):
                break
        else:
            at, block = self._window = self._fetch(f"{start}-{max(end, min(start + WINDOW, self.size)) - 1}")
            if at != start or len(block) < end - start:
                raise NoRanges(self.url)
        self._pos = end
        return block[start - at: end - at]

    def _fetch(self, spec: str) -> Tuple[int, bytes]:
        """(first byte's offset, bytes) of one ``Range: bytes=SPEC`` request; learns the file's size."""
        _, headers, body, _ = self.http.get(self.url, {"Range": f"bytes={spec}"}, ok=(206,))
        m = re.match(r"^\s*bytes\s+([0-9]{1,18})-([0-9]{1,18})/([0-9]{1,18})\s*$", headers.get("Content-Range", "") or "", re.ASCII)
        if not m or int(m.group(2)) - int(m.group(1)) + 1 != len(body):
            raise NoRanges(self.url)  # no usable Content-Range: treat as no range support
        self.size = int(m.group(3))
        return int(m.group(1)), body
