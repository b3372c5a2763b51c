"""Hostile eStargz layers for `builder/estargz.py`: odd TOC fields, huge declared sizes, many chunks.

The reader has no CLI command of its own: `image --push --lazy estargz` reads each variant layer's
TOC (`estargz.from_registry`, then `builder.trust.variant.toc_listing`), and a lazy reader reads
files by their chunks (`Layer.read_files`). So each input runs this module as its program
(``python -m benchmarks.hostile.estargz_reader LAYER TOC_DIGEST``), which does both on a layer
file, as `bind` does on a registry's blob: a refusal (`estargz.Corrupt`, or the `UserError` `bind`
makes of it) exits 1 with its message; a layer read whole exits 0, printing what it read. Anything
else (a traceback, a MemoryError, a hang) is the reader's failure, counted by the harness.

`forge` makes a layer: gzip members (the chunks), then the TOC (a gzip tar of
``stargz.index.json``) and the 51-byte footer pointing at it, as ctr-remote lays them out.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

from .inputs import Case, Ctx, faster_than, mentions
from .runner import REPO

Entries = Callable[[List[int]], List[Dict[str, Any]]]  # the members' offsets -> the TOC's entries


def member(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=1, mtime=0)


def zeros_member(size: int) -> bytes:
    """A gzip member of ``size`` zero bytes, made a MiB at a time (a bomb: about a thousandth of it)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block, parts, left = b"\0" * (1 << 20), [], size
    while left:
        parts.append(packer.compress(block[:min(left, len(block))]))
        left -= min(left, len(block))
    return b"".join(parts) + packer.flush()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def forge(members: Sequence[bytes], entries: Entries, toc: Any = None) -> Tuple[bytes, str]:
    """(the layer's bytes, its TOC digest): a first member (where ctr-remote puts the folders'
    headers: no regular file starts at offset 0), ``members`` after it, then a TOC of
    ``entries(offsets)`` (or the JSON value ``toc`` as it is), then the footer."""
    members = [member(b"\0" * 512), *members]
    offsets, at = [], 0
    for m in members:
        offsets.append(at)
        at += len(m)
    document = {"version": 1, "entries": entries(offsets[1:])} if toc is None else toc
    raw = document if isinstance(document, bytes) else json.dumps(document).encode()
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w") as tar:
        info = tarfile.TarInfo("stargz.index.json")
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
    footer = (bytes.fromhex("1f8b08040000000000ff1a0053471600") + f"{at:016x}".encode() + b"STARGZ"
              + bytes.fromhex("010000ffff0000000000000000"))
    return b"".join(members) + member(packed.getvalue()) + footer, sha(raw)


def one_file(data: bytes = b"x=1\n", **fields: Any) -> Tuple[bytes, str]:
    """A layer of one file ``etc/conf`` in one chunk, its TOC entry with ``fields`` over the right ones."""
    def entries(offsets: List[int]) -> List[Dict[str, Any]]:
        entry = {"name": "etc/conf", "type": "reg", "size": len(data), "mode": 0o644, "offset": offsets[0],
                 "digest": sha(data), "chunkDigest": sha(data)}
        entry.update(fields)
        return [{"name": "etc/", "type": "dir", "mode": 0o755}, entry,
                {"name": "etc/link", "type": "symlink", "linkName": "conf"}]
    return forge([member(data)], entries)


# --- the program each input runs ---------------------------------------------------------------


def main(argv: List[str]) -> int:
    from builder import estargz
    from builder.errors import UserError
    from builder.trust import variant

    path, toc_digest = Path(argv[0]), argv[1]
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        try:
            layer = estargz.Layer.open(lambda start, end: os.pread(fd, end - start, start), size, toc_digest)
            files, links = variant.toc_listing(layer)  # what `bind` compares with the validated image
            read = layer.read_files(layer.regular_files())  # what a lazy reader fetches
        except estargz.Corrupt as exc:  # `bind` says it as a UserError: "layer N of the variant ...: <exc>"
            print(f"refused: {exc}", file=sys.stderr)
            return 1
        except UserError as exc:
            print(f"refused: {exc.message}", file=sys.stderr)
            return 1
    finally:
        os.close(fd)
    print(json.dumps({"files": len(files), "links": len(links), "read": {n: len(b) for n, b in read.items()}})[:2000])
    return 0


