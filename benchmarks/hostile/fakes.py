"""Misbehaving servers for the hostile-input suite, each on a free port, in a thread of this process.

One class per kind of server:

- ``ForeignHost``: a host that should never see the user's credentials. It logs every
  request's Authorization header; the suite counts the non-empty ones.
- ``FakeRegistry``: an OCI distribution API that redirects, challenges with odd token
  realms, lies about digests, sends mistyped or deeply nested JSON, injects escapes in
  tags and labels, and sends bodies that are huge or never end.
- ``FakeIndex``: a PEP 691 simple index with mistyped JSON, file:// and non-ASCII URLs,
  non-ASCII digits in wheel tags, zip bombs, endless pages.

And ``OpenWatch``: tells whether anyone opened a FIFO for reading (a file:// URL that
the CLI should never have followed points at one).

Adapted from the ad-hoc audit's fakereg.py / fakeindex.py. Slow-trickle modes are left
out on purpose: the code's own deadlines (120 s per registry request, 300 s per index
answer) would make one input outlast the whole suite.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import socketserver
import threading
import time
import urllib.parse
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional

REPO = "ascend-build/pytorch"
N5000 = "9" * 5000
DEEP = 100_000  # nesting depth of the "deep JSON" bodies: far past Python's recursion limit


class _QuietServer(ThreadingHTTPServer):
    owner: "_Server"  # the fake that answers (set by _Server)
    daemon_threads = True
    block_on_close = False  # an endless handler must not hold up stop()

    def server_bind(self):
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS query: skip it,
        # the suite talks to nothing but loopback and 192.0.2.2.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)


class _Handler(BaseHTTPRequestHandler):
    server: _QuietServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep the suite's output readable
        pass

    def do_GET(self):
        owner = self.server.owner
        owner.log.append({"path": self.path, "authorization": self.headers.get("Authorization") or "",
                          "range": self.headers.get("Range") or ""})
        try:
            owner.answer(self)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            pass  # the client hung up: what a bounded reader should do

    def send(self, code: int, body: bytes = b"", ctype: str = "application/json",
             headers: Optional[Dict[str, str]] = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def stream(self, head: bytes, chunk: bytes, count: int, ctype: str = "application/json") -> None:
        """A body with no Content-Length that goes on for count chunks (or until the client hangs up)."""
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(head)
        for _ in range(count):
            if self.server.owner.stopping:
                return
            self.wfile.write(chunk)


class _Server:
    """A ThreadingHTTPServer on host:0 in a daemon thread; ``log`` holds one dict per request."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.log: List[dict] = []
        self.stopping = False
        self.httpd = _QuietServer((host, 0), _Handler)
        self.httpd.owner = self
        self.host, self.port = host, self.httpd.server_port
        self.url = f"http://{self.host}:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self) -> None:
        self.stopping = True
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, h: _Handler) -> None:
        raise NotImplementedError


