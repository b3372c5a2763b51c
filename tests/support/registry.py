"""A real distribution registry with token auth on loopback, and the small token service it trusts.

How public registries (Docker Hub, quay.io, SWR) work: the registry answers 401 with
``Bearer realm=...,service=...``; the client asks the realm for a token for a scope,
with credentials or anonymously, and the registry checks the token's signature
against a certificate it was configured with. Here the registry is Debian's
docker-registry with ``auth: token``, and the token service is this file: it signs
RS256 JWTs with ``openssl`` (no crypto package needed) and grants

- ``pull`` on repositories under ``public/`` to anyone, anonymous included;
- everything requested to ``USER``/``PASSWORD``;
- nothing else (an empty access list, so the registry answers 401 again).

Every token request is recorded (``TokenService.requests``) so tests can assert which
carried credentials.
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import List, Tuple

USER, PASSWORD = "ascend", "token-pw"
SERVICE, ISSUER = "ascend-build-test-registry", "ascend-build-test-issuer"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_key(folder: Path) -> Tuple[Path, Path, bytes]:
    """An RSA key and a self-signed certificate (PEM) plus the certificate's DER bytes."""
    key, cert = folder / "token.key", folder / "token.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=ascend-build-test-token"], check=True, capture_output=True)
    der = subprocess.run(["openssl", "x509", "-in", str(cert), "-outform", "der"], check=True,
                         capture_output=True).stdout
    return key, cert, der


@dataclass
class TokenService:
    key: Path
    der: bytes
    requests: List[dict] = field(default_factory=list)

    def grant(self, scope: str, authenticated: bool) -> dict:
        kind, _, rest = scope.partition(":")
        name, _, actions = rest.rpartition(":")
        wanted = [a for a in actions.split(",") if a]
        if authenticated:
            allowed = wanted
        else:
            allowed = [a for a in wanted if a == "pull" and name.startswith("public/")]
        return {"type": kind, "name": name, "actions": allowed}

    def token(self, subject: str, access: List[dict]) -> str:
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(self.der).decode()]}
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": subject, "aud": SERVICE, "exp": now + 600, "nbf": now - 60, "iat": now,
                  "jti": uuid.uuid4().hex, "access": access}
        signing = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)], input=signing.encode(),
                                   check=True, capture_output=True).stdout
        return f"{signing}.{b64url(signature)}"

    def handler(self):
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                auth = self.headers.get("Authorization", "")
                service.requests.append({"path": self.path, "authorization": auth})
                subject = ""
                if auth.startswith("Basic "):
                    user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
                    if (user, password) != (USER, PASSWORD):
                        self.send_response(401)
                        self.end_headers()
                        return
                    subject = user
                access = [service.grant(s, bool(subject)) for s in query.get("scope", [])]
                body = json.dumps({"token": self.token_for(subject, access), "expires_in": 600}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def token_for(self, subject, access):
                return service.token(subject, access)

        return Handler


def serve(handler) -> Tuple[ThreadingHTTPServer, int]:
    """An HTTP server on a free loopback port, in a daemon thread."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def registry_config(root: Path, port: int, realm: str, cert: Path) -> str:
    return ("version: 0.1\n"
            "log: {level: warn}\n"
            f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
            f"http: {{addr: '127.0.0.1:{port}', secret: test-only}}\n"
            f"auth: {{token: {{realm: '{realm}', service: {SERVICE}, issuer: {ISSUER}, rootcertbundle: {cert}}}}}\n")


def blob_path(root: Path, digest: str) -> Path:
    """Where the filesystem storage keeps a blob (manifests are blobs too)."""
    hexdigest = digest.split(":", 1)[1]
    return root / "data/docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"


class Trickle(BaseHTTPRequestHandler):
    """Answers every GET with 1,000 announced bytes, one every 0.2 s: no single read ever
    times out, only a deadline over the whole answer stops it."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        try:
            for _ in range(1000):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass


def answering(status: int, headers: dict, body: bytes = b""):
    """A handler answering every GET with exactly these headers (no Content-Length of its own) and body."""
    class Answer(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)
    return Answer


class TrickleHead(BaseHTTPRequestHandler):
    """Sends its status line and headers a byte every 0.1 s (about 25 s in all), then a short
    body: no single read times out, and the body, once it comes, comes at once. Only a
    deadline that covers the whole answer, head included, stops it in time."""

    HEAD = b"HTTP/1.1 200 OK\r\nX-Padding: " + b"a" * 200 + b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"

    def log_message(self, *args):
        pass

    def do_GET(self):
        try:
            for byte in self.HEAD:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.1)
            self.wfile.write(b"{}")
        except OSError:
            pass


def slow_answers(routes: dict, per_answer: float):
    """A handler answering GET path -> body (404 for any other path), every body sent in ten
    pieces over ``per_answer`` seconds: each answer keeps well within any per-request deadline,
    a command that asks many questions takes their sum."""
    class Slow(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = routes.get(self.path.split("?")[0])
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            body = body or b""
            step = max(1, -(-len(body) // 10))
            try:
                for at in range(0, len(body), step):
                    time.sleep(per_answer / 10)
                    self.wfile.write(body[at:at + step])
                    self.wfile.flush()
            except OSError:
                pass
    return Slow
