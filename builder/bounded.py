"""Read an HTTP answer within a size limit and a deadline, however the server sends it.

Why: a per-read timeout alone lets a server that sends a byte every few seconds go on
forever, and reading "everything" lets one that never stops fill memory. The registry
client, the release checks and `lock`'s installer hashing all read through `chunks`.

Example:
    >>> import io, time
    >>> b"".join(chunks(io.BytesIO(b"abc"), limit=10, deadline=time.monotonic() + 5))
    b'abc'
    >>> try:
    ...     b"".join(chunks(io.BytesIO(b"abcdef"), limit=4, deadline=time.monotonic() + 5))
    ... except Cut as cut:
    ...     print(cut)
    more than 4 bytes
"""

from __future__ import annotations

import time
from typing import Any, Iterator

CHUNK = 1 << 16


class Cut(Exception):
    """A read stopped early: past the limit (``too_large``) or past the deadline."""

    def __init__(self, message: str, too_large: bool):
        super().__init__(message)
        self.too_large = too_large


def chunks(response: Any, *, limit: int, deadline: float) -> Iterator[bytes]:
    """The answer's bytes as they arrive (``read1``: what is there, not a full chunk's wait);
    raises Cut past ``limit`` bytes or past ``deadline`` (a ``time.monotonic()`` instant)."""
    size = 0
    read = response.read1 if hasattr(response, "read1") else response.read
    while True:
        if time.monotonic() > deadline:
            raise Cut("not there within the deadline", too_large=False)
        chunk = read(min(CHUNK, limit + 1 - size))
        if not chunk:
            return
        size += len(chunk)
        if size > limit:
            raise Cut(f"more than {limit} bytes", too_large=True)
        yield chunk