# --- the inputs --------------------------------------------------------------------------------


def _case(cls: str, label: str, make: Callable[[], Tuple[bytes, str]], expect: Tuple[int, ...], *checks,
          timeout: float = 60.0) -> Case:
    def setup(ctx: Ctx) -> List[str]:
        blob, toc = make()
        (ctx.dir / "layer.esgz").write_bytes(blob)
        ctx.command = [sys.executable, "-m", "benchmarks.hostile.estargz_reader"]
        ctx.env["PYTHONPATH"] = str(REPO)
        return [str(ctx.dir / "layer.esgz"), toc]
    return Case(cls, f"eStargz reader: {label}", setup, expect, tuple(checks), timeout=timeout)


def _many_chunks(count: int, shared_member: bool) -> Tuple[bytes, str]:
    """One file of ``count`` bytes in ``count`` one-byte chunks: each its own gzip member, or all
    pointing at one member (each chunk then asks for the same range)."""
    members = [member(b"a")] if shared_member else [member(bytes([97 + i % 26])) for i in range(count)]
    content = b"a" * count if shared_member else bytes(97 + i % 26 for i in range(count))

    def entries(offsets: List[int]) -> List[Dict[str, Any]]:
        out = []
        for i in range(count):
            at = offsets[0] if shared_member else offsets[i]
            out.append({"name": "big", "type": "reg" if i == 0 else "chunk", "offset": at, "chunkOffset": i,
                        "chunkSize": 1, "chunkDigest": sha(content[i:i + 1]),
                        **({"size": count, "mode": 0o644, "digest": sha(content)} if i == 0 else {})})
        return out
    return forge(members, entries)


def _bomb(declared: int, inflates: int) -> Tuple[bytes, str]:
    """One file declared ``declared`` bytes, one chunk whose member inflates to ``inflates`` zero bytes."""
    data = zeros_member(inflates)
    digest = sha(b"\0" * declared) if declared <= 256 << 20 else "sha256:" + "0" * 64
    return forge([data], lambda offsets: [{"name": "zeros", "type": "reg", "size": declared, "offset": offsets[0],
                                            "digest": digest, "chunkDigest": digest}])


def _short_chunks() -> Tuple[bytes, str]:
    """A file of 10 bytes whose one chunk holds 4, without a file digest: the rest is missing."""
    return forge([member(b"abcd")], lambda offsets: [{"name": "short", "type": "reg", "size": 10, "offset": offsets[0],
                                                      "chunkSize": 4, "chunkDigest": sha(b"abcd")}])


def _doubled_chunks() -> Tuple[bytes, str]:
    """A file of 4 bytes with two chunks at file offset 0, without a file digest: 8 bytes would come out."""
    def entries(offsets):
        return [{"name": "twice", "type": "reg", "size": 4, "offset": offsets[0], "chunkSize": 4,
                 "chunkDigest": sha(b"abcd")},
                {"name": "twice", "type": "chunk", "offset": offsets[1], "chunkOffset": 0, "chunkSize": 4,
                 "chunkDigest": sha(b"abcd")}]
    return forge([member(b"abcd"), member(b"abcd")], entries)


