"""The `ascend-build` command line. It only parses, calls and prints.

Exit codes: 0 clean, 1 findings with errors or failed work, 2 usage errors.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from builder import checks, knowledge, matrix, render
from builder.errors import Finding, UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Validated Docker images for training on Huawei Ascend NPUs.")
kb_app = typer.Typer(no_args_is_help=True, help="Query the knowledge base of Ascend releases.")
app.add_typer(kb_app, name="kb")

REPO_ROOT = Path(__file__).resolve().parent.parent


def _default(name: str) -> Path:
    """``./matrix`` or ``./dockerfiles`` when present, else the ones shipped beside the package."""
    here = Path(name)
    return here if here.exists() else REPO_ROOT / name


MatrixOpt = typer.Option(None, "--matrix", "-m", help="Matrix file or folder of *.yaml (default: the shipped matrix/).")
StrictOpt = typer.Option(False, "--strict", help="Treat warnings as errors.")
JsonOpt = typer.Option(False, "--json", help="Print JSON instead of text.")


def _echo_findings(findings: List[Finding]) -> None:
    for finding in findings:
        typer.echo(str(finding), err=True)


def _load(path: Optional[Path], strict: bool, quiet_ok: bool = True) -> matrix.Matrix:
    """Load and check the matrix; exit 1 on errors (printing every finding)."""
    loaded = matrix.load(path or _default("matrix"))
    findings = loaded.findings + (checks.check(loaded.cells) if not loaded.findings else [])
    _echo_findings(findings)
    if checks.has_errors(findings, strict):
        errors = sum(f.severity == "error" or strict for f in findings)
        typer.echo(f"{errors} error(s) in {', '.join(loaded.files)}", err=True)
        raise typer.Exit(1)
    loaded.findings = findings
    return loaded


@app.command()
def validate(matrix_path: Optional[Path] = MatrixOpt, strict: bool = StrictOpt) -> None:
    """Check every cell against the knowledge base of real Ascend releases.

    Example: ascend-build validate --matrix matrix/default.yaml --strict
    """
    loaded = _load(matrix_path, strict)
    warnings = sum(f.severity == "warning" for f in loaded.findings)
    typer.echo(f"{len(loaded.cells)} cells valid ({warnings} warning(s)) in {', '.join(loaded.files)}")


@app.command("render")
def render_cmd(
    matrix_path: Optional[Path] = MatrixOpt,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder (default: dockerfiles/)."),
    check: bool = typer.Option(False, "--check", help="Write nothing; exit 1 if the output folder is stale."),
    strict: bool = StrictOpt,
) -> None:
    """Render each cell into dockerfiles/<cell>/ (Dockerfile, CPU twin, manifest, env spec, smoke program).

    Example: ascend-build render --check
    """
    loaded = _load(matrix_path, strict)
    out = out or _default("dockerfiles")
    rendered = render.render_all(loaded.cells)
    if check:
        stale = render.stale(rendered, out)
        for line in stale:
            typer.echo(f"stale: {line}", err=True)
        if stale:
            typer.echo(f"{out} is stale ({len(stale)} path(s)); run `ascend-build render` and commit the result", err=True)
            raise typer.Exit(1)
        typer.echo(f"{out} is up to date ({len(rendered)} cells)")
        return
    changed = render.write(rendered, out)
    typer.echo(f"rendered {len(rendered)} cells into {out} ({len(changed)} path(s) changed)")


@app.command("list")
def list_cmd(matrix_path: Optional[Path] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """List the cells with their image tag and content hash.

    Example: ascend-build list --json
    """
    loaded = _load(matrix_path, strict=False)
    rows = [{"id": c.id, "ref": c.ref, "cann": c.cann, "chip": c.chip, "arch": c.arch, "os": c.os,
             "python": c.python, "torch": c.torch, "torch_npu": c.torch_npu, "driver": c.driver,
             "firmware": c.firmware, "content_hash": render.content_hash(c)} for c in loaded.cells]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        typer.echo(f"{row['ref']}  {row['content_hash']}")


@kb_app.command("torch-npu")
def kb_torch_npu(version: str = typer.Argument(..., help="torch_npu version, e.g. 2.4.0"), as_json: bool = JsonOpt) -> None:
    """What the knowledge base knows of a torch_npu release.

    Example: ascend-build kb torch-npu 2.4.0
    """
    _print(knowledge.load().describe_torch_npu(version), as_json)


@kb_app.command("cann")
def kb_cann(version: Optional[str] = typer.Argument(None, help="CANN version, e.g. 8.0.RC3; none lists all"),
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


def main() -> None:
    """Entry point: run the app, turning every UserError into a message and its exit code."""
    try:
        app()
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
