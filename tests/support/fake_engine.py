"""A stand-in for the Docker Engine's HTTP API on loopback TCP: just enough of it for
`builder.engine.Engine` to talk to it through the real docker SDK (ping, version, an image's
inspect, tags and their removal, a push and a pull that stream JSON progress, containers made,
started, waited for, listed by label and removed), with the engine's ways of failing on cue: a
push or pull that goes silent, one that trickles progress for ever, one that never answers at
all, one that fails with a 5xx; a container whose creation takes its time.

What these tests hold cannot be caused on cue with a real engine in a few seconds (an engine
that stops answering mid-push, for ever; a Ctrl-C in the instant the engine creates a
container), and needs none: the SDK, its connection, the stream and the deadline's cut are all
real here; only the daemon answering is scripted.

``FakeEngine(push=[...], pull=[...])``: each push (pull) request gets the next behaviour of its
list, the last one repeated: "ok" (progress, then the digest `DIGEST`), "silent" (the answer's
head, then nothing), "trickle" (a progress line every 0.2 s for ever), "headless" (no answer at
all, not even its head), "fail" (an error line naming HTTP 503). ``cut``: for each silent,
trickling or headless answer, the seconds after its start at which the client shut its
connection (None while it has not). ``containers``: id -> {"labels", "state"} (add some to
stand for what other runs left); ``images``: what the image list answers ({"Id", "RepoTags"});
``data_root`` and ``host_name``: what ``docker info`` answers as DockerRootDir and Name (this host's
name: an engine on this host); ``create_delay``: seconds the answer to a container's creation takes (the container is there at once); ``wait_seconds``: how long a started
container runs; ``slow_tag``: a tag whose name holds it is answered after 5 s. ``url``: ``tcp://127.0.0.1:PORT``, for ``DOCKER_HOST`` or
``docker.DockerClient(base_url=...)``.
"""

from __future__ import annotations

import json
import re
import select
import socket
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Sequence

API_VERSION = "1.41"
DIGEST = "sha256:" + "d" * 64
IMAGE_ID = "sha256:" + "e" * 64


class FakeEngine:
    def __init__(self, push: Sequence[str] = ("ok",), pull: Sequence[str] = ("ok",),
                 labels: Optional[Dict[str, str]] = None) -> None:
        self.behaviours = {"push": list(push), "pull": list(pull)}
        self.labels = dict(labels or {})
        self.requests: List[str] = []  # "METHOD path", in order
        self.cut: List[Optional[float]] = []
        self.containers: Dict[str, Dict[str, Any]] = {}
        self.images: List[Dict[str, Any]] = []
        self.create_delay = 0.0
        self.slow_tag = ""  # a tag whose name holds this is answered after 5 s
        self.wait_seconds = 0.0
        self.data_root = "/var/lib/docker"
        self.host_name = socket.gethostname()
        self._counts = {"push": 0, "pull": 0}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _route(self) -> str:
                engine.requests.append(f"{self.command} {self.path}")
                return re.sub(r"^/v[0-9.]+", "", urllib.parse.urlsplit(self.path).path)

            def _query(self) -> Dict[str, str]:
                return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))

            def do_GET(self):
                path = self._route()
                if path == "/_ping":
                    return self._answer(200, b"OK", "text/plain")
                if path == "/version":
                    return self._json(200, {"ApiVersion": API_VERSION, "Version": "fake"})
                if path == "/info":
                    return self._json(200, {"DockerRootDir": engine.data_root, "Name": engine.host_name})
                if path == "/images/json":
                    return self._json(200, engine.images)
                if path.startswith("/images/") and path.endswith("/json"):
                    return self._json(200, {"Id": IMAGE_ID, "RepoTags": [], "RepoDigests": [],
                                            "Config": {"Labels": engine.labels}})
                if path == "/containers/json":
                    return self._json(200, engine.listed(json.loads(self._query().get("filters") or "{}")))
                found = re.fullmatch(r"/containers/([^/]+)/(json|logs)", path)
                if found and found.group(1) in engine.containers:
                    if found.group(2) == "logs":
                        return self._answer(200, b"", "application/vnd.docker.raw-stream")
                    ctr = engine.containers[found.group(1)]
                    return self._json(200, {"Id": found.group(1), "Name": "/" + found.group(1)[:12],
                                            "Config": {"Labels": ctr["labels"], "Image": IMAGE_ID, "Tty": False},
                                            "State": {"Status": ctr["state"]}})
                return self._json(404, {"message": "no such thing here"})

            def do_HEAD(self):
                self._route()
                self._answer(200, b"", "text/plain")

            def do_DELETE(self):
                path = self._route()
                found = re.fullmatch(r"/containers/([^/]+)", path)
                if found:
                    gone = engine.containers.pop(found.group(1), None)
                    return self._answer(204 if gone is not None else 404, b"")
                if path.startswith("/images/"):
                    return self._json(200, [{"Untagged": urllib.parse.unquote(path[len("/images/"):])}])
                return self._json(404, {"message": "no such thing here"})

            def do_POST(self):
                path = self._route()
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if path.endswith("/tag"):  # Engine.tag: the name is given, nothing to say
                    if engine.slow_tag and engine.slow_tag in urllib.parse.unquote(self.path):
                        engine._stop.wait(5)
                    return self._answer(201, b"")
                if path == "/containers/create":  # made at once, answered after create_delay
                    made = uuid.uuid4().hex * 2
                    engine.containers[made] = {"labels": json.loads(body or b"{}").get("Labels") or {},
                                               "state": "created"}
                    engine._stop.wait(engine.create_delay)
                    return self._json(201, {"Id": made, "Warnings": []})
                found = re.fullmatch(r"/containers/([^/]+)/(start|wait|kill)", path)
                if found and found.group(1) in engine.containers:
                    ctr = engine.containers[found.group(1)]
                    if found.group(2) == "start":
                        ctr["state"] = "running"
                    elif found.group(2) == "wait":
                        engine._stop.wait(engine.wait_seconds)
                        ctr["state"] = "exited"
                        return self._json(200, {"StatusCode": 0})
                    else:
                        ctr["state"] = "exited"
                    return self._answer(204, b"")
                kind = "push" if path.endswith("/push") else "pull" if path == "/images/create" else None
                if kind is None:
                    return self._json(404, {"message": "no such thing here"})
                self._stream(engine.next_behaviour(kind), kind)

            def _json(self, status: int, value: Any) -> None:
                self._answer(status, json.dumps(value).encode())

            def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Api-Version", API_VERSION)
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:  # the client is gone (a Ctrl-C while it waited): nobody to answer
                    self.close_connection = True

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

    def listed(self, filters: Dict[str, List[str]]) -> List[Dict[str, Any]]:
        """The containers a ``GET /containers/json`` with ``filters`` (label KEY or KEY=VALUE, status) lists."""
        out = []
        for made, ctr in list(self.containers.items()):
            labels = ctr["labels"]
            wanted = [f.partition("=") for f in filters.get("label", [])]
            if all(key in labels and (not eq or labels[key] == value) for key, eq, value in wanted) and \
                    ctr["state"] in filters.get("status", [ctr["state"]]):
                out.append({"Id": made, "Labels": labels, "State": ctr["state"]})
        return out

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
        """Keep a silent, trickling or headless answer open until the client shuts its connection
        (or the stand-in stops); record when it did."""
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
