"""A simple package index on loopback for the tests, and real wheels to serve from it.

The index lays files out as a package index serves them: a project page in PEP 691 JSON and
PEP 503 HTML, wheels under /files/ with HTTP Range support, and PEP 658 ``.metadata`` files
for some wheels. The wheels are real zips built here, with a real-looking METADATA.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import random
import re
import threading
import zipfile
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple

NEW = "2.15.0"
PAYLOAD = 256 * 1024  # stands in for the shared libraries that make real wheels large


def metadata_text(version: str, torch: Optional[str] = None) -> str:
    pin = torch or f"torch=={version}.*"
    return (
        "Metadata-Version: 2.1\n"
        "Name: torch_npu\n"
        f"Version: {version}\n"
        "Summary: Ascend Extension for PyTorch\n"
        "License: BSD License\n"
        "Classifier: Programming Language :: Python :: 3\n"
        "Requires-Python: >=3.10\n"
        "Description-Content-Type: text/markdown\n"
        f"Requires-Dist: {pin}\n"
        "Requires-Dist: numpy\n"
        "Requires-Dist: pyyaml\n"
        "\n"
        "# Ascend Extension for PyTorch\n"
    )


def build_wheel(filename: str, version: str) -> bytes:
    """A real wheel zip: package files, a large incompressible library, then .dist-info."""
    info = f"torch_npu-{version}.dist-info"
    payload = random.Random(filename).randbytes(PAYLOAD)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("torch_npu/__init__.py", "__version__ = %r\n" % version)
        zf.writestr("torch_npu/lib/libtorch_npu.so", payload, compress_type=zipfile.ZIP_STORED)
        zf.writestr(f"{info}/METADATA", metadata_text(version))
        tag = filename[:-4].split("-", 2)[2]
        zf.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: bdist_wheel (0.43.0)\nRoot-Is-Purelib: false\nTag: {tag}\n")
        zf.writestr(f"{info}/top_level.txt", "torch_npu\n")
        zf.writestr(f"{info}/RECORD", f"torch_npu/__init__.py,,\n{info}/METADATA,,\n{info}/RECORD,,\n")
    return out.getvalue()


@dataclass
class File:
    filename: str
    body: bytes
    metadata: Optional[bytes] = None  # served as <file>.metadata and advertised when set
    yanked: Optional[str] = None
    upload_time: str = "2026-12-01T08:00:00.000000Z"
    metadata_hash: Optional[str] = None  # override the advertised hash
    metadata_served: bool = True  # False: advertised, but the server answers 404


def new_release(version: str = NEW, arches=("x86_64", "aarch64"), pythons=("cp310", "cp311"),
                metadata_for=("x86_64",)) -> List[File]:
    files = []
    for arch in arches:
        plat = f"manylinux_2_28_{arch}" if arch == "x86_64" else f"manylinux_2_17_{arch}.manylinux2014_{arch}"
        for py in pythons:
            name = f"torch_npu-{version}-{py}-{py}-{plat}.whl"
            meta = metadata_text(version).encode() if arch in metadata_for else None
            files.append(File(name, build_wheel(name, version), meta))
    return files


# --- the index server -----------------------------------------------------------------------


class Index:
    """A simple index on 127.0.0.1: /simple/torch-npu/ and /files/<name>[.metadata].

    mode: "both" (negotiates on Accept), "json", "html", or a (content type, body)
    pair for a malformed page. ranges=False makes it ignore Range headers,
    ranges="suffix" ignore all but the first kind a range reader sends (``bytes=-N``).
    """

    def __init__(self, files: List[File], mode="both", ranges=True) -> None:
        self.files = {f.filename: f for f in files}
        self.mode, self.ranges = mode, ranges
        self.log: List[Tuple[str, Optional[str], int, int]] = []  # path, Range, status, body bytes
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    # -- pages --------------------------------------------------------------------------

    def json_page(self) -> bytes:
        items = []
        for f in self.files.values():
            item = {"filename": f.filename, "url": f"../../files/{f.filename}",
                    "hashes": {"sha256": hashlib.sha256(f.body).hexdigest()},
                    "requires-python": ">=3.10", "upload-time": f.upload_time, "size": len(f.body),
                    "yanked": f.yanked if f.yanked is not None else False}
            if f.metadata is not None:
                meta_hash = {"sha256": f.metadata_hash or hashlib.sha256(f.metadata).hexdigest()}
                item["core-metadata"] = item["data-dist-info-metadata"] = meta_hash
            items.append(item)
        versions = sorted({f.filename.split("-")[1] for f in self.files.values()})
        doc = {"meta": {"api-version": "1.1", "_last-serial": 1}, "name": "torch-npu", "versions": versions, "files": items}
        return json.dumps(doc).encode()

    def html_page(self) -> bytes:
        rows = []
        for f in self.files.values():
            attrs = f'href="../../files/{f.filename}#sha256={hashlib.sha256(f.body).hexdigest()}"'
            attrs += f' data-requires-python="{html.escape(">=3.10")}"'
            if f.metadata is not None:
                attrs += f' data-core-metadata="sha256={f.metadata_hash or hashlib.sha256(f.metadata).hexdigest()}"'
                attrs += f' data-dist-info-metadata="sha256={hashlib.sha256(f.metadata).hexdigest()}"'
            if f.yanked is not None:
                attrs += f' data-yanked="{html.escape(f.yanked)}"'
            rows.append(f"    <a {attrs}>{f.filename}</a><br />")
        return ("<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.1\">\n"
                "    <title>Links for torch-npu</title>\n  </head>\n  <body>\n    <h1>Links for torch-npu</h1>\n"
                + "\n".join(rows) + "\n  </body>\n</html>\n").encode()

    # -- what was served ----------------------------------------------------------------

    def requests_for(self, name: str) -> List[Tuple[str, Optional[str], int, int]]:
        return [r for r in self.log if r[0] == f"/files/{name}"]

    def served(self, name: str) -> int:
        return sum(r[3] for r in self.requests_for(name))


def _handler(index: Index):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep pytest output clean
            pass

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path in ("/simple/torch-npu/", "/simple/torch-npu"):
                return self._page()
            m = re.fullmatch(r"/files/([^/]+?)(\.metadata)?", path)
            f = index.files.get(m.group(1)) if m else None
            if m is None or f is None or (m.group(2) and (f.metadata is None or not f.metadata_served)):
                return self._send(404, "text/plain", b"not found")
            if m.group(2) and f.metadata is not None:  # (not None: refused above)
                return self._send(200, "application/octet-stream", f.metadata)
            return self._file(f.body)

        def _page(self) -> None:
            mode = index.mode
            if isinstance(mode, tuple):
                return self._send(200, mode[0], mode[1])
            wants_json = "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
            if mode == "json" or (mode == "both" and wants_json):
                return self._send(200, "application/vnd.pypi.simple.v1+json", index.json_page())
            ctype = "application/vnd.pypi.simple.v1+html" if mode == "both" else "text/html; charset=utf-8"
            return self._send(200, ctype, index.html_page())

        def _file(self, body: bytes) -> None:
            spec = self.headers.get("Range")
            if not spec or not index.ranges or (index.ranges == "suffix" and not spec.startswith("bytes=-")):
                return self._send(200, "application/octet-stream", body)
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", spec.strip())
            if not m or (not m.group(1) and not m.group(2)):
                return self._send(416, "text/plain", b"bad range", {"Content-Range": f"bytes */{len(body)}"})
            if not m.group(1):
                start, end = max(0, len(body) - int(m.group(2))), len(body) - 1
            else:
                start = int(m.group(1))
                end = min(int(m.group(2)) if m.group(2) else len(body) - 1, len(body) - 1)
            if start >= len(body) or end < start:
                return self._send(416, "text/plain", b"unsatisfiable", {"Content-Range": f"bytes */{len(body)}"})
            self._send(206, "application/octet-stream", body[start:end + 1],
                       {"Content-Range": f"bytes {start}-{end}/{len(body)}", "Accept-Ranges": "bytes"})

        def _send(self, status: int, ctype: str, body: bytes, headers: Optional[Dict[str, str]] = None) -> None:
            index.log.append((self.path.split("?")[0], self.headers.get("Range"), status, len(body)))
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

    return Handler
