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

import errno
import os
import stat
import time
from typing import Any, Iterator, Optional

CHUNK = 1 << 16
DIGITS = 18         # a size, a count, an id of ours never has more: int() of 4300+ digits is refused
HUGE = 10 ** DIGITS  # what a number of more digits stands for


def whole_number(text: Any) -> Optional[int]:
    """``text`` as an int when it is ASCII digits (spaces around allowed), capped at HUGE; None
    for anything else. Why: ``int()`` takes other scripts' digits and refuses 4300+ digits.

    Example:
        >>> whole_number(" 42 "), whole_number("9" * 5000) == HUGE, whole_number("\u0663"), whole_number("-1")
        (42, True, None, None)
    """
    digits = str(text or "").strip()
    if not (digits.isascii() and digits.isdigit()):
        return None
    return int(digits) if len(digits) <= DIGITS else HUGE


def told(number: int) -> str:
    """A `whole_number` as text: HUGE stands for more digits than were read."""
    return str(number) if number < HUGE else f"over {HUGE - 1}"


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


class NotRegular(OSError):
    """A path that is no regular file (a FIFO, a device, a folder): reading it could block or never end."""


def read_file(path: Any, limit: int) -> bytes:
    """At most ``limit`` bytes of the regular file ``path``; raises NotRegular for anything else
    (opened without blocking, so a FIFO with no writer is refused, not waited on) and OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(errno.EINVAL, "not a regular file", str(path))
        with os.fdopen(fd, "rb", closefd=False) as stream:
            return stream.read(limit)
    finally:
        os.close(fd)
