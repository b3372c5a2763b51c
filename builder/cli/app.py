"""What every command module shares: the typer apps, the common options, Ctrl-C handling.

The commands live in ``build.py`` (matrix -> images), ``kb.py`` (the knowledge base) and
``node.py`` (a cluster node), as in the README's two command blocks.
"""

from __future__ import annotations

import contextlib
import platform

import typer

from builder.vocabulary import normalize_arch

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Validated Docker images for training on Huawei Ascend NPUs.")
kb_app = typer.Typer(no_args_is_help=True, help="Query the knowledge base of Ascend releases.")
app.add_typer(kb_app, name="kb")
releases_app = typer.Typer(no_args_is_help=True, help="Watch the package index for torch_npu releases.")
app.add_typer(releases_app, name="releases")

JsonOpt = typer.Option(False, "--json", help="Print JSON instead of text.")


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
