"""Hash a published file by streaming it once: how `lock` records the sha256 of a CANN
installer that was published without one.

The download sends the Referer the install guides send (``cann-downloads.yaml``), reads
in chunks with a timeout per read and an overall deadline, and never keeps the file:
only its sha256 and size come back. The lock then holds the hash, and every later
download (the Dockerfile's ``sha256sum -c``) must match it.

Example:
    >>> sha256_of_url("https://example.invalid/x.run", referer="")   # doctest: +SKIP
    ('9f86d0...', 1298337341)
"""

from __future__ import annotations

import hashlib
import time
import urllib.error
import urllib.request
from typing import Tuple

from builder import bounded
from builder.errors import UserError

READ_TIMEOUT = 60.0
DEADLINE = 4 * 3600.0      # a 1.3 GB toolkit over a slow link; a server that trickles stops here
LIMIT = 16 << 30           # no CANN installer comes near this


def sha256_of_url(url: str, *, referer: str, read_timeout: float = READ_TIMEOUT, deadline: float = DEADLINE,
                  limit: int = LIMIT) -> Tuple[str, int]:
    """(sha256 hex, size in bytes) of what ``url`` serves; UserError when it cannot be had whole."""
    request = urllib.request.Request(url, headers={"Referer": referer} if referer else {})
    digest, size = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(request, timeout=read_timeout) as response:
            announced = response.headers.get("Content-Length")
            for chunk in bounded.chunks(response, limit=limit, deadline=time.monotonic() + deadline):
                size += len(chunk)
                digest.update(chunk)
    except bounded.Cut as cut:
        raise UserError(f"{url}: {cut}; not recorded", exit_code=1,
                        fix="fetch it where the download server is faster, or record it from a copy") from None
    except urllib.error.HTTPError as exc:
        raise UserError(f"{url}: the server answered HTTP {exc.code}", exit_code=1,
                        fix="check that the release folder holds this file") from None
    except (urllib.error.URLError, OSError) as exc:
        raise UserError(f"{url}: cannot be fetched: {getattr(exc, 'reason', exc)}", exit_code=1,
                        fix="run `ascend-build lock` where the download server answers") from None
    if announced and announced.isdigit() and int(announced) != size:
        raise UserError(f"{url}: {size} bytes arrived of the {announced} announced", exit_code=1,
                        fix="run `ascend-build lock` again")
    return digest.hexdigest(), size
