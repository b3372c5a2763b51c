"""What every command module shares: the typer apps, the common options, Ctrl-C handling.

The commands live in ``build.py`` (matrix -> images), ``kb.py`` (the knowledge base) and
``node.py`` (a cluster node), as in the README's two command blocks.
"""

from __future__ import annotations

import contextlib
import platform
from typing import Iterator, Optional

import typer

from builder import bounded
from builder.vocabulary import normalize_arch

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Validated Docker images for training on Huawei Ascend NPUs.")
kb_app = typer.Typer(help="Query the knowledge base of Ascend releases.")  # alone: what it knows (cli/kb.py)
app.add_typer(kb_app, name="kb")
releases_app = typer.Typer(no_args_is_help=True, help="Watch the package index for torch_npu releases.")
app.add_typer(releases_app, name="releases")

JsonOpt = typer.Option(False, "--json", help="Print JSON instead of text.")

# The whole of a networked command: every answer it reads and every helper it waits on.
NETWORK_DEADLINE = 900.0      # pull, index, releases: a few hundred small answers at most
LOCK_DEADLINE = 6 * 3600.0    # lock: uv for every cell, and CANN installers of GBs hashed over the network
DeadlineOpt = typer.Option(None, "--deadline", envvar=bounded.DEADLINE_ENV, min=0, metavar="SECONDS",
                           help=f"Seconds the whole command may take, all it reads from the network included "
                                f"(default {NETWORK_DEADLINE:g}; lock {LOCK_DEADLINE:g}; 0: no limit but each answer's own).")


@contextlib.contextmanager
def within(deadline: Optional[float], default: float = NETWORK_DEADLINE) -> Iterator[None]:
    """Run the command's body within ``deadline`` seconds (``--deadline``), else ``default``."""
    with bounded.command_deadline(default if deadline is None else deadline):
        yield


@contextlib.contextmanager
def interruptible():
    """Ctrl-C says "interrupted" and exits 130. Typer turns a KeyboardInterrupt into a
    silent exit 130 before `main` could see it, so long-running commands catch it here."""
    try:
        yield
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        raise typer.Exit(130) from None


def host_arch() -> str:
    """This machine's arch in the matrix's words (``x86_64``, ``aarch64``)."""
    return normalize_arch(platform.machine()) or platform.machine()
