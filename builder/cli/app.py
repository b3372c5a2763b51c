"""What every command module shares: the typer apps, the common options, Ctrl-C handling.

The commands live in ``build.py`` (matrix -> images), ``kb.py`` (the knowledge base),
``node.py`` (a cluster node), ``k8s.py`` (manifests) and ``trust.py`` (keys, verify, policy);
docs/reference/cli.md is generated from them.
"""

from __future__ import annotations

import contextlib
import platform
import signal
from typing import Iterator, Optional

import typer

from builder import __version__, bounded
from builder.vocabulary import normalize_arch

# add_completion: typer's --install-completion and --show-completion (bash, zsh, fish, PowerShell)
app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                  help="Validated Docker images for training on Huawei Ascend NPUs.")


def _print_version(wanted: bool) -> None:
    if wanted:
        typer.echo(f"ascend-build {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                          help="Print the installed version of ascend-build and exit.")) -> None:
    """Validated Docker images for training on Huawei Ascend NPUs."""


kb_app = typer.Typer(help="Query the knowledge base of Ascend releases.")  # alone: what it knows (cli/kb.py)
app.add_typer(kb_app, name="kb")
releases_app = typer.Typer(no_args_is_help=True, help="Watch the package index for torch_npu releases.")
app.add_typer(releases_app, name="releases")

JsonOpt = typer.Option(False, "--json", help="Print JSON instead of text, when it fails too.")

# The whole of a networked command: every answer it reads and every helper it waits on.
NETWORK_DEADLINE = 900.0      # pull, index, releases: a few hundred small answers at most
LOCK_DEADLINE = 6 * 3600.0    # lock: uv for every cell, and CANN installers of GBs hashed over the network
DeadlineOpt = typer.Option(None, "--deadline", envvar=bounded.DEADLINE_ENV, min=0, metavar="SECONDS",
                           help=f"Seconds the whole command may take, all it reads from the network included "
                                f"(default {NETWORK_DEADLINE:g}; lock {LOCK_DEADLINE:g}; 0: no limit but each answer's own).")

PushDeadlineOpt = typer.Option(900.0, "--push-deadline", min=0, metavar="SECONDS",
                               help="Seconds each image's push through Docker Engine, its signed statements and each "
                                    "index may take (0: no limit but the engine client's 300 s without progress).")


@contextlib.contextmanager
def within(deadline: Optional[float], default: float = NETWORK_DEADLINE) -> Iterator[None]:
    """Run the command's body within ``deadline`` seconds (``--deadline``), else ``default``."""
    with bounded.command_deadline(default if deadline is None else deadline):
        yield


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI job cancelled, ``docker stop``, systemd): stops the run as Ctrl-C does,
    through every cleanup a ``KeyboardInterrupt`` runs (the build cancelled, the smoke
    container removed, half-set tags removed), and exits 143 instead of 130."""


def _terminate(signum, frame) -> None:
    raise Terminated()


@contextlib.contextmanager
def interruptible():
    """Ctrl-C (SIGINT) or SIGTERM: one line, ``interrupted by SIGINT: <what the run says it
    published and did not>``, and exit 130 (143 for SIGTERM). Typer turns a KeyboardInterrupt
    into a silent exit 130 before `main` could see it, so long-running commands catch it here.

    A run started with SIGINT ignored (a background job of a non-interactive shell, ``cmd &``)
    takes it here all the same: the docker CLI a build runs un-ignores it (Go's signal.Notify),
    so a Ctrl-C to the group cancelled the build while this process went on to report it
    "failed" (exit 1) instead of interrupted."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    except KeyboardInterrupt as stop:
        name, code = ("SIGTERM", 143) if isinstance(stop, Terminated) else ("SIGINT", 130)
        told = str(stop)
        typer.echo(f"interrupted by {name}" + (f": {told}" if told else ""), err=True)
        raise typer.Exit(code) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def host_arch() -> str:
    """This machine's arch in the matrix's words (``x86_64``, ``aarch64``)."""
    return normalize_arch(platform.machine()) or platform.machine()
