"""A userspace TCP proxy on loopback that limits and counts what crosses it: the bandwidth-limited
path to a source registry that tests/node/test_cache_warm.py and benchmarks/bench_distribution.py put
between the source and whoever pulls from it (a pull-through cache, a mirror, N direct pulls).

Each direction has one token bucket shared by every connection (a full-duplex link of ``rate``
bytes a second each way), so N connections at once share the link as they would a real one. The
bytes forwarded each way are counted: ``down`` (upstream -> clients: the source's egress) and
``up``. No `tc` qdisc is touched (the machine is shared); only the proxy's own sockets are slowed.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import List, Optional

CHUNK = 64 << 10
BURST = 256 << 10  # the bucket's depth: a link idle for a moment may send this much at once


class _Bucket:
    """``rate`` bytes a second: each send of n bytes reserves the next n / rate seconds of the link
    (a token bucket `BURST` deep, so a connection's own pauses between reads are not lost time)."""

    def __init__(self, rate: Optional[float]):
        self.rate = rate
        self.free_at = time.monotonic()
        self.lock = threading.Lock()
        self.count = 0

    def take(self, n: int) -> None:
        with self.lock:
            self.count += n
            if not self.rate:
                return
            now = time.monotonic()
            self.free_at = max(self.free_at, now - BURST / self.rate) + n / self.rate
            until = self.free_at
        pause = until - time.monotonic()
        if pause > 0:
            time.sleep(pause)


class Throttle:
    """Listens on 127.0.0.1 (``host``), forwards each connection to ``upstream`` ("HOST:PORT"),
    at most ``rate`` bytes a second each way (None: no limit, only counted)."""

    def __init__(self, upstream: str, rate: Optional[float]):
        self.upstream = upstream
        self.down, self.upb = _Bucket(rate), _Bucket(rate)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(256)
        self.host = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.stopping = threading.Event()
        self.sockets: List[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bytes_down(self) -> int:
        """Bytes forwarded from the upstream to clients (the source's egress) so far."""
        return self.down.count

    @property
    def bytes_up(self) -> int:
        return self.upb.count

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            host, port = self.upstream.rsplit(":", 1)
            try:
                server = socket.create_connection((host, int(port)), timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self.lock:
                self.sockets += [client, server]
            threading.Thread(target=self._pump, args=(server, client, self.down), daemon=True).start()
            threading.Thread(target=self._pump, args=(client, server, self.upb), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, bucket: _Bucket) -> None:
        try:
            while True:
                data = source.recv(CHUNK)
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                bucket.take(len(data))
                sink.sendall(data)
        except OSError:  # either side hung up: end both, as a router dropping the flow would
            for end in (source, sink):
                try:
                    end.close()
                except OSError:
                    pass

    def stop(self) -> None:
        self.stopping.set()
        self.listener.close()
        with self.lock:
            for end in self.sockets:
                try:
                    end.close()
                except OSError:
                    pass
