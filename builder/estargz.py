"""Read an eStargz layer the way a lazy snapshotter does: footer, TOC, then only the chunks needed.

eStargz (stargz-snapshotter, ``docs/estargz.md``) is a gzip tar layer any tar reader unpacks,
laid out so a reader can fetch parts of it by HTTP Range requests:

- **footer**: the last `FOOTER_SIZE` (51) bytes are an empty gzip member whose header's extra
  field (subfield ``SG``) holds the TOC's offset in the blob as 16 hex digits and ``STARGZ``;
- **TOC**: at that offset, a gzip member holding a tar of one file, ``stargz.index.json``
  (``{"version": 1, "entries": [...]}``); its sha256 is the layer descriptor's annotation
  ``containerd.io/snapshot/stargz/toc.digest``, so the TOC is bound to the (signed) manifest;
- **chunks**: each regular file is split into chunks, each its own gzip member starting at the
  entry's ``offset`` (``reg`` for the first chunk, ``chunk`` for the next ones), with
  ``chunkOffset``, ``chunkSize`` (absent or 0: to the end of the file) and ``chunkDigest``, the
  sha256 of the chunk's uncompressed bytes; ``digest`` is the whole file's sha256.

`Layer` checks the TOC's digest against the annotation, then reads a file list's chunks (adjacent
ranges merged into one request), checks every chunk against its ``chunkDigest`` and every whole file
against its ``digest``, and counts the requests and bytes it fetched. A mismatch raises `Corrupt`
naming the file and the chunk: nothing unverified is returned.

Example:
    >>> toc_offset(bytes.fromhex("1f8b08040000000000ff1a00534716003030303030303030303030303130303053544152475a"
    ...                          "010000ffff0000000000000000"))
    4096
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import zlib
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from builder import documents

FOOTER_SIZE = 51
TOC_NAME = "stargz.index.json"
TOC_DIGEST = "containerd.io/snapshot/stargz/toc.digest"
UNCOMPRESSED_SIZE = "io.containers.estargz.uncompressed-size"
LANDMARKS = (".prefetch.landmark", ".no.prefetch.landmark")  # eStargz's own marker files, not the image's
TOC_LIMIT = 256 << 20  # a TOC is ~300 bytes a file; an image of a million files stays below
# decompressed, the TOC's tar may not grow past this (a gzip member of a few KB can inflate to GBs)
TOC_INFLATED_LIMIT = 4 * TOC_LIMIT
MEMBER_SLACK = 1 << 20  # inflated past a chunk's own bytes: its tar padding and the next tar header
# What `Layer.read_files` holds in memory, whatever a TOC declares: a chunk (ctr-remote cuts files
# into chunks of 4 MiB by default) and a file read whole (a CANN or torch library is under 1 GiB)
CHUNK_LIMIT = 256 << 20
FILE_LIMIT = 1 << 30

# (start, end exclusive) -> those bytes of the blob
Fetch = Callable[[int, int], bytes]


class Corrupt(ValueError):
    """The layer is not what its TOC (or the TOC not what the manifest) says."""


def toc_offset(footer: bytes) -> int:
    """The TOC's offset from the layer's last `FOOTER_SIZE` bytes; `Corrupt` when they are no eStargz footer."""
    if (len(footer) != FOOTER_SIZE or footer[:4] != b"\x1f\x8b\x08\x04" or footer[10:12] != b"\x1a\x00"
            or footer[12:16] != b"SG\x16\x00" or footer[32:38] != b"STARGZ"):
        raise Corrupt("no eStargz footer at the end of the layer (not an eStargz layer)")
    try:
        offset = int(footer[16:32].decode("ascii"), 16)
    except ValueError:
        raise Corrupt("the eStargz footer's TOC offset is not hexadecimal") from None
    return offset


def _gunzip_member(data: bytes, want: Optional[int] = None) -> bytes:
    """The decompressed bytes of the gzip member(s) at the start of ``data``: until ``want`` bytes
    came out (a chunk), or to the end of the first member (the TOC, at most `TOC_INFLATED_LIMIT`
    bytes). A chunk's member goes on past its bytes with the tar's padding: up to `MEMBER_SLACK`
    more is inflated, so a whole member's checksum is checked, and never more than that."""
    cap = TOC_INFLATED_LIMIT if want is None else want + MEMBER_SLACK
    out, rest = bytearray(), data
    while rest and len(out) < cap:
        inflater = zlib.decompressobj(31)
        try:
            out += inflater.decompress(rest, cap + 1 - len(out))
        except zlib.error as exc:
            raise Corrupt(f"not gzip data ({exc})") from None
        if want is None:
            if len(out) > cap:
                raise Corrupt(f"the TOC inflates past {cap} bytes")
            break
        if len(out) >= want or not inflater.eof:
            break
        rest = inflater.unused_data
    return bytes(out if want is None else out[:want])