class ForeignHost(_Server):
    """A host credentials must never reach. ``challenge``: answer 401 Basic until credentials come."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(host)
        self.challenge = False

    def credentials_seen(self, since: int = 0) -> int:
        return sum(1 for entry in self.log[since:] if entry["authorization"])

    def answer(self, h: _Handler) -> None:
        if self.challenge and not h.headers.get("Authorization"):
            return h.send(401, b"{}", headers={"WWW-Authenticate": 'Basic realm="foreign"'})
        h.send(200, json.dumps({"token": "foreign-token", "tags": []}).encode())


def bind_foreign() -> ForeignHost:
    """The 'foreign host' on the documentation address 192.0.2.2 when this machine has it, else loopback."""
    try:
        return ForeignHost("192.0.2.2")
    except OSError:
        return ForeignHost("127.0.0.1")  # a second loopback port: another host as far as credentials go


# --- the registry ---------------------------------------------------------------


def sha(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def labels(**over) -> Dict[str, object]:
    base: Dict[str, object] = {
        "io.ascend-build.cell": "c1", "io.ascend-build.variant": "npu", "io.ascend-build.validated": "true",
        "io.ascend-build.arch": "x86_64", "io.ascend-build.chip": "910b", "io.ascend-build.cann": "8.0.RC3",
        "io.ascend-build.torch": "2.4.0", "io.ascend-build.torch-npu": "2.4.0",
        "io.ascend-build.min-driver": "24.1.RC3", "io.ascend-build.python": "3.10",
    }
    base.update(over)
    return base


def config_body(lbls: Dict[str, object], arch: str = "amd64") -> bytes:
    return json.dumps({"architecture": arch, "os": "linux", "config": {"Labels": lbls}}).encode()


def manifest_body(cfg: bytes) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(cfg),
                                  "size": len(cfg)}, "layers": []}).encode()


def _index(manifests) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                       "manifests": manifests}).encode()


GOOD_CFG = config_body(labels())
GOOD_MAN = manifest_body(GOOD_CFG)
DEEP_LIST = b"[" * DEEP + b"]" * DEEP
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"

# mode -> (tag list, manifest, config) for the "mistyped" family: one field of the
# answer has the wrong type, or the JSON is nested too deep, or a value is absurd.
_TAGS = {"tags": ["t1"]}
MISTYPED = {
    "tags_str": ({"tags": "abc"}, GOOD_MAN, GOOD_CFG),
    "tags_ints": ({"tags": [1, 2]}, GOOD_MAN, GOOD_CFG),
    "tags_obj": ({"tags": {"a": 1}}, GOOD_MAN, GOOD_CFG),
    "tags_list_body": (["t1"], GOOD_MAN, GOOD_CFG),
    "tags_deep": (DEEP_LIST, GOOD_MAN, GOOD_CFG),
    "man_manifests_int": (_TAGS, _index(5), GOOD_CFG),
    "man_manifests_bad_entries": (_TAGS, _index([{"platform": "x"}, {"platform": {"architecture": ["amd64"]}},
                                                 {"platform": {"architecture": "amd64"}, "digest": 5}]), GOOD_CFG),
    "man_config_str": (_TAGS, json.dumps({"schemaVersion": 2, "config": "sha256:abc"}).encode(), GOOD_CFG),
    "man_mediatype_list": (_TAGS, json.dumps({"schemaVersion": 2, "mediaType": ["x"],
                                              "config": {"digest": sha(GOOD_CFG)}}).encode(), GOOD_CFG),
    "man_list": (_TAGS, b"[1,2,3]", GOOD_CFG),
    "man_deep": (_TAGS, DEEP_LIST, GOOD_CFG),
    "cfg_labels_list": (_TAGS, None, json.dumps({"architecture": "amd64", "config": {"Labels": ["a"]}}).encode()),
    "cfg_config_str": (_TAGS, None, json.dumps({"architecture": "amd64", "config": "x"}).encode()),
    "cfg_arch_obj": (_TAGS, None, json.dumps({"architecture": {"a": 1},
                                              "config": {"Labels": {"io.ascend-build.cell": "c"}}}).encode()),
    "cfg_label_values_nested": (_TAGS, None, config_body(labels(**{"io.ascend-build.min-driver": {"x": [1]},
                                                                   "io.ascend-build.torch": None}))),
    "cfg_min_driver_5000": (_TAGS, None, config_body(labels(**{"io.ascend-build.min-driver": N5000 + ".1.RC1"}))),
    "cfg_torch_5000": (_TAGS, None, config_body(labels(**{"io.ascend-build.torch": "2." + N5000}))),
    "cfg_min_driver_super": (_TAGS, None, config_body(labels(**{"io.ascend-build.min-driver": "24.1.RC²"}))),
    "cfg_cann_5000": (_TAGS, None, config_body(labels(**{"io.ascend-build.cann": N5000 + ".0.RC1"}))),
    "cfg_deep": (_TAGS, None, b'{"config": ' + DEEP_LIST + b"}"),
    # injection: the tag list and a label carry a GitHub annotation and terminal escapes
    "tag_injection": ({"tags": ["t1\n::error file=x::INJECTED", "t2\x1b]0;PWNED\x07"]}, None,
                      config_body(labels(**{"io.ascend-build.chip": "910b\x1b]0;PWNED\x07\n::error file=y::INJ"}))),
    "label_injection": (_TAGS, None,
                        config_body(labels(**{"io.ascend-build.chip": "910b\x1b]0;PWNED\x07\n::error file=y::INJ"}))),
}


class FakeRegistry(_Server):
    """An OCI registry on loopback that misbehaves as ``mode`` says.

    ``target``: where redirects go (a ForeignHost URL) or, for mode "bearer", the token
    realm the 401 challenge names.
    """

    def __init__(self, mode: str, target: str = "") -> None:
        super().__init__("127.0.0.1")
        self.mode, self.target = mode, target
        self.address = f"127.0.0.1:{self.port}"  # what --registry gets

    def answer(self, h: _Handler) -> None:
        p, auth, m = h.path, h.headers.get("Authorization"), self.mode
        if p in ("/v2/", "/v2"):
            return h.send(200, b"{}")
        tags_path = p.startswith(f"/v2/{REPO}/tags/list")
        man_path = p.startswith(f"/v2/{REPO}/manifests/")
        blob_path = p.startswith(f"/v2/{REPO}/blobs/")
        if m in ("redirect_basic", "redirect_basic_307"):
            # challenge for Basic, then send the authenticated request elsewhere
            if not auth:
                return h.send(401, b"{}", headers={"WWW-Authenticate": 'Basic realm="r"'})
            return h.send(307 if m.endswith("307") else 302, headers={"Location": self.target + p})
        if m == "redirect_first":  # redirect before any challenge; the foreign host may challenge itself
            return h.send(302, headers={"Location": self.target + p})
        if m == "bearer":
            if not auth or not auth.startswith("Bearer "):
                return h.send(401, b"{}", headers={"WWW-Authenticate": f'Bearer realm="{self.target}",service="r"'})
            return h.send(200, b'{"tags": []}') if tags_path else h.send(404, b"{}")
        if m in ("digest_mismatch", "config_forged"):
            return self._forged(h, tags_path, man_path, blob_path)
        if m in MISTYPED:
            return self._mistyped(h, tags_path, man_path, blob_path)
        if m == "huge_announced" and man_path:  # says 8 GiB, sends 4 MiB
            h.send_response(200)
            h.send_header("Content-Type", OCI_MANIFEST)
            h.send_header("Content-Length", str(8 << 30))
            h.end_headers()
            for _ in range(64):
                h.wfile.write(b" " * 65536)
            return
        if m == "huge_announced" and tags_path:
            return h.send(200, json.dumps(_TAGS).encode())
        if m == "endless_body" and tags_path:  # 13 GB if the client reads on
            return h.stream(b'{"tags": ["', b"a" * 65536, 200_000)
        if m == "endless_pages":  # every page links to one more
            n = int(p.split("last=")[1]) if "last=" in p else 0
            return h.send(200, json.dumps({"tags": [f"t{n}"]}).encode(),
                          headers={"Link": f'</v2/{REPO}/tags/list?n=1&last={n + 1}>; rel="next"'})
        return h.send(404, b"{}")

    def _forged(self, h, tags_path, man_path, blob_path):
        if tags_path:
            return h.send(200, json.dumps(_TAGS).encode())
        if man_path and self.mode == "digest_mismatch":  # body and announced digest disagree
            return h.send(200, GOOD_MAN, ctype=OCI_MANIFEST, headers={"Docker-Content-Digest": sha(b"other")})
        if man_path:
            return h.send(200, GOOD_MAN, ctype=OCI_MANIFEST)
        if blob_path and self.mode == "config_forged":  # not the blob the manifest names
            return h.send(200, config_body(labels(**{"io.ascend-build.min-driver": "1.0.RC1"})))
        if blob_path:
            return h.send(200, GOOD_CFG)
        return h.send(404, b"{}")

    def _mistyped(self, h, tags_path, man_path, blob_path):
        tags, man, cfg = MISTYPED[self.mode]
        man = man if man is not None else manifest_body(cfg)
        if tags_path:
            return h.send(200, tags if isinstance(tags, bytes) else json.dumps(tags).encode())
        if man_path:
            return h.send(200, man, ctype=OCI_MANIFEST)
        if blob_path:
            return h.send(200, cfg)
        return h.send(404, b"{}")


# --- the package index ----------------------------------------------------------

JSON_PAGE = "application/vnd.pypi.simple.v1+json"
VERSION = "2.99.0"
META = (f"Metadata-Version: 2.1\nName: torch_npu\nVersion: {VERSION}\nRequires-Python: >=3.9\n"
        f"Requires-Dist: torch==2.99.0.*\nRequires-Dist: numpy\n\n").encode()


def wheel_name(py: str = "cp311", plat: str = "manylinux_2_28_x86_64", ver: str = VERSION) -> str:
    return f"torch_npu-{ver}-{py}-{py}-{plat}.whl"


def make_wheel(bomb_mib: int = 0, lie: bool = False) -> bytes:
    """A wheel with METADATA; ``bomb_mib`` pads METADATA with that many MiB of 'A' (a zip bomb);
    ``lie``: the zip's headers then claim METADATA inflates to only 1000 bytes."""
    buf = io.BytesIO()
    name = f"torch_npu-{VERSION}.dist-info/METADATA"
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("torch_npu/__init__.py", "")
        if not bomb_mib:
            z.writestr(name, META)
        else:
            with z.open(name, "w", force_zip64=not lie) as member:
                member.write(META)
                for _ in range(bomb_mib):
                    member.write(b"A" * (1 << 20))
    data = bytearray(buf.getvalue())
    if lie:
        small = (1000).to_bytes(4, "little")
        for sig, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # local header, central directory
            at = data.find(sig, data.find(sig) + 1)  # the second entry: METADATA
            data[at + offset:at + offset + 4] = small
    return bytes(data)