def cases() -> List[Case]:
    T, H, W = "traceback", "hangs-memory", "wrong-answer"
    refused = mentions("refused")
    odd: List[Tuple[str, Dict[str, Any]]] = [
        ("mode 'rwxr-xr-x' (a string)", dict(mode="rwxr-xr-x")),
        ("mode [420] (a list)", dict(mode=[420])),
        ("mode 10^30", dict(mode=10 ** 30)),
        ("mode -1", dict(mode=-1)),
        ("name an object", dict(name={"a": 1})),
        ("type 5", dict(type=5)),
        ("digest 7 (a number)", dict(digest=7)),
        ("chunkDigest null", dict(chunkDigest=None)),
        ("offset '0' (a string)", dict(offset="0")),
        ("size 4.0 (a float)", dict(size=4.0)),
        ("size -4", dict(size=-4)),
        ("chunkOffset true", dict(chunkOffset=True)),
        ("innerOffset 2^62", dict(innerOffset=1 << 62)),
        ("offset past the TOC", dict(offset=1 << 40)),
    ]
    out = [_case(T, f"TOC entry field {label}", functools.partial(one_file, **fields), (0, 1)) for label, fields in odd]
    out += [
        _case(T, "TOC entries an object", lambda: forge([member(b"x")], lambda o: [], toc={"entries": {"a": 1}}),
              (1,), refused),
        _case(T, "TOC entries holding a string and a list",
              lambda: forge([member(b"x")], lambda o: [], toc={"version": 1, "entries": ["x", [1], None]}), (0,)),
        _case(T, "TOC a JSON list", lambda: forge([member(b"x")], lambda o: [], toc=[1, 2]), (1,), refused),
        _case(T, "TOC not JSON", lambda: forge([member(b"x")], lambda o: [], toc=b"{not json"), (1,), refused),
        _case(T, "TOC nested 100000 deep",
              lambda: forge([member(b"x")], lambda o: [], toc=b'{"entries": ' + b"[" * 100000 + b"]" * 100000 + b"}"),
              (1,), refused),
        _case(T, "a symlink's linkName a list",
              lambda: forge([member(b"x")], lambda o: [{"name": "l", "type": "symlink", "linkName": ["a"]}]), (0,)),
        _case(T, "footer's TOC offset not hexadecimal",
              lambda: (lambda b: (b[:-35] + b"zzzzzzzzzzzzzzzz" + b[-19:], ""))(one_file()[0]), (1,), refused),
        _case(T, "TOC digest not the manifest's", lambda: (one_file()[0], "sha256:" + "0" * 64), (1,), refused),
        _case(H, "a file declared 2^62 bytes in one small chunk", lambda: one_file(size=1 << 62, chunkSize=0), (1,),
              refused, faster_than(10)),
        _case(H, "a file declared 2^64 bytes in one small chunk", lambda: one_file(size=1 << 64, chunkSize=0), (1,),
              refused, faster_than(10)),
        _case(H, "a chunk of 4 bytes whose member inflates to 256 MiB", lambda: _bomb(4, 256 << 20), (0, 1),
              faster_than(20)),
        _case(H, "a file declared 2 GiB whose chunk inflates to 2 GiB (memory limit 3 GiB)",
              lambda: _bomb(2 << 30, 2 << 30), (1,), refused, faster_than(60), timeout=120),
        _case(H, "a file of 200 MiB in one chunk (within the reader's bounds)", lambda: _bomb(200 << 20, 200 << 20),
              (0,), faster_than(30)),
        _case(H, "one file in 100000 chunks of one byte, each its own member", lambda: _many_chunks(100000, False),
              (0,), faster_than(30)),
        _case(H, "one file in 100000 chunks of one byte, all one member", lambda: _many_chunks(100000, True),
              (0, 1), faster_than(30)),
        _case(W, "a file of 10 bytes whose chunks hold 4 (no file digest)", _short_chunks, (1,), refused),
        _case(W, "a file of 4 bytes with two chunks at offset 0 (no file digest)", _doubled_chunks, (1,), refused),
        _case(W, "a chunk whose bytes are not its chunkDigest",
              lambda: one_file(chunkDigest=sha(b"x=2\n"), digest=""), (1,), refused),
    ]
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
