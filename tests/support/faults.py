"""What the fault tests and benchmarks/bench_faults.py share: a fault-injecting registry
proxy, a small file system that fills up, and a real CLI run killed at a phase.

`FaultProxy` forwards to a real docker-registry on loopback and injects faults on the Nth
request of a path (tests/test_registry_faults.py); `small_fs` mounts a tmpfs of a few
hundred KiB (we are root here; without the right to mount, the tests skip, saying so);
`Killable` starts the real `ascend-build` in a session of its own and signals its whole
process group once a progress line it prints on stderr matches, as a CI runner cancelling
the job does.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import http.server
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO, Dict, Iterator, List, Optional, Sequence, Tuple, Union

CLI = Path(sys.executable).with_name("ascend-build")


HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "content-length"}


class FaultProxy:
    """Forwards to ``upstream`` ("127.0.0.1:PORT"). ``plan(method, pattern, faults)``: the Nth
    request whose method is ``method`` and whose path matches ``pattern`` gets ``faults[N-1]``
    ("500", "503", "429", "429:SECONDS" with Retry-After, "reset" (half the request read, then a
    TCP reset), "cut" (the real answer's head and half its body, then a reset), "alter" (the real
    answer with a space added to its body and no Docker-Content-Digest header), "stall" (the request
    read, then no answer until the proxy stops or 120 s pass), or "" to forward);
    ``always`` applies to every such request. ``count(method, pattern)``: requests seen."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.plans: List[Tuple[str, "re.Pattern[str]", List[str], str, int]] = []
        self.seen: Counter = Counter()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):
                pass

            def handle_one(self):
                proxy.handle(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = handle_one

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def plan(self, method: str, pattern: str, faults: Sequence[str] = (), always: str = "") -> None:
        """Faults for the requests from now on (the Nth after this call gets ``faults[N-1]``)."""
        compiled = re.compile(pattern)
        with self.lock:
            base = sum(c for (m, p), c in self.seen.items() if m == method and compiled.search(p))
            self.plans.append((method, compiled, list(faults), always, base))

    def count(self, method: str, pattern: str) -> int:
        with self.lock:
            return sum(n for (m, path), n in self.seen.items() if m == method and re.search(pattern, path))

    def _fault(self, method: str, path: str) -> str:
        with self.lock:
            self.seen[(method, path)] += 1
            for m, pattern, faults, always, base in self.plans:
                if m == method and pattern.search(path):
                    n = sum(c for (mm, p), c in self.seen.items() if mm == m and pattern.search(p)) - base
                    return always or (faults[n - 1] if n <= len(faults) else "")
        return ""

    @staticmethod
    def _chunked(stream) -> bytes:
        parts = []
        for _ in range(1 << 20):  # bounded: a chunk count no push of a test image reaches
            size = int(stream.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while stream.readline().strip():  # trailers
                    pass
                break
            parts.append(stream.read(size))
            stream.readline()
        return b"".join(parts)

    @staticmethod
    def _reset(handler) -> None:
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()
        handler.close_connection = True

    def handle(self, handler) -> None:
        method, path = handler.command, handler.path.split("?")[0]
        fault = self._fault(method, path)
        length = int(handler.headers.get("Content-Length") or 0)
        if fault == "reset":  # mid-request: half the body read, then a TCP reset
            handler.rfile.read(length // 2)
            return self._reset(handler)
        body = handler.rfile.read(length) if length else b""
        if "chunked" in (handler.headers.get("Transfer-Encoding") or "").lower():  # Docker Engine's blob PATCH
            body, length = self._chunked(handler.rfile), 1
        if fault == "stall":  # a registry that stops answering mid-upload
            self.stopping.wait(120)
            return self._reset(handler)
        if fault.split(":")[0] in ("500", "502", "503", "429"):
            code, _, after = fault.partition(":")
            handler.send_response(int(code))
            if after:
                handler.send_header("Retry-After", after)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        upstream = http.client.HTTPConnection(self.upstream, timeout=30)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP}
        upstream.request(method, handler.path, body=body if length else None, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        upstream.close()
        if fault == "alter":  # a JSON body stays JSON, its digest changes; nothing announces the real one
            data += b" "
        handler.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in HOP and not (fault == "alter" and key.lower() == "docker-content-digest"):
                handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if method == "HEAD":
            return
        if fault == "cut" and data:  # mid-answer: half the body, then a TCP reset
            handler.wfile.write(data[: len(data) // 2])
            handler.wfile.flush()
            return self._reset(handler)
        handler.wfile.write(data)

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()




# --- a file system that fills up ------------------------------------------------------------


class CannotMount(Exception):
    """This sandbox refuses `mount -t tmpfs` (not root, or no CAP_SYS_ADMIN)."""


@contextlib.contextmanager
def small_fs(size: str = "256k") -> Iterator[Path]:
    """A fresh tmpfs of ``size`` mounted on a temporary folder, unmounted afterwards."""
    point = Path(tempfile.mkdtemp(prefix="ascend-build-small-fs-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        point.rmdir()
        raise CannotMount(done.stderr.strip() or f"mount exited {done.returncode}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)
        point.rmdir()


def fill(folder: Path, keep: int = 0) -> Path:
    """Fill the file system of ``folder`` (all but ``keep`` bytes) with one file; its path."""
    filler = folder / ".filler"
    with open(filler, "wb") as fh:
        while True:
            free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
            if free <= keep:
                break
            try:
                fh.write(b"\0" * min(free - keep, 1 << 16))
                fh.flush()
            except OSError:
                break
    return filler


def tree(folder: Path) -> Dict[str, str]:
    """relative path -> sha256 of every file below ``folder`` (what "intact" is compared by)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


# --- a real run, killed at a phase ---------------------------------------------------------------


class Killable:
    """The real CLI (``argv`` after the program name) in a session of its own; its stderr
    lines are collected as they come (``lines``), its stdout kept whole."""

    def __init__(self, argv: Sequence[Union[str, "os.PathLike[str]"]], cwd: Path, env: Optional[Dict[str, str]] = None):
        self.started = time.monotonic()
        self.proc = subprocess.Popen([str(CLI), *map(str, argv)], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        out, err = self.proc.stdout, self.proc.stderr
        assert out is not None and err is not None  # both piped
        self.lines: List[str] = []
        self.out: List[str] = []
        self.readers = [threading.Thread(target=self._read_err, args=(err,), daemon=True),
                        threading.Thread(target=lambda: self.out.append(out.read()), daemon=True)]
        for reader in self.readers:
            reader.start()

    def _read_err(self, err: IO[str]) -> None:
        for line in err:
            self.lines.append(line)

    def wait_for(self, pattern: str, timeout: float = 900) -> bool:
        """Until a stderr line matches ``pattern``: True, or False if the run ended first."""
        ready = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            lines = list(self.lines)
            if any(ready.search(line) for line in lines[seen:]):
                return True
            seen = max(0, len(lines) - 1)
            if self.proc.poll() is not None:
                time.sleep(0.2)  # the reader may still hold its last lines
                return any(ready.search(line) for line in self.lines)
            time.sleep(0.05)
        raise TimeoutError(f"never saw {pattern!r} in {timeout:g} s:\n{''.join(self.lines)[-3000:]}")

    def signal(self, signum: int = signal.SIGKILL) -> None:
        """``signum`` to the whole process group (the docker CLI a build runs included)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signum)

    def finish(self, timeout: float = 1800) -> subprocess.CompletedProcess:
        """Wait for the end (killing the group at ``timeout``); the run's code, stdout, stderr."""
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.signal(signal.SIGKILL)
                self.proc.wait()
        for reader in self.readers:
            reader.join(timeout=10)
        self.seconds = time.monotonic() - self.started
        return subprocess.CompletedProcess(self.proc.args, code, "".join(self.out), "".join(self.lines))

    def group_gone(self, timeout: float = 20) -> bool:
        """Whether every process of the run's group has ended within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return True
            time.sleep(0.1)
        return False


# --- the registry's side ------------------------------------------------------------------------


def push_tiny_image(repo_registry, repository: str, tag: str) -> Tuple[str, bytes]:
    """A tiny image (a config blob and a manifest without layers) pushed straight to a registry
    (a `builder.registry.Registry`); its (digest, manifest)."""
    from builder.registry import OCI_MANIFEST

    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {"t": tag}},
                         "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    digest = repo_registry.put_blob(repository, config)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {
        "mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest, "size": len(config)},
        "layers": []}).encode()
    return repo_registry.put_manifest(repository, tag, manifest, OCI_MANIFEST), manifest


def unvalidated_tags(engine, client, repository: str) -> List[str]:
    """Every tag of ``repository`` naming an image not labelled validated: in the engine
    (``engine``), and in the registry ``client`` (a `builder.registry.Registry`) but for indexes
    and the tags that hold what is attached to an image (`attached.is_attached_tag`)."""
    from builder.trust.attached import is_attached_tag
    from builder.vocabulary import Label
    from tests.support import listing

    bad = [ref for image in listing.images(engine) for ref in image.tags
           if repository in ref and (image.labels or {}).get(Label.VALIDATED) != "true"]
    try:
        tags = client.tags(repository)
    except Exception:  # never pushed: no repository yet
        tags = []
    for tag in tags:
        if is_attached_tag(tag):  # an image's signed statements, signatures or SBOM: no image
            continue
        manifest = client.manifest(repository, tag)
        if manifest.is_index:
            continue
        labels = (client.config(repository, manifest).get("config") or {}).get("Labels") or {}
        if labels.get(Label.VALIDATED) != "true":
            bad.append(f"{client.name}/{repository}:{tag}")
    return bad


def put_stand_in_arm64(client, repository: str, family: str) -> None:
    """The aarch64 twin of ``family`` written straight to the registry with the x86_64 twin's
    labels (its arch changed): a stand-in (an aarch64 build under qemu takes minutes here)
    that lets `image --push` of the x86_64 twin reach its index phase."""
    from builder.images import publish
    from builder.registry import DOCKER_MANIFEST
    from builder.vocabulary import Label

    x86, reasons = publish.read_arch(client, repository, family, "cpu", "x86_64")
    assert x86 is not None and not reasons, reasons
    labels = {key: value.replace("x86_64", "aarch64") for key, value in x86.labels.items()}  # its cell, arch, title
    assert labels[Label.ARCH] == "aarch64"
    config = json.dumps({"architecture": "arm64", "os": "linux", "config": {"Labels": labels},
                         "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    digest = client.put_blob(repository, config)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {
        "mediaType": "application/vnd.docker.container.image.v1+json", "digest": digest, "size": len(config)},
        "layers": []}).encode()
    client.put_manifest(repository, f"{family}-aarch64-cpu", manifest, DOCKER_MANIFEST)