def broken_eocd_wheel() -> bytes:
    """A wheel whose end-of-central-directory names an absurd central directory size and offset."""
    data = bytearray(make_wheel())
    at = data.rfind(b"PK\x05\x06")
    data[at + 12:at + 16] = b"\xff\xff\xff\xff"
    data[at + 16:at + 20] = b"\xfe\xff\xff\xff"
    return bytes(data)


class FakeIndex(_Server):
    """A simple index on loopback serving /simple/torch-npu/ as ``mode`` says.

    ``local``: a folder whose paths the file:// modes name (the suite puts FIFOs there).
    """

    def __init__(self, mode: str, local: str = "/nonexistent") -> None:
        super().__init__("127.0.0.1")
        self.mode, self.local = mode, local
        self.index_url = f"{self.url}/simple/"
        self._wheel: Optional[bytes] = None

    def entry(self, name: str, url: Optional[str] = None, **extra) -> dict:
        d = {"filename": name, "url": url or f"{self.url}/files/{urllib.parse.quote(name)}", "hashes": {}}
        d.update(extra)
        return d

    def page(self, files, meta=None) -> bytes:
        return json.dumps({"meta": meta or {"api-version": "1.1"}, "name": "torch-npu", "files": files}).encode()

    def build_page(self) -> bytes:
        e: Callable[..., dict] = self.entry  # given fields of the wrong type on purpose (the hostile pages)
        m, cm = self.mode, {"core-metadata": True}
        n = wheel_name()
        pages = {
            "ok": lambda: self.page([e(n, **cm)]),
            "files_str": lambda: self.page("abc"),
            "files_item_int": lambda: self.page([5]),
            "filename_int": lambda: self.page([{"filename": 5, "url": "x"}]),
            "hashes_list": lambda: self.page([e(n, hashes=["a"], **cm)]),
            "hashes_values_obj": lambda: self.page([e(n, hashes={"sha256": {"x": 1}},
                                                      **{"core-metadata": {"sha256": [1]}})]),
            "yanked_int": lambda: self.page([e(n, yanked=5, **cm)]),
            "core_metadata_str": lambda: self.page([e(n, **{"core-metadata": "yes"})]),
            "requires_python_int": lambda: self.page([e(n, **{"requires-python": 3}, **cm)]),
            "upload_time_obj": lambda: self.page([e(n, **{"upload-time": {"a": 1}}, **cm)]),
            "meta_list": lambda: self.page([e(n, **cm)], meta=["1.1"]),
            "api_version_obj": lambda: self.page([], meta={"api-version": {"major": 1}}),
            "deep": lambda: b'{"files": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
            "deep_obj": lambda: b'{"meta": ' + b'{"a":' * DEEP + b"1" + b"}" * DEEP + b', "files": []}',
            "nonascii_path": lambda: self.page([e(n, url=f"{self.url}/files/tørch/{n}", **cm)]),
            "ctrl_url": lambda: self.page([e(n, url=f"{self.url}/files/{n}\n::error::x", **cm)]),
            "file_scheme_url": lambda: self.page([e(n, url=f"file://{self.local}/passwd", **cm)]),
            "file_scheme_wheel": lambda: self.page([e(n, url=f"file://{self.local}/{n}")]),
            "file_scheme_meta": lambda: self.page([e(n, url=f"file://{self.local}/{n}", **cm)]),
            # the wheel's tags spelt with Arabic-Indic / fullwidth digits, URLs quoted or not
            "nonascii_digits_quoted": lambda: self.page([e(wheel_name(py="cp٣١١"), **cm),
                                                         e(wheel_name(py="cp٣١١", plat="manylinux_٢_٢٨_aarch64"),
                                                           **cm)]),
            "nonascii_digits": lambda: self.page([
                e(w, url=f"{self.url}/files/{w}", **cm)
                for w in (wheel_name(py="cp٣١١"), wheel_name(py="cp٣١١", plat="manylinux_٢_٢٨_aarch64"))]),
            "nonascii_digits_mixed": lambda: self.page([  # a valid wheel beside the odd ones
                e(n, **cm), e(wheel_name(py="cp٣١١", plat="manylinux_٢_٢٨_aarch64"), **cm),
                e(wheel_name(py="cp３１２"), **cm)]),
            "nonascii_digits_fullwidth": lambda: self.page([e(wheel_name(py="cp３１２"),
                                                              url=f"{self.url}/files/{wheel_name(py='cp３１２')}",
                                                              **cm)]),
            "pytag_5000": lambda: self.page([e(wheel_name(py="cp3" + "1" * 5000), **cm)]),
            "glibc_5000": lambda: self.page([e(wheel_name(plat="manylinux_2_" + N5000 + "_x86_64"), **cm)]),
            "version_5000": lambda: self.page([e(wheel_name(ver="2." + N5000), **cm)]),
            "filename_escape": lambda: self.page([e("torch_npu-2.99.0-cp311-cp311-\x1b]0;PWNED\x07\n"
                                                    "::error file=z::INJ.whl")]),
            "metadata_escape": lambda: self.page([e(n, **cm)]),
        }
        if m in ("zipbomb", "zipbomb_lying", "zip64_odd"):
            return self.page([e(n)])  # no core-metadata: the CLI reads METADATA out of the wheel
        return pages[m]()

    def wheel(self) -> bytes:
        if self._wheel is None:
            self._wheel = {"zipbomb": lambda: make_wheel(bomb_mib=64),
                           "zipbomb_lying": lambda: make_wheel(bomb_mib=64, lie=True),
                           "zip64_odd": broken_eocd_wheel}.get(self.mode, make_wheel)()
        return self._wheel

    def answer(self, h: _Handler) -> None:
        p = h.path
        if p.startswith("/simple/torch-npu"):
            if self.mode == "endless":  # an HTML page that never ends: 6.5 GB if read on
                return h.stream(b"<html><body>", b"<a href='x'>" + b"y" * 65536, 100_000, ctype="text/html")
            return h.send(200, self.build_page(), ctype=JSON_PAGE)
        if p.endswith(".metadata"):
            meta = META
            if self.mode == "metadata_escape":
                meta = META.replace(b"Requires-Dist: numpy", b"Requires-Dist: numpy\x1b]0;PWNED\x07\n"
                                                             b"Requires-Dist: torch==2.99.0.*\x1b[2J")
            return h.send(200, meta, ctype="application/octet-stream")
        if p.endswith(".whl"):
            return self._ranged(h, self.wheel())
        return h.send(404, b"not found", ctype="text/plain")

    @staticmethod
    def _ranged(h: _Handler, data: bytes) -> None:
        rng = re.match(r"bytes=(\d*)-(\d*)", h.headers.get("Range") or "")
        if not rng:
            return h.send(200, data, ctype="application/octet-stream")
        a, b = rng.group(1), rng.group(2)
        if a == "":
            start, end = max(0, len(data) - int(b)), len(data) - 1
        else:
            start, end = int(a), min(len(data) - 1, int(b) if b else len(data) - 1)
        h.send(206, data[start:end + 1], ctype="application/octet-stream",
               headers={"Content-Range": f"bytes {start}-{end}/{len(data)}"})


# --- was a local file opened? -----------------------------------------------------


class OpenWatch:
    """Notices a reader opening any of these FIFOs.

    Why FIFOs: opening one for writing without blocking succeeds only while a reader has
    it open, so polling that tells whether the CLI opened the path at all (a stat does
    not count). The watch then closes its end at once, so the reader sees an empty file
    and never blocks.
    """

    def __init__(self, *paths: str) -> None:
        self.paths = paths
        self.opened: List[str] = []
        for path in paths:
            os.mkfifo(path)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.is_set():
            for path in self.paths:
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                except OSError as exc:
                    if exc.errno not in (errno.ENXIO, errno.ENOENT):
                        raise
                    continue
                os.close(fd)
                if path not in self.opened:
                    self.opened.append(path)
            time.sleep(0.002)
