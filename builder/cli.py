"""The `ascend-build` command line. It only parses, calls and prints.

Exit codes: 0 clean, 1 findings with errors or failed work, 2 usage errors.
"""

from __future__ import annotations

import contextlib
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
releases_app = typer.Typer(no_args_is_help=True, help="Watch the package index for torch_npu releases.")
app.add_typer(releases_app, name="releases")

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


def _load(path: Optional[Path], strict: bool) -> matrix.Matrix:
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
    """Render each cell into dockerfiles/<cell>/ (Dockerfile, CPU twin, manifest, env spec); the smoke program
    every image carries is written once, to dockerfiles/_shared/.

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


@contextlib.contextmanager
def _interruptible():
    """Ctrl-C says "interrupted" and exits 130. Typer turns a KeyboardInterrupt into a
    silent exit 130 before `main` could see it, so long-running commands catch it here."""
    try:
        yield
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        raise typer.Exit(130) from None


@contextlib.contextmanager
def _progress(quiet: bool):
    """Where progress lines go: a live status line on a terminal (each cell's current
    step, the finished ones kept above it), plain lines otherwise (CI logs, --quiet)."""
    if quiet or not sys.stderr.isatty():
        yield lambda line: typer.echo(line, err=True)
        return
    from rich.console import Console

    console = Console(stderr=True)
    with console.status("starting") as status:
        def say(line: str) -> None:
            if "] step " in line:
                status.update(line)
            else:
                console.print(line, markup=False, highlight=False)
        yield say


def _host_arch() -> str:
    import platform

    from builder.host import normalize_arch

    return normalize_arch(platform.machine()) or platform.machine()


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
    cells = matrix.select(loaded.cells, cann=cann, chip=chip, arch=arch or _host_arch(), cell_id=cell,
                          arch_defaulted=arch is None)
    has_npu = bool(devices.npu_devices()) and not no_device
    variants = pipeline.variants_for(variant, has_npu)
    if not has_npu and "npu" not in variants:
        typer.echo("note: this host has no NPU, so only the CPU twins are built and validated here; "
                   "the NPU images need an NPU host (or --variant npu for -candidate images).", err=True)
    if ca_bundle is None and DEFAULT_CA.is_file():
        ca_bundle = DEFAULT_CA
    options = pipeline.Options(variants=variants, state_dir=state_dir, no_device=no_device, devices=devices_opt,
                               push=push, base_image=base_image, wheelhouse=wheelhouse, ca_bundle=ca_bundle,
                               quiet=quiet)
    with _interruptible(), _progress(quiet) as say:
        outcomes = pipeline.run(cells, options, Engine.connect(), say)
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
    with _interruptible():
        outcome = pipeline.promote(ref, options, Engine.connect(), lambda line: typer.echo(line, err=True))
    _summary([outcome], as_json)
    if not outcome.ok:
        raise typer.Exit(1)


def _summary(outcomes, as_json: bool) -> None:
    """The end-of-run table: cell, image id, tiers, tags, digest, durations."""
    for o in outcomes:
        if not o.ok:
            typer.echo(f"{o.cell} ({o.variant}): {o.status}: {o.message}", err=True)
            if o.log:
                typer.echo(f"  build log: {o.log}" + (f"\n  report: {o.report}" if o.report else ""), err=True)
    if as_json:
        from dataclasses import asdict

        typer.echo(json.dumps([asdict(o) for o in outcomes], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="ascend-build image")
    for column in ("image", "status", "image id", "tiers", "tags", "digest", "build s", "smoke s"):
        table.add_column(column, overflow="fold")
    for o in outcomes:
        tiers = " ".join(f"{t.get('name')}:{t.get('status')}" for t in o.tiers) or "-"
        table.add_row(f"{o.cell}{'-cpu' if o.variant == 'cpu' else ''}", o.status, o.image_id[7:19] or "-", tiers,
                      "\n".join(o.tags) or "-", "\n".join(o.digests.values()) or "-",
                      f"{o.build_seconds:.1f}", f"{o.smoke_seconds:.1f}")
    Console(width=200).print(table)


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


RootOpt = typer.Option(Path("/"), "--root", help="Read the host's files under this folder (a fixture tree).")


@app.command()
def host(root: Path = RootOpt, as_json: bool = JsonOpt) -> None:
    """What this node has: arch, driver, firmware and their accepted ranges, chip, devices, CANN.

    Example: ascend-build host --json
    """
    from builder import host as host_probe

    info = host_probe.probe(root=root, run_npu_smi=True)
    typer.echo(json.dumps(info.to_dict(), indent=2) if as_json else host_probe.format_host(info))


@app.command()
def pull(
    cann: Optional[str] = typer.Option(None, "--cann", help="The CANN release wanted, e.g. 8.0.RC3."),
    registry: str = typer.Option(..., "--registry", help="HOST[:PORT][/REPOSITORY] to pull from."),
    torch: Optional[str] = typer.Option(None, "--torch", help="Pin torch, e.g. 2.4.0 (default: the newest that fits)."),
    python: Optional[str] = typer.Option(None, "--python", help="Pin Python, e.g. 3.10."),
    root: Path = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Pull the validated image that fits this node's arch, chip, driver and firmware, by digest.

    Example: ascend-build pull --cann 8.0.RC3 --registry registry.example:5000
    """
    from builder import host as host_probe
    from builder import pull as chooser
    from builder.engine import Engine
    from builder.registry import Registry

    info = host_probe.probe(root=root, run_npu_smi=True)
    node = chooser.Node(arch=info.arch or _host_arch(), chip=info.chip, driver=info.driver, firmware=info.firmware)
    wanted = chooser.Wanted(cann=cann, torch=torch, python=python)
    address, repository = chooser.split_registry(registry, matrix.DEFAULT_IMAGE)
    reg = Registry(address)
    best, rejected = chooser.choose(chooser.listing(reg, repository, node.arch), node, wanted)
    if best is None:
        typer.echo(f"no image in {address}/{repository} fits this node "
                   f"(arch {node.arch}, chip {node.chip or 'unknown'}, driver {node.driver or 'unknown'}, "
                   f"firmware {node.firmware or 'unknown'}):", err=True)
        typer.echo(chooser.format_rejections(rejected) or "  (no tags)", err=True)
        for tip in chooser.suggestions(rejected, node, wanted):
            typer.echo(f"  fix: {tip}", err=True)
        raise typer.Exit(1)
    ref, moved = chooser.fetch(Engine.connect(), reg, repository, best, node.arch)
    if as_json:
        typer.echo(json.dumps({"ref": ref, "tag": best.tag, "digest": best.digest, "labels": best.labels}, indent=2))
    else:
        typer.echo(f"pulled {ref}\n  tag {best.tag}\n  run it: ascend-build run {ref}")
    if moved:
        typer.echo(f"note: tag {best.tag} moved to {moved} after it was chosen; pulled the validated {best.digest}",
                   err=True)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    ctx: typer.Context,
    image_ref: str = typer.Argument(..., metavar="IMAGE", help="The image to start."),
    devices_opt: Optional[str] = typer.Option(None, "--devices", help="NPU devices to pass in, e.g. 0,1 (default: all)."),
    print_only: bool = typer.Option(False, "--print", help="Print the docker run line instead of running it."),
    force: bool = typer.Option(False, "--force", help="Start even if the image needs a newer driver than this node's."),
    root: Path = RootOpt,
) -> None:
    """Start IMAGE with the NPU devices and driver mounts of this node (`-- CMD...` after the image).

    Example: ascend-build run --devices 0,1 --print ascend-build/pytorch:TAG -- python train.py
    """
    from builder import devices, versions
    from builder import host as host_probe
    from builder.engine import Engine

    chosen = devices.choose(devices.npu_devices(root), devices_opt)
    argv = devices.run_argv(image_ref, chosen, list(ctx.args), root=root, interactive=sys.stdin.isatty() and not print_only)
    if not chosen:
        typer.echo("note: this host has no /dev/davinci* devices to pass in", err=True)
    engine = Engine.connect()
    labels = engine.labels(image_ref) if engine.image_id(image_ref) else {}
    need = labels.get("io.ascend-build.min-driver")
    if not labels:
        typer.echo(f"note: {image_ref} is not a local image built by ascend-build; its driver needs are unchecked",
                   err=True)
    elif need and not force:
        driver = host_probe.probe(root=root, run_npu_smi=False).driver
        if not driver or versions.hdk(driver) < versions.hdk(need):
            raise UserError(f"{image_ref} needs NPU driver {need} or newer; this node has {driver or 'no driver'}",
                            fix="upgrade the node's driver and firmware, pick an image that fits "
                                "(`ascend-build pull`), or pass --force", exit_code=1)
    if print_only:
        typer.echo(devices.format_argv(argv))
        return
    engine.exec_cli(argv)


