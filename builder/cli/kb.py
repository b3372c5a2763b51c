"""The knowledge-base commands: ``kb torch-npu VERSION`` and ``kb cann [VERSION]``."""

from __future__ import annotations

import json
from typing import Optional

import typer

from builder import knowledge
from builder.cli.app import JsonOpt, kb_app


@kb_app.command("torch-npu")
def kb_torch_npu_command(version: str = typer.Argument(..., help="torch_npu version, e.g. 2.4.0"), as_json: bool = JsonOpt) -> None:
    """What the knowledge base knows of a torch_npu release.

    Example: ascend-build kb torch-npu 2.4.0
    """
    _print(knowledge.load().describe_torch_npu(version), as_json)


@kb_app.command("cann")
def kb_cann_command(version: Optional[str] = typer.Argument(None, help="CANN version, e.g. 8.0.RC3; none lists all"),
            as_json: bool = JsonOpt) -> None:
    """What the knowledge base knows of a CANN release (or the list of releases).

    Example: ascend-build kb cann 7.0.RC1
    """
    kb = knowledge.load()
    _print(kb.describe_cann(version) if version else {"cann_releases": kb.cann_releases()}, as_json)


def _print(data: dict, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    for key, value in data.items():
        if isinstance(value, dict):
            typer.echo(f"{key}:")
            for sub, item in value.items():
                typer.echo(f"  {sub}: {_flat(item)}")
        else:
            typer.echo(f"{key}: {_flat(value)}")


def _flat(value) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(_flat(v) for v in value) or "-"
    if isinstance(value, dict):
        return "; ".join(f"{k}={_flat(v)}" for k, v in value.items())
    return "unknown" if value is None else str(value)
