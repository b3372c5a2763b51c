"""init: a team's project folder (builder/scaffold.py writes it)."""

from __future__ import annotations

from pathlib import Path

import typer

from builder import scaffold
from builder.cli import paths
from builder.cli.app import app


@app.command("init")
def init_command(
    folder: Path = typer.Argument(..., metavar="DIR", callback=paths.FOLDER,
                                  help="The project's folder, e.g. . (made if missing; its parent must exist)."),
) -> None:
    """Start a project in DIR: matrix/default.yaml (a starter matrix to edit), ascend-build/knowledge.yaml
    (your additions to the knowledge base), .gitignore (private keys, state) and a GitHub Actions workflow
    (.github/workflows/ascend-build.yml: validate, lock --check, render --check; CPU twins on main).

    Commands run in DIR find ./matrix/ by themselves. An existing file is never overwritten: when any
    of them is there, nothing is written.

    Example: ascend-build init team-images && cd team-images && ascend-build validate
    """
    for path in scaffold.init(folder):
        typer.echo(f"wrote {path}")
    typer.echo(f"next, in {folder}: ascend-build validate; ascend-build lock; ascend-build render; then commit "
               "matrix/, dockerfiles/ and the rest", err=True)