def _count(entry: Dict, key: str, name: str) -> int:
    """The TOC field ``key`` of ``entry``: a whole number of bytes (absent or null: 0)."""
    value = entry.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Corrupt(f"{name}: its TOC field {key} is {str(value)[:40]!r}, not a number of bytes")
    return value


@dataclass(frozen=True)
class Chunk:
    name: str
    offset: int        # of its gzip member in the blob
    end: int           # where the next member (another chunk's, or the TOC) starts
    chunk_offset: int  # of its bytes in the file
    size: int          # uncompressed
    digest: str        # chunkDigest
    inner: int = 0     # innerOffset: bytes to skip in the member before the chunk (0 in eStargz gzip)


@dataclass
class Counter:
    requests: int = 0
    bytes: int = 0


@dataclass
class Layer:
    """One eStargz layer: its TOC read and checked, its chunks read on demand (`read_files`)."""

    fetch: Fetch
    size: int                                   # the blob's size (its descriptor's)
    toc: Dict = field(default_factory=dict)
    toc_digest: str = ""
    toc_at: int = 0
    counter: Counter = field(default_factory=Counter)
    chunks: Dict[str, List[Chunk]] = field(default_factory=dict)
    entries: Dict[str, Dict] = field(default_factory=dict)

    def _get(self, start: int, end: int) -> bytes:
        data = self.fetch(start, end)
        self.counter.requests += 1
        self.counter.bytes += len(data)
        if len(data) != end - start:
            raise Corrupt(f"asked for bytes {start}-{end - 1} of the layer, got {len(data)} bytes")
        return data

    @classmethod
    def open(cls, fetch: Fetch, size: int, toc_digest: str) -> "Layer":
        """Read the footer and the TOC (two requests); the TOC must hash to ``toc_digest`` (the
        layer descriptor's `TOC_DIGEST` annotation)."""
        layer = cls(fetch, size)
        if size < FOOTER_SIZE:
            raise Corrupt(f"a layer of {size} bytes is too short for an eStargz footer")
        at = toc_offset(layer._get(size - FOOTER_SIZE, size))
        if not 0 <= at < size - FOOTER_SIZE or size - FOOTER_SIZE - at > TOC_LIMIT:
            raise Corrupt(f"the footer puts the TOC at {at}, outside the layer of {size} bytes")
        packed = _gunzip_member(layer._get(at, size - FOOTER_SIZE))
        try:
            with tarfile.open(fileobj=io.BytesIO(packed), mode="r:") as tar:
                member = tar.getmember(TOC_NAME)
                handle = tar.extractfile(member)
                raw = handle.read() if handle is not None else b""
        except (tarfile.TarError, KeyError) as exc:
            raise Corrupt(f"the TOC at {at} is no tar holding {TOC_NAME} ({exc})") from None
        found = "sha256:" + hashlib.sha256(raw).hexdigest()
        if found != toc_digest:
            raise Corrupt(f"the TOC hashes to {found}, the layer's manifest says {toc_digest or 'nothing'} "
                          f"({TOC_DIGEST}): the layer is not the one the manifest names")
        try:
            toc = documents.load_json(raw, TOC_NAME)
        except ValueError as exc:  # no JSON, or past the bounds every document is held to
            raise Corrupt(f"the TOC is not JSON within bounds ({exc})") from None
        if not isinstance(toc, dict) or not isinstance(toc.get("entries"), list):
            raise Corrupt("the TOC has no entries")
        layer.toc, layer.toc_digest, layer.toc_at = toc, found, at
        layer._index()
        return layer

    def _index(self) -> None:
        entries = [e for e in self.toc["entries"] if isinstance(e, dict) and e.get("type") in ("reg", "chunk")]
        for entry in entries:  # every field read below is a number of bytes, or the TOC is refused
            for key in ("offset", "size", "chunkOffset", "chunkSize", "innerOffset"):
                _count(entry, key, str(entry.get("name", ""))[:200])
            mode = entry.get("mode", 0)  # the listing `bind` compares holds its permission bits
            if mode is not None and (isinstance(mode, bool) or not isinstance(mode, int) or mode < 0):
                raise Corrupt(f"{str(entry.get('name', ''))[:200]}: its TOC field mode is {str(mode)[:40]!r}, "
                              "not a file mode")
        offsets = sorted({e["offset"] for e in entries if e.get("offset")} | {self.toc_at})
        after = {a: b for a, b in zip(offsets, offsets[1:])}
        for entry in entries:
            name = str(entry.get("name", ""))
            kind = entry.get("type")
            if kind == "reg":
                self.entries[name] = entry
                if not entry.get("size"):
                    continue
            first = self.entries.get(name, entry)
            total = first.get("size") or 0
            start = entry.get("chunkOffset") or 0
            length = entry.get("chunkSize") or total - start
            offset = entry.get("offset") or 0
            if offset not in after:
                raise Corrupt(f"{name}: its chunk at {offset} is outside the layer's chunks")
            if length <= 0 or start + length > total:
                raise Corrupt(f"{name}: its chunk at file offset {start} ({length} bytes) is outside the file's "
                              f"{total} bytes")
            self.chunks.setdefault(name, []).append(Chunk(name, offset, after[offset], start, length,
                                                          str(entry.get("chunkDigest", "")),
                                                          entry.get("innerOffset") or 0))

    def regular_files(self) -> Dict[str, Dict]:
        """Every regular file's TOC entry by name (eStargz's landmarks left out)."""
        return {n: e for n, e in self.entries.items() if n not in LANDMARKS}

    def read_files(self, names: Iterable[str]) -> Dict[str, bytes]:
        """The contents of the regular files ``names`` (paths as in the image, with or without a
        leading ``/``; names that are not regular files of this layer are left out), each chunk
        checked against its ``chunkDigest`` and each file against its ``digest``."""
        wanted = []
        for name in names:
            key = name.lstrip("/")
            if key in self.entries and key not in wanted:
                wanted.append(key)
        for key in wanted:  # what the TOC declares is checked before any of it is fetched or inflated
            _within_limits(key, self.entries[key].get("size") or 0, self.chunks.get(key, []))
        needed = sorted({c for key in wanted for c in self.chunks.get(key, [])}, key=lambda c: c.offset)
        data: Dict[int, bytes] = {}
        for start, end, group in _merged(needed):
            block = self._get(start, end)
            for chunk in group:
                data[chunk.offset] = block[chunk.offset - start:chunk.end - start]
        out: Dict[str, bytes] = {}
        for key in wanted:
            parts = []
            for chunk in sorted(self.chunks.get(key, []), key=lambda c: c.chunk_offset):
                try:
                    body = _gunzip_member(data[chunk.offset], chunk.inner + chunk.size)[chunk.inner:chunk.inner + chunk.size]
                except Corrupt as exc:
                    raise Corrupt(f"{key}: the chunk at file offset {chunk.chunk_offset} (layer offset {chunk.offset}) "
                                  f"is {exc}") from None
                if len(body) != chunk.size:
                    raise Corrupt(f"{key}: the chunk at file offset {chunk.chunk_offset} (layer offset {chunk.offset}) "
                                  f"holds {len(body)} bytes, its TOC entry says {chunk.size}")
                found = "sha256:" + hashlib.sha256(body).hexdigest()
                if found != chunk.digest:
                    raise Corrupt(f"{key}: the chunk at file offset {chunk.chunk_offset} (layer offset {chunk.offset}) "
                                  f"hashes to {found}, its chunkDigest is {chunk.digest or 'missing'}")
                parts.append(body)
            content = b"".join(parts)
            whole = str(self.entries[key].get("digest", ""))
            if whole and "sha256:" + hashlib.sha256(content).hexdigest() != whole:
                raise Corrupt(f"{key}: its chunks together do not hash to the file's digest {whole}")
            out[key] = content
        return out

    def bytes_of(self, names: Iterable[str]) -> int:
        """The compressed bytes `read_files` fetches for ``names`` (nothing is fetched)."""
        keys = {n.lstrip("/") for n in names}
        return sum(c.end - c.offset for k in keys for c in self.chunks.get(k, []))