@app.command()
def doctor(
    image_ref: Optional[str] = typer.Option(None, "--image", help="Also check inside this image."),
    root: Path = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The field guide's pre-flight checklist: OK / WARN / FAIL with a fix each.

    Example: ascend-build doctor --image ascend-build/pytorch:TAG
    """
    from builder import doctor as checklist

    checks = checklist.run_doctor(image=image_ref, root=root)
    typer.echo(json.dumps(checklist.checks_to_dicts(checks), indent=2) if as_json else checklist.format_checks(checks))
    raise typer.Exit(checklist.exit_code(checks))


@app.command()
def explain(
    text: str = typer.Argument(..., help="The error text, quoted."),
    image_ref: Optional[str] = typer.Option(None, "--image", help="The image that failed: its labels name the versions."),
    root: Path = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Map an Ascend error message to its cause and fix, with this node's (and the image's) versions filled in.

    Example: ascend-build explain "libascend_hal.so: cannot open shared object file" --image IMAGE
    """
    from builder import explain as table
    from builder import host as host_probe

    labels = None
    if image_ref:
        from builder.engine import Engine

        labels = Engine.connect().labels(image_ref)
    matches = table.explain(text, host=host_probe.probe(root=root, run_npu_smi=False), labels=labels)
    if not matches:
        typer.echo("no known Ascend error in that text", err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps([m.to_dict() for m in matches], indent=2) if as_json else table.format_explanations(matches))


@app.command()
def record(
    output_dir: Path = typer.Argument(..., help="The training run's output folder."),
    sets: List[str] = typer.Option([], "--set", help="Your own key=value, e.g. --set seq_len=4096 (repeatable)."),
) -> None:
    """Write the run record (versions, driver, firmware, chip, image) next to the weights.

    Example: ascend-build record out/ --set train_mode=lora --set seq_len=4096
    """
    from builder import record as run_record

    path, data = run_record.run_record(output_dir, pairs=sets)
    typer.echo(run_record.format_record(path, data))


@app.command("ci-matrix")
def ci_matrix_cmd(
    changed_since: Optional[str] = typer.Option(None, "--changed-since", metavar="REF",
                                                help="Only cells whose rendered context differs from REF's."),
    runners: Optional[Path] = typer.Option(None, "--runners", help="YAML/JSON file of runner labels."),
    matrix_path: Optional[Path] = MatrixOpt,
) -> None:
    """Print the GitHub Actions strategy.matrix of the cells to (re)build.

    Example: ascend-build ci-matrix --changed-since origin/main
    """
    from builder import ci_matrix

    loaded = _load(matrix_path, strict=False)
    table = ci_matrix.load_runners(runners) if runners else None
    rows = ci_matrix.entries(loaded.cells, render.render_all(loaded.cells), since=changed_since,
                             repo=Path.cwd(), out_dir="dockerfiles", runners=table)
    typer.echo(ci_matrix.to_json(ci_matrix.github_matrix(rows)))


@releases_app.command("check")
def releases_check(
    index_url: Optional[str] = typer.Option(None, "--index-url",
                                            help="Simple-API index (default: $ASCEND_BUILD_INDEX_URL, else pip's)."),
    write: bool = typer.Option(False, "--write", help="Add new releases to the knowledge base (CANN pairing unknown)."),
    propose: bool = typer.Option(False, "--propose", help="Draft matrix cells for them in matrix/proposed/."),
    as_json: bool = JsonOpt,
) -> None:
    """Find torch_npu releases the knowledge base does not know yet.

    Example: ascend-build releases check --write --propose
    """
    from builder import releases

    result = releases.check(index_url or releases.default_index_url())
    typer.echo(json.dumps(result.to_dict(), indent=2) if as_json else releases.format_check(result))
    if write:
        for path in releases.write(result):
            typer.echo(f"wrote {path}", err=True)
    if propose:
        text = releases.propose(result)
        typer.echo(f"proposed {text.count('- cann:')} cell(s) in {releases.default_proposal_path()}" if text
                   else "nothing to propose", err=True)


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
