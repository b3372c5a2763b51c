"""An HTTP server on loopback that answers from a script and records every request: what the claims
tests put where a registry (or a Docker Engine) would answer in a way no real one does on cue, such
as a 504, a digest other than the one sent, a Retry-After of an hour.

``Scripted({("GET", r"/v2/r/tags/list$"): [(503, {}, b""), (200, {}, b'{"tags": ["v1"]}')]})``: the
Nth request matching a (method, path pattern) gets the Nth answer of its list, the last one
again after that; a request nothing matches gets 404. An answer may be a callable taking the
request (``Seen``) and returning (status, headers, body). ``seen``: every request, in order.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Sequence, Tuple, Union

Answer = Tuple[int, Dict[str, str], bytes]
Script = Dict[Tuple[str, str], Sequence[Union[Answer, Callable[["Seen"], Answer]]]]


@dataclass(frozen=True)
class Seen:
    method: str
    path: str  # with its query
    headers: Dict[str, str]
    body: bytes


class Scripted:
    def __init__(self, script: Script) -> None:
        self.script = {(method, re.compile(pattern)): list(answers) for (method, pattern), answers in script.items()}
        self.seen: List[Seen] = []
        self._counts: Dict[Tuple[str, "re.Pattern[str]"], int] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                            self.rfile.read(length) if length else b"")
                status, headers, body = server.answer_for(seen)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if "content-length" not in {k.lower() for k in headers}:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer_for(self, seen: Seen) -> Answer:
        with self._lock:
            self.seen.append(seen)
            path = seen.path.split("?")[0]
            for (method, pattern), answers in self.script.items():
                if method == seen.method and pattern.search(path):
                    n = self._counts.get((method, pattern), 0)
                    self._counts[(method, pattern)] = n + 1
                    chosen = answers[min(n, len(answers) - 1)]
                    break
            else:
                return 404, {}, b""
        return chosen(seen) if callable(chosen) else chosen

    def count(self, method: str, pattern: str) -> int:
        with self._lock:
            return sum(1 for s in self.seen if s.method == method and re.search(pattern, s.path.split("?")[0]))

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
