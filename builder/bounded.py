"""Read an HTTP answer within a size limit and a deadline, however the server sends it; and
the deadline of a whole networked command.

Why: a per-read timeout alone lets a server that sends a byte every few seconds go on
forever, and reading "everything" lets one that never stops fill memory. So every
answer is read through `opened` and `chunks`: from the connection on, a watchdog shuts
the socket at the answer's deadline, so a status line and headers trickled a byte at a
time are cut there as a trickled body is (http.client reads the head with nothing but
the per-read timeout). And a command asks many questions, each within its own deadline
but together without end, so a networked command runs inside `command_deadline`: no
answer is read, and no helper program waited for, past it.

Example:
    >>> import io, time
    >>> b"".join(chunks(io.BytesIO(b"abc"), limit=10, deadline=time.monotonic() + 5))
    b'abc'
    >>> try:
    ...     b"".join(chunks(io.BytesIO(b"abcdef"), limit=4, deadline=time.monotonic() + 5))
    ... except Cut as cut:
    ...     print(cut)
    more than 4 bytes
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import os
import socket
import stat
import threading
import time
import urllib.request
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from builder.errors import UserError

CHUNK = 1 << 16
DIGITS = 18         # a size, a count, an id of ours never has more: int() of 4300+ digits is refused
HUGE = 10 ** DIGITS  # what a number of more digits stands for


def whole_number(text: Any) -> Optional[int]:
    """``text`` as an int when it is ASCII digits (spaces around allowed), capped at HUGE; None
    for anything else. Why: ``int()`` takes other scripts' digits and refuses 4300+ digits.

    Example:
        >>> whole_number(" 42 "), whole_number("9" * 5000) == HUGE, whole_number("\u0663"), whole_number("-1")
        (42, True, None, None)
    """
    digits = str(text or "").strip()
    if not (digits.isascii() and digits.isdigit()):
        return None
    return int(digits) if len(digits) <= DIGITS else HUGE


def told(number: int) -> str:
    """A `whole_number` as text: HUGE stands for more digits than were read."""
    return str(number) if number < HUGE else f"over {HUGE - 1}"


DEADLINE_ENV = "ASCEND_BUILD_DEADLINE"


class Cut(Exception):
    """A read stopped early: past the limit (``too_large``) or past the deadline."""

    def __init__(self, message: str, too_large: bool):
        super().__init__(message)
        self.too_large = too_large


class DeadlinePassed(UserError):
    """The whole command's deadline passed (`command_deadline`): whatever it was waiting on is given up."""

    def __init__(self, seconds: float, waiting_on: str) -> None:
        super().__init__(f"the command's deadline of {seconds:g} s passed, waiting on {waiting_on}", exit_code=1,
                         fix="check that the server answers promptly, or allow more time with --deadline SECONDS "
                             f"(or {DEADLINE_ENV}=SECONDS; 0 for none)")


_command: Optional[Tuple[float, float]] = None  # (monotonic instant it ends, its seconds) of the running command


@contextlib.contextmanager
def command_deadline(seconds: Optional[float]) -> Iterator[None]:
    """Within this block, every answer read here and every wait on `remaining` ends by ``seconds``
    from now (None or 0: no deadline but each answer's own); DeadlinePassed past it."""
    global _command
    outer = _command
    _command = (time.monotonic() + seconds, seconds) if seconds else None
    try:
        yield
    finally:
        _command = outer


def command_limit() -> Optional[Tuple[float, float]]:
    """(the monotonic instant it ends, its seconds) of the running command's deadline; None without one."""
    return _command


def check_deadline(waiting_on: str) -> None:
    """DeadlinePassed when the command's deadline has passed."""
    if _command is not None and time.monotonic() >= _command[0]:
        raise DeadlinePassed(_command[1], waiting_on)


def remaining(cap: float, waiting_on: str) -> float:
    """Seconds a wait on ``waiting_on`` may take: ``cap``, or less when the command's deadline is
    nearer; DeadlinePassed when none is left."""
    check_deadline(waiting_on)
    return cap if _command is None else min(cap, _command[0] - time.monotonic())


def chunks(response: Any, *, limit: int, deadline: float) -> Iterator[bytes]:
    """The answer's bytes as they arrive (``read1``: what is there, not a full chunk's wait);
    raises Cut past ``limit`` bytes or past ``deadline`` (a ``time.monotonic()`` instant), and
    DeadlinePassed past the command's."""
    size = 0
    read = response.read1 if hasattr(response, "read1") else response.read
    waiting_on = getattr(response, "url", None) or "an answer"
    while True:
        check_deadline(waiting_on)
        if time.monotonic() > deadline:
            raise Cut("not there within the deadline", too_large=False)
        chunk = read(min(CHUNK, limit + 1 - size))
        if not chunk:
            return
        size += len(chunk)
        if size > limit:
            raise Cut(f"more than {limit} bytes", too_large=True)
        yield chunk