def _within_limits(name: str, size: int, chunks: List[Chunk]) -> None:
    """`Corrupt` unless the file ``name`` of ``size`` bytes is within `FILE_LIMIT`, each of its
    ``chunks`` within `CHUNK_LIMIT`, and the chunks, in file order, follow one another from 0 to
    ``size`` (no gap, no overlap): what is inflated is bounded, and no file is returned short or
    doubled, with or without a whole-file digest."""
    if size > FILE_LIMIT:
        raise Corrupt(f"{name}: its TOC entry says {size} bytes, past the {FILE_LIMIT} bytes this reader holds")
    at = 0
    for chunk in sorted(chunks, key=lambda c: c.chunk_offset):
        if chunk.inner + chunk.size > CHUNK_LIMIT:
            raise Corrupt(f"{name}: its chunk at file offset {chunk.chunk_offset} is {chunk.inner + chunk.size} "
                          f"bytes, past the {CHUNK_LIMIT} bytes this reader inflates")
        if chunk.chunk_offset != at:
            raise Corrupt(f"{name}: its chunks do not follow one another: one starts at file offset "
                          f"{chunk.chunk_offset}, the ones before it end at {at}")
        at += chunk.size
    if at != size:
        raise Corrupt(f"{name}: its chunks hold {at} bytes, its TOC entry says {size}")


