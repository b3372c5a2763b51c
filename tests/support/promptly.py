"""A call that must not wait on a FIFO, held to a few seconds: when the code under test breaks
and opens the FIFO (which has no other end), the test fails in seconds, saying so, instead of
hanging until pytest's per-test timeout.

``promptly(call, fifo)`` runs ``call`` in a thread and gives back what it returned or raised;
``refused_promptly(call, fifo)`` also requires that to be a `UserError`. A call still waiting
after ``seconds`` is released (the FIFO opened from the other end, without blocking, so its open
returns) and the test fails.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

import pytest

from builder.errors import UserError


def _release(fifo: Path) -> None:
    """Let a call blocked opening ``fifo`` go on: a reader waits for a writer, a writer for a reader."""
    for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):
        try:
            os.close(os.open(fifo, flags))
        except OSError:  # ENXIO: no reader waits; the other way round
            pass


def promptly(call: Callable[[], Any], fifo: Path, seconds: float = 10.0) -> Tuple[Any, Optional[BaseException]]:
    """(what ``call()`` returned, what it raised): one of them None. Fails the test when the call
    is still running after ``seconds``: it waited on ``fifo``."""
    done: List[Tuple[Any, Optional[BaseException]]] = []

    def attempt() -> None:
        try:
            done.append((call(), None))
        except BaseException as exc:  # the test looks at what it was
            done.append((None, exc))
    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        _release(fifo)
        worker.join(seconds)
        pytest.fail(f"the call waited on the FIFO {fifo} instead of refusing it (still running after {seconds:g} s)")
    return done[0]


def refused_promptly(call: Callable[[], Any], fifo: Path, seconds: float = 10.0) -> UserError:
    """The `UserError` ``call()`` raised, without waiting on ``fifo`` (see `promptly`)."""
    value, raised = promptly(call, fifo, seconds)
    assert isinstance(raised, UserError), (value, raised)
    return raised
