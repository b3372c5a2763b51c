"""A stand-in for the Docker Engine's HTTP API on loopback TCP: just enough of it (ping, version, an
image's inspect, a push and a pull that stream JSON progress, a tag) for `builder.engine.Engine` to talk
to it through the real docker SDK, with the engine's ways of failing on cue: a push or pull that
goes silent, one that trickles progress for ever, one that fails with a 5xx, one that succeeds.

What these tests hold cannot be caused on cue with a real engine in a few seconds (an engine
that stops answering mid-push, for ever), and needs none: the SDK, its connection, the stream
and the deadline's cut are all real here; only the daemon answering is scripted.

``FakeEngine(push=[...], pull=[...])``: each push (pull) request gets the next behaviour of its
list, the last one repeated: "ok" (progress, then the digest `DIGEST`), "silent" (the answer's
head, then nothing), "trickle" (a progress line every 0.2 s for ever), "headless" (no answer at all, not even
its head), "fail" (an error line
naming HTTP 503). ``cut``: for each silent, trickling or headless answer, the seconds after its start at
which the client shut its connection (None while it has not). ``url``: ``tcp://127.0.0.1:PORT``,
for ``DOCKER_HOST`` or ``docker.DockerClient(base_url=...)``.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Sequence

API_VERSION = "1.41"
DIGEST = "sha256:" + "d" * 64
IMAGE_ID = "sha256:" + "e" * 64


class FakeEngine:
    def __init__(self, push: Sequence[str] = ("ok",), pull: Sequence[str] = ("ok",),
                 labels: Optional[Dict[str, str]] = None) -> None:
        self.behaviours = {"push": list(push), "pull": list(pull)}
        self.labels = dict(labels or {})
        self.requests: List[str] = []  # "METHOD path"
        self.cut: List[Optional[float]] = []
        self._counts = {"push": 0, "pull": 0}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                engine.requests.append(f"GET {self.path}")
                path = self.path.split("?")[0]
                if path.endswith("/_ping"):
                    return self._answer(200, b"OK", "text/plain")
                if path.endswith("/version"):
                    return self._answer(200, json.dumps({"ApiVersion": API_VERSION, "Version": "fake"}).encode())
                if path.endswith("/json") and "/images/" in path:
                    return self._answer(200, json.dumps({"Id": IMAGE_ID, "RepoTags": [], "RepoDigests": [],
                                                         "Config": {"Labels": engine.labels}}).encode())
                return self._answer(404, b'{"message": "no such thing here"}')

            def do_HEAD(self):
                engine.requests.append(f"HEAD {self.path}")
                self._answer(200, b"", "text/plain")

            def do_POST(self):
                engine.requests.append(f"POST {self.path}")
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                path = self.path.split("?")[0]
                if path.endswith("/tag"):  # Engine.tag: the name is given, nothing to say
                    self.send_response(201)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                kind = "push" if path.endswith("/push") else "pull" if path.endswith("/images/create") else None
                if kind is None:
                    return self._answer(404, b'{"message": "no such thing here"}')
                self._stream(engine.next_behaviour(kind), kind)

            def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Api-Version", API_VERSION)
                self.end_headers()
                self.wfile.write(body)

            def _chunk(self, event: dict) -> None:
                data = json.dumps(event).encode() + b"\r\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _stream(self, behaviour: str, kind: str) -> None:
                if behaviour == "headless":  # not even the answer's head
                    return engine.hold(self, behaviour)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Api-Version", API_VERSION)
                self.end_headers()
                self.wfile.flush()
                if behaviour == "ok":
                    self._chunk({"status": "Pushing" if kind == "push" else "Pulling fs layer"})
                    self._chunk({"status": "done", "aux": {"Tag": "t", "Digest": DIGEST, "Size": 9}})
                elif behaviour == "fail":
                    self._chunk({"error": "received unexpected HTTP status: 503 Service Unavailable"})
                else:  # silent or trickle: until the client hangs up
                    return engine.hold(self, behaviour)
                self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"tcp://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def next_behaviour(self, kind: str) -> str:
        with self._lock:
            n = self._counts[kind]
            self._counts[kind] = n + 1
            listed = self.behaviours[kind]
            return listed[min(n, len(listed) - 1)]

    def count(self, kind: str) -> int:
        with self._lock:
            return self._counts[kind]

    def cuts(self, wait: float = 3.0) -> List[Optional[float]]:
        """``cut``, once every held answer saw its end (or ``wait`` s passed): the stand-in notices
        a shut connection within 0.2 s of it."""
        until = time.monotonic() + wait
        while None in self.cut and time.monotonic() < until:
            time.sleep(0.05)
        return list(self.cut)

    def hold(self, handler, behaviour: str) -> None:
        """Keep a silent or trickling answer open until the client shuts its connection (or the
        stand-in stops); record when it did."""
        with self._lock:
            self.cut.append(None)
            slot = len(self.cut) - 1
        start = time.monotonic()
        conn: socket.socket = handler.connection
        try:
            while not self._stop.is_set():
                readable, _, _ = select.select([conn], [], [], 0.2)
                if readable and not conn.recv(1):  # the client shut its side
                    break
                if behaviour == "trickle":
                    handler._chunk({"status": "Pushing", "progressDetail": {"current": 1, "total": 1 << 30}})
        except OSError:  # the client reset it
            pass
        if not self._stop.is_set():
            self.cut[slot] = time.monotonic() - start
        handler.close_connection = True

    def stop(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
