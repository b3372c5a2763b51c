"""The `ascend-build` command line. It only parses, calls and prints.

Exit codes: 0 clean, 1 findings with errors or failed work, 2 usage errors. With --json, standard
output holds JSON on every path (`json_errors`).
"""

from __future__ import annotations

import sys

import typer

from builder.cli import build, catalogue, distribution, init, k8s, k8s_prepull, kb, node, trust  # noqa: F401  (importing registers their commands)
from builder.cli import json_errors, safe_output
from builder.cli.app import app
from builder.errors import UserError

__all__ = ["app", "main"]


def main() -> None:
    """Entry point: run the app, turning every UserError into a message and its exit code.
    All it prints goes through `safe_output` (no terminal sequence, no forged CI annotation);
    with --json, a failure that printed no JSON prints its error as JSON (`json_errors`)."""
    safe_output.install()
    run = json_errors.Run(sys.argv[1:])
    try:
        app()
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        run.ended(exc.exit_code, exc)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        run.ended(130)
        sys.exit(130)
    except SystemExit as done:
        run.ended(done.code)
        raise


if __name__ == "__main__":
    main()
