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
DEFAULT_CA = Path("/etc/ssl/certs/ca-certificates.crt")


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


def _select(cells: List[matrix.Cell], cann: Optional[str], chip: Optional[str], arch: Optional[str],
            cell_id: Optional[str]) -> List[matrix.Cell]:
    from builder import versions

    chosen = [c for c in cells
              if (not cann or versions.cann(c.cann) == versions.cann(cann))
              and (not chip or c.chip == chip.lower()) and (not arch or c.arch == arch)
              and (not cell_id or c.id == cell_id)]
    if not chosen:
        raise UserError("no cell of the matrix matches the selection",
                        fix="check --cann/--chip/--arch/--cell against `ascend-build list`", exit_code=1)
    return chosen


def _host_arch() -> str:
    import platform

    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


@app.command()
def image(
    cann: Optional[str] = typer.Option(None, "--cann", help="Only cells of this CANN release, e.g. 7.0.RC1."),
    chip: Optional[str] = typer.Option(None, "--chip", help="Only cells for this chip, e.g. 910b."),
    arch: Optional[str] = typer.Option(None, "--arch", help="Only this arch (default: this host's)."),
    cell: Optional[str] = typer.Option(None, "--cell", help="Only the cell with this id."),
    variant: str = typer.Option("auto", "--variant",
                                help="npu, cpu (the CPU twin), both, or auto: both on an NPU host, cpu elsewhere."),
    no_device: bool = typer.Option(False, "--no-device", help="Run only the static tiers; NPU images get a -candidate tag."),
    devices_opt: Optional[str] = typer.Option(None, "--devices", help="NPU devices for the smoke test, e.g. 0,1."),
    push: Optional[str] = typer.Option(None, "--push", help="Push sealed images to this registry, e.g. 127.0.0.1:5000."),
    base_image: Optional[str] = typer.Option(None, "--base-image", help="Override the OS base image of every cell."),
    wheelhouse: Optional[Path] = typer.Option(None, "--wheelhouse", help="Folder of wheels preferred over the index."),
    ca_bundle: Optional[Path] = typer.Option(None, "--ca-bundle",
                                             help="CA bundle for TLS-intercepting proxies (default: the host's)."),
    state_dir: Path = typer.Option(Path(".state"), "--state-dir", help="Logs, reports and contexts go here."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No per-step progress lines."),
    as_json: bool = JsonOpt,
    matrix_path: Optional[Path] = MatrixOpt,
) -> None:
    """Build, smoke-test, and tag (and push) the images of the selected cells.

    Only an image whose smoke test passed gets a release tag.

    Example: ascend-build image --cann 7.0.RC1 --push registry.example:5000
    """
    from builder import devices, pipeline
    from builder.engine import Engine

    loaded = _load(matrix_path, strict=False)
    host_arch = _host_arch()
    cells = _select(loaded.cells, cann, chip, arch or host_arch, cell)
    has_npu = bool(devices.npu_devices()) and not no_device
    variants = {"auto": ("npu", "cpu") if has_npu else ("cpu",), "both": ("npu", "cpu"),
                "npu": ("npu",), "cpu": ("cpu",)}.get(variant)
    if variants is None:
        raise UserError(f"--variant {variant!r} is not one of auto, npu, cpu, both", fix="pick one of them")
    if not has_npu and "npu" not in variants:
        typer.echo("note: this host has no NPU, so only the CPU twins are built and validated here; "
                   "the NPU images need an NPU host (or --variant npu for -candidate images).", err=True)
    if ca_bundle is None and DEFAULT_CA.is_file():
        ca_bundle = DEFAULT_CA
    options = pipeline.Options(variants=variants, state_dir=state_dir, no_device=no_device, devices=devices_opt,
                               push=push, base_image=base_image, wheelhouse=wheelhouse, ca_bundle=ca_bundle,
                               quiet=quiet)
    outcomes = pipeline.run(cells, options, Engine.connect(), lambda line: typer.echo(line, err=True))
    _summary(outcomes, as_json)
    if not all(o.ok for o in outcomes):
        raise typer.Exit(1)


@app.command()
def promote(
    ref: str = typer.Argument(..., help="A -candidate image, e.g. ascend-build/pytorch:<cell>-candidate."),
    devices_opt: Optional[str] = typer.Option(None, "--devices", help="NPU devices to use, e.g. 0,1."),
    push: Optional[str] = typer.Option(None, "--push", help="Push the sealed image to this registry."),
    state_dir: Path = typer.Option(Path(".state"), "--state-dir"),
    as_json: bool = JsonOpt,
) -> None:
    """Run the device tiers of a -candidate image on this NPU host; seal and tag it if they pass.

    Example: ascend-build promote ascend-build/pytorch:cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64-candidate
    """
    from builder import pipeline
    from builder.engine import Engine

    options = pipeline.Options(state_dir=state_dir, devices=devices_opt, push=push)
    outcome = pipeline.promote(ref, options, Engine.connect(), lambda line: typer.echo(line, err=True))
    _summary([outcome], as_json)
    if not outcome.ok:
        raise typer.Exit(1)


def _summary(outcomes, as_json: bool) -> None:
    """The end-of-run table: cell, image id, tiers, tags, digest, durations."""
    if as_json:
        from dataclasses import asdict

        typer.echo(json.dumps([asdict(o) for o in outcomes], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="ascend-build image")
    for column in ("image", "status", "image id", "tiers", "tags", "digest", "build s", "smoke s"):
        table.add_column(column)
    for o in outcomes:
        tiers = " ".join(f"{t.get('name')}:{t.get('status')}" for t in o.tiers) or "-"
        table.add_row(f"{o.cell}{'-cpu' if o.variant == 'cpu' else ''}", o.status, o.image_id[7:19] or "-", tiers,
                      "\n".join(o.tags) or "-", "\n".join(o.digests.values()) or "-",
                      f"{o.build_seconds:.1f}", f"{o.smoke_seconds:.1f}")
    Console(width=200).print(table)
    for o in outcomes:
        if not o.ok:
            typer.echo(f"{o.cell} ({o.variant}): {o.status}: {o.message}", err=True)
            if o.log:
                typer.echo(f"  build log: {o.log}" + (f"\n  report: {o.report}" if o.report else ""), err=True)


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
