"""One member of a zip on an HTTP server, read by range requests (RemoteZip) without fetching the rest."""

from __future__ import annotations

import re
import struct
import zipfile
import zlib
from typing import Callable, List, Tuple

from builder.build.releases.http_client import _fail, _Http, _NoRanges

TAIL_PROBE = 16 * 1024  # first suffix read: the EOCD and, in most wheels, the whole central directory
_EOCD_MAX = 22 + 0xFFFF  # an EOCD record plus the longest zip comment

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
