"""builder.bounded: an answer is bounded from the connection on, and a command by its own deadline."""

from __future__ import annotations

import doctest
import socket
import threading
import time

import pytest

from tests.support import registry as hr
from builder import bounded


def test_module_examples_hold():
    assert doctest.testmod(bounded).failed == 0


@pytest.fixture
def silent_server():
    """A loopback TCP server that accepts and never sends a byte (no TLS handshake, no status line)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    listener.close()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_server_that_never_answers_is_cut_at_the_deadline_not_the_read_timeout(silent_server, scheme):
    """https: the watch holds the TCP socket from before the TLS handshake, which TLS wrapping detaches."""
    started = time.monotonic()
    with pytest.raises(bounded.Cut, match="not there within the deadline"):
        with bounded.opened(f"{scheme}://127.0.0.1:{silent_server}/", timeout=30, deadline=time.monotonic() + 1):
            pass
    assert time.monotonic() - started < 5  # not the 30 s of one read


def test_a_trickled_head_is_cut_at_the_deadline():
    server, port = hr.serve(hr.TrickleHead)
    started = time.monotonic()
    try:
        with pytest.raises(bounded.Cut):
            with bounded.opened(f"http://127.0.0.1:{port}/", timeout=5, deadline=time.monotonic() + 1) as answer:
                b"".join(bounded.chunks(answer, limit=100, deadline=time.monotonic() + 60))
    finally:
        server.shutdown()
    assert time.monotonic() - started < 5


def test_the_commands_deadline_wins_when_it_comes_first_and_names_what_was_awaited(silent_server):
    started = time.monotonic()
    with bounded.command_deadline(1), pytest.raises(bounded.DeadlinePassed) as late:
        with bounded.opened(f"http://127.0.0.1:{silent_server}/x", timeout=30, deadline=time.monotonic() + 60):
            pass
    assert time.monotonic() - started < 5
    assert late.value.message == f"the command's deadline of 1 s passed, waiting on http://127.0.0.1:{silent_server}/x"
    assert late.value.exit_code == 1 and "--deadline" in late.value.fix and "ASCEND_BUILD_DEADLINE" in late.value.fix
    with bounded.command_deadline(0.01), pytest.raises(bounded.DeadlinePassed):  # and nothing starts after it
        time.sleep(0.05)
        with bounded.opened(f"http://127.0.0.1:{silent_server}/y", timeout=30, deadline=time.monotonic() + 60):
            pass


def test_command_deadlines_nest_and_zero_means_none():
    assert bounded.remaining(7, "x") == 7
    with bounded.command_deadline(100):
        assert 99 < bounded.remaining(1000, "x") <= 100
        with bounded.command_deadline(0):
            assert bounded.remaining(1000, "x") == 1000
        assert bounded.remaining(1000, "x") <= 100
    assert bounded.remaining(7, "x") == 7


def test_command_limit_names_the_running_deadline():
    assert bounded.command_limit() is None
    with bounded.command_deadline(30):
        until, seconds = bounded.command_limit() or (0.0, 0.0)
        assert seconds == 30 and 29 < until - time.monotonic() <= 30
    assert bounded.command_limit() is None


def test_a_deadline_past_the_longest_wait_is_watched_without_a_crash(monkeypatch):
    """A deadline grown from a declared size (2**62 bytes) or none at all (--deadline 0) lies past
    threading's longest wait: the watch's timer thread must not die of an OverflowError."""
    import threading

    died = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(args.exc_type))
    watch = bounded.Watch(time.monotonic() + 2 ** 62)
    time.sleep(0.2)  # the timer thread has started its wait (or died)
    assert died == [] and not watch.fired
    watch.stop()
