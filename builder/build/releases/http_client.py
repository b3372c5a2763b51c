"""GETs against the package index: one timeout, every failure a UserError naming the URL, a count of bytes read.

Why stdlib ``urllib``: four GETs with custom headers need no extra dependency, and
the watcher must work where only ascend-build itself is installed.
"""

from __future__ import annotations

import http.client
import socket
import urllib.error
import urllib.request
from typing import Any, Mapping, Optional, Sequence, Tuple

from builder.errors import UserError


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