def _merged(chunks: List[Chunk]) -> List[Tuple[int, int, List[Chunk]]]:
    """Chunks sorted by offset -> (start, end, chunks) ranges, adjacent ones merged into one request."""
    out: List[Tuple[int, int, List[Chunk]]] = []
    for chunk in chunks:
        if out and out[-1][1] == chunk.offset:
            start, _, group = out[-1]
            group.append(chunk)  # in place: a layer of many small chunks merges in linear time
            out[-1] = (start, chunk.end, group)
        else:
            out.append((chunk.offset, chunk.end, [chunk]))
    return out


def from_registry(registry, repository: str, descriptor: Dict) -> Layer:
    """The eStargz layer ``descriptor`` (of a manifest read by digest) of ``repository``, read by Range
    requests (`builder.registry.Registry.blob_range`); `Corrupt` when it carries no TOC digest."""
    annotations = descriptor.get("annotations") or {}
    toc_digest = str(annotations.get(TOC_DIGEST, ""))
    if not toc_digest:
        raise Corrupt(f"the layer {descriptor.get('digest')} has no {TOC_DIGEST} annotation: not an eStargz layer")
    digest, size = str(descriptor.get("digest")), descriptor.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise Corrupt(f"the layer {digest[:80]} has a size of {str(size)[:40]!r}, not a number of bytes")
    return Layer.open(lambda start, end: registry.blob_range(repository, digest, start, end), size, toc_digest)
