"""Hash a published file by streaming it once: how `lock` records the sha256 of a CANN
installer that was published without one; and download one whose sha256 is known (a
torch_npu wheel a cell names by URL), keeping it only when the bytes match.

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
from pathlib import Path
from typing import BinaryIO, Optional, Tuple

from builder import bounded, commands, writes
from builder.errors import UserError

READ_TIMEOUT = 60.0
DEADLINE = 4 * 3600.0      # a 1.3 GB toolkit over a slow link; a server that trickles stops here
LIMIT = 16 << 30           # no CANN installer comes near this


def sha256_of_url(url: str, *, referer: str, read_timeout: float = READ_TIMEOUT, deadline: float = DEADLINE,
                  limit: int = LIMIT) -> Tuple[str, int]:
    """(sha256 hex, size in bytes) of what ``url`` serves; UserError when it cannot be had whole."""
    return _stream(url, referer, None, read_timeout, deadline, limit, _lock_fixes())


PROBE_TIMEOUT = 20.0  # a download server that does not answer the first byte in this is unreachable


def reachable(url: str, *, referer: str, timeout: float = PROBE_TIMEOUT, fix: str = "") -> None:
    """Ask ``url`` for its first byte (a ranged GET with the install guides' Referer, nothing
    kept): UserError naming the URL when no server answers or it answers an error, so a build
    fails now instead of after minutes of OS packages. ``fix``: what to do instead (default: a
    CANN installer's).

    Example:
        >>> reachable("http://127.0.0.1:9/x.run", referer="", timeout=2)   # doctest: +SKIP
        Traceback (most recent call last):
        builder.errors.UserError: http://127.0.0.1:9/x.run: the download server cannot be reached ...
    """
    headers = {"Range": "bytes=0-0", **({"Referer": referer} if referer else {})}
    request = urllib.request.Request(url, headers=headers)
    fix = fix or ("build where the download server answers, or put the installers in a folder and use "
                  "cann_source: {local: DIR} (their sha256 are checked all the same)")
    try:
        with bounded.opened(request, timeout=timeout, deadline=time.monotonic() + timeout):
            return
    except bounded.Cut as cut:
        raise UserError(f"{url}: the download server did not answer: {cut}; nothing was built", exit_code=1,
                        fix=fix) from None
    except urllib.error.HTTPError as exc:
        raise UserError(f"{url}: the download server answered HTTP {exc.code}; nothing was built", exit_code=1,
                        fix="check that the release folder holds this file, or " + fix[0].lower() + fix[1:]) from None
    except (urllib.error.URLError, OSError) as exc:
        raise UserError(f"{url}: the download server cannot be reached: {getattr(exc, 'reason', exc)}; "
                        "nothing was built", exit_code=1, fix=fix) from None


def download(url: str, target: Path, sha256: str, *, referer: str = "", read_timeout: float = READ_TIMEOUT,
             deadline: float = DEADLINE, limit: int = LIMIT) -> Path:
    """``url`` saved at ``target`` only if its bytes are those of ``sha256`` (a file already
    there with those bytes is kept, not fetched again); UserError otherwise, and nothing is left."""
    if target.is_file() and file_sha256(target) == sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    try:
        with writes.stream_to(part) as sink:  # never through a link planted at the partial file's name
            found, _ = _stream(url, referer, sink, read_timeout, deadline, limit, _DOWNLOAD_FIXES)
        if found != sha256:
            raise UserError(f"{url}: its sha256 is {found}, not the {sha256} the matrix gives", exit_code=1,
                            fix="check the URL, or write the sha256 of the file you mean")
        part.replace(target)
    finally:
        part.unlink(missing_ok=True)
    return target


def file_sha256(path: Path) -> str:
    """The sha256 of a file on disk, read a MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# what to do when (the server answers an error, it cannot be reached, the bytes come short)
def _lock_fixes() -> Tuple[str, str, str]:
    lock = commands.suggest("lock")
    return ("check that the release folder holds this file", f"run {lock} where the download server answers",
            f"run {lock} again")
_DOWNLOAD_FIXES = ("check that the URL names a file the server holds", "run it again where the server answers",
                   "run it again")


def _stream(url: str, referer: str, sink: Optional[BinaryIO], read_timeout: float, deadline: float,
            limit: int, fixes: Tuple[str, str, str]) -> Tuple[str, int]:
    request = urllib.request.Request(url, headers={"Referer": referer} if referer else {})
    digest, size = hashlib.sha256(), 0
    until = time.monotonic() + deadline
    try:
        with bounded.opened(request, timeout=read_timeout, deadline=until) as response:
            announced = bounded.whole_number(response.headers.get("Content-Length"))
            for chunk in bounded.chunks(response, limit=limit, deadline=until):
                size += len(chunk)
                digest.update(chunk)
                if sink is not None:
                    sink.write(chunk)
    except bounded.Cut as cut:
        raise UserError(f"{url}: {cut}; not recorded", exit_code=1,
                        fix="fetch it where the download server is faster, or record it from a copy") from None
    except urllib.error.HTTPError as exc:
        raise UserError(f"{url}: the server answered HTTP {exc.code}", exit_code=1, fix=fixes[0]) from None
    except (urllib.error.URLError, OSError) as exc:
        raise UserError(f"{url}: cannot be fetched: {getattr(exc, 'reason', exc)}", exit_code=1, fix=fixes[1]) from None
    if announced is not None and announced != size:
        raise UserError(f"{url}: {size} bytes arrived of the {bounded.told(announced)} announced", exit_code=1, fix=fixes[2])
    return digest.hexdigest(), size
