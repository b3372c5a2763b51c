"""Ctrl-C stops a long-running command however it was started (`builder.cli.app.interruptible`)."""

from __future__ import annotations

import os
import signal

import pytest
import typer

from builder.cli.app import interruptible


@pytest.fixture
def sigint_ignored():
    """SIGINT ignored, as a background job of a non-interactive shell (`cmd &`) starts."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_run_started_with_sigint_ignored_is_interrupted_by_it_all_the_same(sigint_ignored, capsys):
    """The docker CLI a build runs un-ignores SIGINT: a Ctrl-C to the group cancelled the build
    while the run, ignoring it, reported the build failed (exit 1) instead of interrupted (130)."""
    with pytest.raises(typer.Exit) as stopped:
        with interruptible():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs between two bytecodes of this loop
                pass
            pytest.fail("SIGINT did not stop the run")
    assert stopped.value.exit_code == 130
    assert "interrupted by SIGINT" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # as it was, once the command is over


def test_sigterm_stops_a_run_with_143(capsys):
    with pytest.raises(typer.Exit) as stopped:
        with interruptible():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
            pytest.fail("SIGTERM did not stop the run")
    assert stopped.value.exit_code == 143 and "interrupted by SIGTERM" in capsys.readouterr().err