class Watch:
    """Shuts every socket registered with it at ``until`` (a monotonic instant): a read blocked
    on it, or made after, returns at once. Each socket is watched through a duplicate of its
    descriptor, so the watch outlives TLS wrapping it (which detaches the original object)."""

    def __init__(self, until: float) -> None:
        self.fired = False
        self._sockets: List[socket.socket] = []
        self._lock = threading.Lock()
        # a deadline past threading's longest wait (about 292 years) fires never, not with an OverflowError
        self._timer = threading.Timer(min(max(0.0, until - time.monotonic()), threading.TIMEOUT_MAX), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def add(self, sock: socket.socket) -> None:
        """Watch ``sock`` (a connected socket) too; shut at once when the watch has fired."""
        with self._lock:
            self._sockets.append(sock.dup())
            if self.fired:
                self._shut(self._sockets[-1])

    def watched(self, connect: Any) -> Any:
        """``connect`` (socket.create_connection) with its socket registered as soon as it is connected."""
        def connect_watched(*args: Any, **kwargs: Any) -> socket.socket:
            sock = connect(*args, **kwargs)
            self.add(sock)
            return sock
        return connect_watched

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._sockets:
                self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by the peer

    def stop(self) -> None:
        self._timer.cancel()
        with self._lock:
            for sock in self._sockets:
                sock.close()
            self._sockets.clear()


def _watched_connection(kind: Any, watch: Watch) -> Any:
    """A factory of ``kind`` (an http.client connection class) whose socket ``watch`` shuts at its deadline."""
    def connection(host: str, **options: Any) -> http.client.HTTPConnection:
        made = kind(host, **options)
        made._create_connection = watch.watched(made._create_connection)  # the plain TCP connect, before any TLS
        return made
    return connection


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, watch: Watch) -> None:
        super().__init__()
        self.watch = watch

    def http_open(self, req: Any) -> Any:
        return self.do_open(_watched_connection(http.client.HTTPConnection, self.watch), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, watch: Watch) -> None:
        super().__init__()
        self.watch = watch

    def https_open(self, req: Any) -> Any:  # context None: http.client's default, certificates checked
        return self.do_open(_watched_connection(http.client.HTTPSConnection, self.watch), req)


_EARLY = 0.005  # seconds: how early a socket's timeout may end against time.monotonic()


@contextlib.contextmanager
def opened(request: Any, *, timeout: float, deadline: float,
           handlers: Sequence[urllib.request.BaseHandler] = ()) -> Iterator[Any]:
    """``urllib``'s answer to ``request`` (a Request or URL; ``handlers`` added to the opener),
    all of it, from the connection to the last byte, bounded by ``deadline`` (a monotonic
    instant): Cut past it, DeadlinePassed past the command's when that comes first.
    ``timeout`` still bounds each read. Read the body with `chunks`."""
    url = request.full_url if isinstance(request, urllib.request.Request) else str(request)
    check_deadline(url)
    until = deadline if _command is None else min(deadline, _command[0])
    if time.monotonic() >= until:
        raise Cut("not there within the deadline", too_large=False)
    watch = Watch(until)
    opener = urllib.request.build_opener(*handlers, _HTTPHandler(watch), _HTTPSHandler(watch))
    late = False
    try:
        try:
            with opener.open(request, timeout=max(0.001, min(timeout, until - time.monotonic()))) as response:
                yield response
        except (OSError, http.client.HTTPException):
            # the read timeout is cut to the deadline too, and on a busy machine it can end the read
            # before the watch's timer thread has run: an error at the deadline is the deadline's
            late = time.monotonic() >= until - _EARLY
            if not (watch.fired or late):
                raise
        if watch.fired or late:  # shut at the deadline: whatever was read may be short
            check_deadline(url)
            raise Cut("not there within the deadline", too_large=False)
    finally:
        watch.stop()


class NotRegular(OSError):
    """A path that is no regular file (a FIFO, a device, a folder): reading it could block or never end."""


def read_file(path: Any, limit: int) -> bytes:
    """At most ``limit`` bytes of the regular file ``path``; raises NotRegular for anything else
    (opened without blocking, so a FIFO with no writer is refused, not waited on) and OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(errno.EINVAL, "not a regular file", str(path))
        with os.fdopen(fd, "rb", closefd=False) as stream:
            return stream.read(limit)
    finally:
        os.close(fd)


def read_text(path: Any, limit: int, what: str, fix: str) -> str:
    """The UTF-8 text of the regular file ``path`` (``what`` names it in messages: ``--nodes``), at
    most ``limit`` bytes; a UserError for a FIFO, a device or a folder (refused, never waited on or
    read without end), a larger file, bytes that are not UTF-8, or a failed read. ``fix`` says how to
    write the file right.

    Example:
        >>> try:
        ...     read_text("/dev/zero", 10, "--nodes", "write it with kubectl")
        ... except UserError as e:
        ...     print(e.message)
        --nodes /dev/zero is not a regular file (a FIFO, a device or a folder): it is not read
    """
    try:
        data = read_file(path, limit + 1)
    except NotRegular:
        raise UserError(f"{what} {path} is not a regular file (a FIFO, a device or a folder): it is not read",
                        fix=fix) from None
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot read it ({exc.strerror or exc})", fix=fix) from None
    if len(data) > limit:
        raise UserError(f"{what} {path} is over {limit} bytes: no such file is that large", fix=fix)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path} is not UTF-8 text (byte {exc.start})", fix=fix) from None
