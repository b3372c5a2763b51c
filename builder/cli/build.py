"""The build commands: validate, render, list, image, promote, ci-matrix, releases check.

Each parses its options, calls the build wing and prints; no logic of its own.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

import typer

from builder import commands, knowledge, project, writes
from builder.images import checks, lock, matrix, relock, render
from builder.cli import paths
from builder.cli.trust_key import TrustKeyOpt, trust_key as trust_key_of
from builder.cli.app import (LOCK_DEADLINE, DeadlineOpt, JsonOpt, PushDeadlineOpt, app, host_arch, interruptible,
                             releases_app, within)
from builder.errors import Finding, UserError
from builder.vocabulary import release_tag

DEFAULT_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def _default(name: str) -> Path:
    """The project's ``./matrix`` (a UserError naming `init` when the folder has none) or ``./dockerfiles``."""
    return project.default_matrix() if name == "matrix" else project.DOCKERFILES


MatrixOpt = typer.Option(None, "--matrix", "-m", callback=paths.FILE_OR_FOLDER, help="Matrix file or folder of *.yaml (default: ./matrix/, made by `ascend-build init`).")
StrictOpt = typer.Option(False, "--strict", help="Treat warnings as errors.")


def _echo_findings(findings: List[Finding]) -> None:
    for finding in findings:
        typer.echo(str(finding), err=True)


OutOpt = typer.Option(None, "--out", "-o", callback=paths.FOLDER, help="Folder of the rendered cells and their locks (default: dockerfiles/).")


def _is_default(matrix_path: Optional[Path]) -> bool:
    """Whether ``matrix_path`` is the project's default matrix folder (None, ./matrix, or a file directly in it)."""
    if matrix_path is None:
        return True
    if not project.MATRIX.exists():
        return False
    default = project.MATRIX.resolve()
    given = matrix_path.resolve()
    return given == default or (given.parent == default and not given.is_dir())


def _out_for(command: str, matrix_path: Optional[Path], out: Optional[Path], check: bool = False) -> Path:
    """The folder of the rendered cells and their locks for this run.

    ./dockerfiles/ belongs to the default matrix (./matrix/): another matrix without --out gets
    ``dockerfiles`` beside its file (or inside its folder); a command that writes there or
    builds from it (`render`, `lock` without ``check``, `image`) says so on stderr. `render` and
    `lock` writing another matrix's cells into the default matrix's dockerfiles/ (given, or derived
    there), or into those of the ascend-build checkout the package runs from, are refused, since
    rendering replaces every cell of the folder with the matrix's own.
    """
    default_out = project.DOCKERFILES
    if _is_default(matrix_path):
        return out or default_out
    assert matrix_path is not None
    chosen = out
    if chosen is None:
        chosen = (matrix_path if matrix_path.is_dir() else matrix_path.parent) / "dockerfiles"
    writes = command in ("render", "lock") and not check
    taken = [default_out] if project.MATRIX.exists() else []
    checkout = project.checkout()
    if checkout is not None:
        taken.append(checkout / "dockerfiles")
    if writes and chosen.resolve() in {folder.resolve() for folder in taken}:
        raise UserError(f"--matrix {matrix_path} is not the default matrix (./matrix/), and {chosen} holds the "
                        f"default matrix's cells: {command} would replace them with this matrix's; nothing was written",
                        fix="give --out a folder of your own, e.g. --out team-dockerfiles", exit_code=2)
    if out is None and (writes or command == "image"):
        typer.echo(f"note: --matrix {matrix_path} is not the default matrix (./matrix/): its rendered cells and locks "
                   f"are in {chosen}; give --out FOLDER to choose another", err=True)
    return chosen


def _with_flags(command: Callable) -> Callable:
    """Run ``command`` with its --matrix and --out remembered, so each fix line it prints
    suggests a command carrying them (`commands.suggest`); --out is decided first (`_out_for`)."""
    name = command.__name__.removesuffix("_command").replace("_", "-")

    @functools.wraps(command)
    def run(**options):
        given_out = options.get("out")
        if "out" in options:
            options["out"] = _out_for(name, options.get("matrix_path"), options["out"], bool(options.get("check")))
            if given_out is None and not _is_default(options.get("matrix_path")):
                given_out = options["out"]  # derived: the fix lines name it
        with commands.given(options.get("matrix_path"), given_out):
            return command(**options)
    return run


def _load(path: Optional[Path], strict: bool, locks_in: Optional[Path] = None,
          choose: Optional[Callable[[List[matrix.Cell]], List[matrix.Cell]]] = None) -> matrix.Matrix:
    """Load and check the matrix (and, with ``locks_in``, the cells' locks there); exit 1 on
    errors (printing every finding).

    With ``choose`` (a command working on some cells: `lock --cell`, `image`), only the chosen
    cells must pass: when other cells are refused, ``loaded.cells`` becomes the chosen ones,
    ``loaded.refused`` the others, named in one warning instead of stopping the run. Schema
    errors stop it still (`render` and a whole-matrix `lock` need every cell valid).
    """
    loaded = matrix.load(path or _default("matrix"))
    schema_ok = not checks.has_errors(loaded.findings)
    findings = loaded.findings + (checks.check(loaded.cells) if schema_ok else [])
    if choose is not None and schema_ok and checks.has_errors(findings):
        chosen = choose(loaded.cells)
        picked = {id(c) for c in chosen}
        refused = [c for c in checks.refused(loaded.cells) if id(c) not in picked]
        findings = loaded.findings + checks.check(chosen, others=[c for c in loaded.cells if id(c) not in picked])
        if refused and not checks.has_errors(findings, strict):
            typer.echo(f"warning: {len(refused)} other cell(s) of the matrix are refused and left out: "
                       f"{', '.join(c.id for c in refused)}\n  fix: {commands.suggest('validate')} says why; "
                       "render needs every cell valid", err=True)
        loaded.cells, loaded.refused = chosen, refused
    if strict and not checks.has_errors(findings):  # what --strict reports as not checked
        findings += checks.not_checked(loaded.cells)
    if locks_in is not None and not checks.has_errors(findings):
        rows = relock.check(loaded.cells, knowledge.load(), locks_in)
        findings += checks.lock_findings(loaded.cells, {r.cell: (r.state, r.detail) for r in rows})
        findings += checks.installer_findings(loaded.cells, {r.cell: r.unrecorded for r in rows})
    _echo_findings(findings)
    if checks.has_errors(findings, strict):
        errors = sum(f.severity == "error" or strict for f in findings)
        typer.echo(f"{errors} error(s) in {', '.join(loaded.files)}", err=True)
        raise typer.Exit(1)
    loaded.findings = findings
    return loaded


@app.command("validate")
@_with_flags
def validate_command(matrix_path: Optional[Path] = MatrixOpt, strict: bool = StrictOpt,
                     out: Optional[Path] = OutOpt) -> None:
    """Check every cell against the knowledge base of real Ascend releases, and its lock.

    Example: ascend-build validate --matrix matrix/default.yaml --strict
    """
    loaded = _load(matrix_path, strict, out or _default("dockerfiles"))
    warnings = sum(f.severity == "warning" for f in loaded.findings)
    typer.echo(f"{len(loaded.cells)} cells valid ({warnings} warning(s)) in {', '.join(loaded.files)}")


@app.command("render")
@_with_flags
def render_command(
    matrix_path: Optional[Path] = MatrixOpt,
    out: Optional[Path] = OutOpt,
    check: bool = typer.Option(False, "--check", help="Write nothing; exit 1 if the output folder is stale."),
    strict: bool = StrictOpt,
) -> None:
    """Render each cell into dockerfiles/<cell>/: Dockerfile, CPU twin, manifests, the install steps of its
    lock and the smoke program, a complete build context (`docker build` works on it by hand, see its header).

    Example: ascend-build render --check
    """
    loaded = _load(matrix_path, strict)
    out = out or _default("dockerfiles")
    if not check:
        with render.claimed(out):
            rendered = render.render_all(loaded.cells, locks=lock.read_all(out, (c.id for c in loaded.cells)))
            written = render.write(rendered, out)
        for line in written.said:  # what went away, or stayed though render did not write it
            typer.echo(line, err=True)
        typer.echo(f"rendered {len(rendered)} cells into {out} ({len(written.changed)} path(s) changed)")
        return
    rendered = render.render_all(loaded.cells, locks=lock.read_all(out, (c.id for c in loaded.cells)))
    stale = render.stale(rendered, out)
    for line in stale:
        typer.echo(f"stale: {line}", err=True)
    if stale:
        typer.echo(f"{out} is stale ({len(stale)} path(s)); run {commands.suggest('render')} and commit the result",
                   err=True)
        raise typer.Exit(1)
    typer.echo(f"{out} is up to date ({len(rendered)} cells)")


@app.command("lock")
@_with_flags
def lock_command(
    matrix_path: Optional[Path] = MatrixOpt,
    out: Optional[Path] = OutOpt,
    cell: Optional[str] = typer.Option(None, "--cell", help="Only the cell with this id."),
    cann: Optional[str] = typer.Option(None, "--cann", help="Only cells of this CANN release."),
    check: bool = typer.Option(False, "--check", help="Resolve nothing; exit 1 if a lock is missing or stale."),
    wheelhouse: Optional[Path] = typer.Option(None, "--wheelhouse", callback=paths.FOLDER,
                                              help="Folder of wheels the lock may take files from."),
    index_url: Optional[str] = typer.Option(None, "--index-url", help="Package index to resolve from (default: uv's)."),
    jobs: int = typer.Option(relock.JOBS, "--jobs", "-j", help="Cells resolved at once."),
    deadline: Optional[float] = DeadlineOpt,
) -> None:
    """Resolve each cell's whole Python closure for its arch, Python and glibc (uv, nothing built) into
    dockerfiles/<cell>/requirements.lock with every file's sha256, then render the cells again.

    Entries whose source cannot be reached here are written without sha256 and named: an image builds
    from them only with `image --allow-incomplete-lock`; `lock` where the source is reachable completes them.

    Example: ascend-build lock --cann 7.0.RC1 --wheelhouse /opt/wheels
    """
    def choose(cells: List[matrix.Cell]) -> List[matrix.Cell]:
        return matrix.select(cells, cann=cann, cell_id=cell) if (cell or cann) else cells

    loaded = _load(matrix_path, strict=False, choose=choose)
    out = out or _default("dockerfiles")
    cells = choose(loaded.cells)
    kb = knowledge.load()
    written: Optional[render.Written] = None  # None: nothing rendered (--check, or other cells refused)
    if check:
        rows = relock.check(cells, kb, out)
    else:
        with render.claimed(out), interruptible(), within(deadline, LOCK_DEADLINE):
            rows = relock.run(cells, kb, out, wheelhouse=wheelhouse, index_url=index_url, jobs=jobs,
                              say=lambda line: typer.echo(line, err=True))
            if not loaded.refused:
                written = render.write(render.render_all(loaded.cells, kb, lock.read_all(out, (c.id for c in loaded.cells))),
                                       out)
    for row in rows:
        typer.echo(f"{row.state:10} {row.cell}: {row.detail}" + (" (written)" if row.changed else ""))
    bad = [r for r in rows if r.state in ("missing", "stale", "failed")]
    incomplete = sum(r.state == "incomplete" for r in rows)
    summary = f"{len(rows) - len(bad) - incomplete} complete, {incomplete} incomplete, {len(bad)} missing/stale/failed"
    if not check and written is None:
        summary += f"; not rendered: {len(loaded.refused)} cell(s) refused (render needs every cell valid)"
    elif written is not None:
        summary += f"; rendered {len(loaded.cells)} cells into {out} ({len(written.changed)} path(s) changed)"
    typer.echo(summary, err=bool(bad))
    if bad:
        again = commands.suggest("lock", *(("--cann", cann) if cann else ()), cell=cell)
        typer.echo(f"fix: run {again} (without --check) and commit {out}", err=True)
        raise typer.Exit(1)


@app.command("list")
@_with_flags
def list_command(matrix_path: Optional[Path] = MatrixOpt, as_json: bool = JsonOpt, out: Optional[Path] = OutOpt) -> None:
    """List the cells with their image tag and content hash.

    Example: ascend-build list --json
    """
    loaded = _load(matrix_path, strict=False)
    locks = lock.read_all(out or _default("dockerfiles"), (c.id for c in loaded.cells))
    rows = [{"id": c.id, "ref": c.ref, "cann": c.cann, "chip": c.chip, "arch": c.arch, "os": c.os,
             "python": c.python, "torch": c.torch, "torch_npu": c.torch_npu, "driver": c.driver,
             "firmware": c.firmware, "content_hash": render.content_hash(c, locks.get(c.id))} for c in loaded.cells]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        typer.echo(f"{row['ref']}  {row['content_hash']}")


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


SignKeyOpt = typer.Option(None, "--sign-key", metavar="FILE", callback=paths.FILE,
                          help="The team's private key (ascend-build keys generate; its passphrase in "
                               "ASCEND_BUILD_KEY_PASSPHRASE): sign and attach statements to what is pushed.")


def _lazy_format(fmt: Optional[str], push: Optional[str]) -> Optional[str]:
    from builder.images import lazy

    if fmt is None:
        return None
    if not push:
        raise UserError("--lazy needs --push: the variant is converted from the pushed image", exit_code=2,
                        fix="add --push REGISTRY, or drop --lazy")
    return lazy.check_format(fmt)


def _signing_key(path: Optional[Path], push: Optional[str]):
    """The private key, read before anything is built (a wrong passphrase fails now, not after the build)."""
    if path is None:
        return None
    if not push:
        raise UserError("--sign-key signs what is pushed, and nothing is pushed", exit_code=2,
                        fix="add --push REGISTRY, or drop --sign-key")
    from builder.trust import signing

    return signing.load_private(path)


@app.command("image")
@_with_flags
def image_command(
    cann: Optional[str] = typer.Option(None, "--cann", help="Only cells of this CANN release, e.g. 7.0.RC1."),
    chip: Optional[str] = typer.Option(None, "--chip", help="Only cells for this chip, e.g. 910b."),
    arch: Optional[str] = typer.Option(None, "--arch", help="Only this arch (default: this host's)."),
    cell: Optional[str] = typer.Option(None, "--cell", help="Only the cell with this id."),
    variant: str = typer.Option("auto", "--variant",
                                help="npu, cpu (the CPU twin), both, or auto: both on an NPU host, cpu elsewhere."),
    no_device: bool = typer.Option(False, "--no-device", help="Run only the static tiers; NPU images get a -candidate tag."),
    devices_opt: Optional[str] = typer.Option(None, "--devices", help="NPU devices for the smoke test, e.g. 0,1."),
    push: Optional[str] = typer.Option(None, "--push", help="Push sealed images to this registry, e.g. 127.0.0.1:5000."),
    push_deadline: float = PushDeadlineOpt,
    sign_key: Optional[Path] = SignKeyOpt,
    lazy_format: Optional[str] = typer.Option(None, "--lazy", metavar="estargz",
                                              help="After the push, also push a lazily pullable variant of each validated "
                                                   "image (<tag>-estargz, made with ctr-remote), its smoke test's files "
                                                   "first; with --sign-key, a signed statement binds it to the image."),
    base_image: Optional[str] = typer.Option(None, "--base-image", help="Override the OS base image of every cell."),
    twin_os: Optional[str] = typer.Option(None, "--twin-os",
                                          help="Build the CPU twins on this OS (venv, its python3) when the cell's own OS "
                                               "or conda cannot be had here: same arch, Python and lock; tagged "
                                               "<cell>-cpu-on-<os>, labelled as a stand-in."),
    wheelhouse: Optional[Path] = typer.Option(None, "--wheelhouse", callback=paths.FOLDER,
                                              help="Folder of wheels preferred over the index."),
    conda_installer: Optional[Path] = typer.Option(None, "--conda-installer", callback=paths.EXISTING_FILE,
                                                   help="Miniforge's installer as a local file (air-gapped sites): "
                                                        "used instead of downloading it; its sha256 is still checked."),
    ca_bundle: Optional[Path] = typer.Option(None, "--ca-bundle", callback=paths.FILE,
                                             help="CA bundle for TLS-intercepting proxies (default: the host's)."),
    state_dir: Path = typer.Option(Path(".state"), "--state-dir", callback=paths.FOLDER, help="Logs, reports and contexts go here."),
    allow_incomplete_lock: bool = typer.Option(False, "--allow-incomplete-lock",
                                               help="Build a cell whose lock is missing, stale or lacks a sha256, "
                                                    "installing those entries unverified (the image's labels say so)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No per-step progress lines."),
    as_json: bool = JsonOpt,
    matrix_path: Optional[Path] = MatrixOpt,
    out: Optional[Path] = OutOpt,
) -> None:
    """Build, smoke-test, and tag (and push) the images of the selected cells, each from its lock.

    Only an image whose smoke test passed gets a release tag. With --sign-key, each pushed image
    that passed gets a signed validation statement and SLSA provenance attached to its digest
    (cosign's .att tag); if attaching fails, the image counts as failed. With --lazy estargz, each
    such image also gets an eStargz variant under <tag>-estargz, bound to it by a signed statement.

    Example: ascend-build image --cann 7.0.RC1 --push registry.example:5000 --sign-key keys/team.key
    """
    from builder import devices
    from builder.images import pipeline
    from builder.engine import Engine

    lazy_checked = _lazy_format(lazy_format, push)

    def choose(cells: List[matrix.Cell]) -> List[matrix.Cell]:
        # a cell id names its arch: only without one does --arch default to this host's
        defaulted = arch is None and cell is None
        return matrix.select(cells, cann=cann, chip=chip, arch=host_arch() if defaulted else arch, cell_id=cell,
                             arch_defaulted=defaulted)

    cells = choose(_load(matrix_path, strict=False, choose=choose).cells)
    from builder.images import publish

    # an index covers the arches the matrix declares for its cell (all of them, whatever is chosen here)
    declared = publish.declared_arches(matrix.load(matrix_path or _default("matrix")).cells) if push else None
    has_npu = bool(devices.npu_devices()) and not no_device
    variants = pipeline.variants_for(variant, has_npu)
    if not has_npu and "npu" not in variants:
        typer.echo("note: this host has no NPU, so only the CPU twins are built and validated here; "
                   "the NPU images need an NPU host (or --variant npu for -candidate images).", err=True)
    if ca_bundle is None and DEFAULT_CA.is_file():
        ca_bundle = DEFAULT_CA
    options = pipeline.Options(variants=variants, state_dir=state_dir, no_device=no_device, devices=devices_opt,
                               push=push, base_image=base_image, wheelhouse=wheelhouse, ca_bundle=ca_bundle,
                               conda_installer=conda_installer,
                               quiet=quiet, locks_dir=out or _default("dockerfiles"),
                               allow_incomplete_lock=allow_incomplete_lock, twin_os=twin_os,
                               sign_key=_signing_key(sign_key, push), push_deadline=push_deadline,
                               declared=declared, lazy=lazy_checked)
    with interruptible(), _progress(quiet) as say:
        outcomes = pipeline.run(cells, options, Engine.connect(), say)
    _summary(outcomes, as_json)
    if not all(o.ok for o in outcomes):
        raise typer.Exit(1)


@app.command("promote")
def promote_command(
    ref: str = typer.Argument(..., help="A -candidate image, e.g. ascend-build/pytorch:<cell>-candidate."),
    devices_opt: Optional[str] = typer.Option(None, "--devices", help="NPU devices to use, e.g. 0,1."),
    push: Optional[str] = typer.Option(None, "--push", help="Push the sealed image to this registry."),
    push_deadline: float = PushDeadlineOpt,
    sign_key: Optional[Path] = SignKeyOpt,
    state_dir: Path = typer.Option(Path(".state"), "--state-dir", callback=paths.FOLDER),
    as_json: bool = JsonOpt,
) -> None:
    """Run the device tiers of a -candidate image on this NPU host; seal and tag it if they pass.

    Example: ascend-build promote ascend-build/pytorch:cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64-candidate
    """
    from builder.images import pipeline
    from builder.engine import Engine

    options = pipeline.Options(state_dir=state_dir, devices=devices_opt, push=push, sign_key=_signing_key(sign_key, push),
                               push_deadline=push_deadline)
    with interruptible():
        outcome = pipeline.promote(ref, options, Engine.connect(), lambda line: typer.echo(line, err=True))
    _summary([outcome], as_json)
    if not outcome.ok:
        raise typer.Exit(1)


@app.command("index")
def index_command(
    ref: str = typer.Argument(..., metavar="REGISTRY/REPOSITORY:CELL",
                              help="The cell's tag without its arch (add -cpu for the twins), e.g. "
                                   "127.0.0.1:5000/ascend-build/pytorch:cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1"),
    trust_key: Optional[str] = TrustKeyOpt,
    require: str = typer.Option("any", "--require", metavar="any|npu-host",
                                help="What each arch's verified statement must say of where the smoke test ran: any "
                                     "(default) or npu-host."),
    as_json: bool = JsonOpt,
    deadline: Optional[float] = DeadlineOpt,
    matrix_path: Optional[Path] = typer.Option(None, "--matrix", "-m", callback=paths.FILE_OR_FOLDER,
                                               help="The matrix declaring the cell's arches (default: ./matrix/); "
                                                    "a cell it lacks gets every arch."),
) -> None:
    """Put a cell's validated images, one per arch the matrix declares for it, under one tag (an image index).

    An arm64-only cell's index holds its one arch; a cell the matrix lacks needs both x86_64
    and aarch64. The output says which arches and why. Each arch must already be in the
    registry under <cell>-<arch> and have passed every tier; otherwise nothing is written. With --trust-key (or $ASCEND_BUILD_TRUST_KEY), each
    arch's validation statement must also verify with the key, as `pull --trust-key` checks;
    the index itself is not signed. `image --push` does this by itself once the
    last arch is pushed (without checking statements); this command is for arches built on separate machines.

    Example: ascend-build index 127.0.0.1:5000/ascend-build/pytorch:cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1
    """
    from builder.images import pipeline, publish
    from builder.registry import Registry

    trusted = trust_key_of(trust_key)
    key, trust_key_path = trusted.key, trusted.path
    host, _, rest = ref.partition("/")
    repository, _, tag = rest.rpartition(":")
    if not host or not repository or not tag or "@" in ref:
        raise UserError(f"{ref!r} is not REGISTRY/REPOSITORY:TAG", exit_code=2,
                        fix="write e.g. 127.0.0.1:5000/ascend-build/pytorch:cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1")
    family, variant = publish.split_variant(tag)
    one_arch = publish.family_of(tag)
    if one_arch is not None:
        raise UserError(f"{tag!r} names one arch; the index goes under the cell's tag without its arch", exit_code=2,
                        fix=f"drop the arch: {host}/{repository}:{publish.index_tag(*one_arch)}")
    from builder.trust import policy

    policy.check_requirement(require)
    registry = Registry(host)

    lazy: Dict[str, str] = {}  # arch image digest -> what vouches for it, for a lazy variant taken through its binding

    def trust(image) -> str:
        verdict = policy.decide(registry, repository, image.digest, image.labels, key, require)
        if verdict.lazy_of and not verdict.why_not:
            lazy[image.digest] = f"{image.tag} ({image.digest}) is {verdict.vouched} with {trust_key_path}"
        return verdict.line

    source = str(matrix_path or _default("matrix"))
    archs, why = publish.index_arches(family, publish.declared_arches(matrix.load(matrix_path or _default("matrix")).cells),
                                      source)
    with within(deadline):
        outcome = pipeline.index_outcome(registry, repository, family, variant, trust if key is not None else None,
                                         archs=archs, why=why)
    _summary([outcome], as_json, index=True)
    for said in lazy.values() if outcome.ok else ():
        typer.echo(f"note: {said} (--require {require})", err=True)
    if not outcome.ok:
        raise typer.Exit(1)


def _summary(outcomes, as_json: bool, index: bool = False) -> None:
    """The end-of-run table: cell, image id, tiers, tags, digest, durations; with ``index``,
    the index's own: its tag, status and the arch images it points at."""
    for o in outcomes:
        if index and o.ok:  # which arches, and why those
            typer.echo(f"{o.tags[0]}: {o.message}", err=True)
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

    table = Table(title="ascend-build index" if index else "ascend-build image")
    columns = ("index", "status", "arches", "digest") if index else (
        "image", "status", "image id", "tiers", "tags", "digest", "build s", "smoke s")
    for column in columns:
        table.add_column(column, overflow="fold")
    for o in outcomes:
        digests = "\n".join([*o.digests.values(), *(f"{ref.rsplit('-', 1)[-1]}: {d}" for ref, d in o.lazy.items())]) or "-"
        if index:
            arches = "\n".join(f"{arch} {digest}" for arch, digest in sorted(o.arches.items())) or "-"
            table.add_row("\n".join(o.tags) or "-", o.status, arches, digests)
            continue
        tiers = " ".join(f"{t.get('name')}:{t.get('status')}" for t in o.tiers) or "-"
        table.add_row(release_tag(o.cell, o.variant), o.status, o.image_id[7:19] or "-", tiers,
                      "\n".join(o.tags) or "-", digests, f"{o.build_seconds:.1f}", f"{o.smoke_seconds:.1f}")
    Console(width=200).print(table)


@app.command("ci-matrix")
@_with_flags
def ci_matrix_command(
    changed_since: Optional[str] = typer.Option(None, "--changed-since", metavar="REF",
                                                help="Only cells whose rendered context differs from REF's."),
    runners: Optional[Path] = typer.Option(None, "--runners", callback=paths.FILE, help="YAML/JSON file of runner labels."),
    matrix_path: Optional[Path] = MatrixOpt,
) -> None:
    """Print the GitHub Actions strategy.matrix of the cells to (re)build.

    Example: ascend-build ci-matrix --changed-since origin/main
    """
    from builder.images import ci_matrix

    loaded = _load(matrix_path, strict=False)
    table = ci_matrix.load_runners(runners) if runners else None
    locks = lock.read_all(_default("dockerfiles"), (c.id for c in loaded.cells))
    rows = ci_matrix.entries(loaded.cells, render.render_all(loaded.cells, locks=locks), since=changed_since,
                             repo=Path.cwd(), out_dir="dockerfiles", runners=table)
    typer.echo(ci_matrix.to_json(ci_matrix.github_matrix(rows)))


@releases_app.command("check")
def releases_check_command(
    index_url: Optional[str] = typer.Option(None, "--index-url",
                                            help="Simple-API index (default: $ASCEND_BUILD_INDEX_URL, else pip's)."),
    write: bool = typer.Option(False, "--write", help="Add new releases (CANN pairing unknown) to the project's "
                                                      "ascend-build/knowledge.yaml; in a checkout of ascend-build, to "
                                                      "its builder/data/."),
    propose: bool = typer.Option(False, "--propose", help="Draft matrix cells for them in matrix/proposed/."),
    as_json: bool = JsonOpt,
    deadline: Optional[float] = DeadlineOpt,
) -> None:
    """Find torch_npu releases the knowledge base does not know yet.

    Example: ascend-build releases check --write --propose
    """
    from builder import releases

    # where they would go is decided first: a folder that is no project fails before the index is asked
    target = project.additions_to_write("releases check --write") if write else None
    if propose:
        project.proposals_folder("releases check --propose")
    with within(deadline):
        result = releases.check(index_url or releases.default_index_url())
    typer.echo(json.dumps(result.to_dict(), indent=2) if as_json else releases.format_check(result))
    if target is not None:
        for version in releases.write(result, target, additions=target == knowledge.ADDITIONS_FILE):
            typer.echo(f"added torch_npu {version} to {target}", err=True)
    if propose:
        text = releases.propose(result)
        typer.echo(f"proposed {text.count('- cann:')} cell(s) in {releases.default_proposal_path()}" if text
                   else "nothing to propose", err=True)


@releases_app.command("tables")
def releases_tables_command(
    documents: Optional[Path] = typer.Option(None, "--documents", callback=paths.FOLDER,
                                             help="The kept documents (default: tests/fixtures/documents/ of the "
                                                  "checkout of ascend-build the command runs in)."),
    from_git: List[str] = typer.Option([], "--from-git", metavar="KIND=GITDIR", callback=paths.FOLDER,
                                       help="First keep the newest documents of a clone (its .git folder): "
                                            "ascend-pytorch=GITDIR (TorchNPU's release notes and compatibility "
                                            "page) or mind-cluster=GITDIR (MindCluster's release notes); repeatable."),
    from_index: bool = typer.Option(False, "--from-index",
                                    help="First keep the METADATA of every torch_npu wheel not kept yet, read from the "
                                         "package index (PEP 658 .metadata files, else HTTP range reads)."),
    index_url: Optional[str] = typer.Option(None, "--index-url",
                                            help="Simple-API index for --from-index (default: "
                                                 "$ASCEND_BUILD_INDEX_URL, else pip's)."),
    write: bool = typer.Option(False, "--write", help="Generate the data files from the documents (make knowledge)."),
    propose: bool = typer.Option(False, "--propose",
                                 help="With --write: draft cells for the pairs a table now lists, in matrix/proposed/."),
    deadline: Optional[float] = DeadlineOpt,
) -> None:
    """Generate builder/data's parsed files (TorchNPU's tables, CANN's products, downstream pins)
    from Ascend's kept documents, or check that they are current (exit 1 when stale).

    Example: ascend-build releases tables --from-git ascend-pytorch=pytorch/.git --write --propose
    """
    from builder.releases import keep_documents, published, tables_watch, torch_npu_wheels

    # an installed package's files are never written: the data and the default documents are a checkout's
    data_dir = project.data_to_write("releases tables --write") if write else None
    proposals = project.proposals_folder("releases tables --propose") if propose and write else None
    if documents is None and not project.in_checkout():
        raise UserError("releases tables reads the documents kept in tests/fixtures/documents/ of a checkout of "
                        "ascend-build, and this folder is in none", exit_code=2,
                        fix="run it inside a clone of ascend-build, or pass --documents FOLDER")
    folder = documents or published.FIXTURES
    for given in from_git:
        source, sep, gitdir = given.rpartition("=")
        if not sep or source not in keep_documents.SOURCES or not Path(gitdir).is_dir():
            raise UserError(f"--from-git {given!r}: not KIND=GITDIR with KIND one of {', '.join(keep_documents.SOURCES)} "
                            "and GITDIR a folder", fix="e.g. --from-git ascend-pytorch=pytorch/.git", exit_code=2)
        for kept in keep_documents.keep(Path(gitdir), folder / source, source):
            typer.echo(f"kept {kept}", err=True)
    if from_index:
        with within(deadline):
            report = torch_npu_wheels.fetch(folder / "pypi-torch-npu", index_url or "")
        typer.echo(report.summary(), err=True)
        for line in report.errors:
            typer.echo(f"failed: {line}", err=True)
    if not write:
        stale = published.stale(folder)
        for kind in published.KINDS:
            typer.echo(f"{kind.data_file}: {'stale' if kind.data_file in stale else 'current'} ({kind.what})")
        if stale:
            raise UserError(f"{', '.join(stale)} differ from what their documents generate",
                            fix="run `make knowledge` (ascend-build releases tables --write) and commit the result",
                            exit_code=1)
        return
    assert data_dir is not None
    before = knowledge.load()
    changed = published.write(folder, data_dir)
    typer.echo("\n".join(f"wrote builder/data/{name}" for name in changed) or "every data file was current")
    if proposals is not None:
        after = knowledge.load(fresh=True)
        pairs = tables_watch.enabled(before, after)
        text = tables_watch.proposal(pairs, after)
        for pair in pairs:
            typer.echo(f"now listed: torch_npu {pair.torch_npu} on CANN {pair.cann} (was {pair.was}; {pair.where[0]})")
        if text:
            target = proposals / tables_watch.PROPOSAL_NAME
            target.parent.mkdir(parents=True, exist_ok=True)
            writes.replace_file(target, text.encode("utf-8"))
            typer.echo(f"proposed {text.count('- cann:')} cell(s) in {target}", err=True)
        else:
            typer.echo("nothing to propose", err=True)


@releases_app.command("cann")
def releases_cann_command(
    table: str = typer.Option(..., "--table", envvar="ASCEND_BUILD_COMPAT_TABLE", callback=paths.URL_OR_FILE,
                              help="Ascend/pytorch's COMPATIBILITY.en.md: a URL or a file."),
    images: Optional[str] = typer.Option(None, "--images", envvar="ASCEND_BUILD_IMAGE_MATRIX", callback=paths.URL_OR_FILE,
                                         help="The official CANN images' build_cann_arg.json, or a listing of their "
                                              "cann/<tag>/Dockerfile paths: a URL or a file."),
    notes: Optional[str] = typer.Option(None, "--release-notes", envvar="ASCEND_BUILD_RELEASE_NOTES",
                                        callback=paths.URL_OR_FILE,
                                        help="A listing of cann/release-management's files (<version>/release-notes.md "
                                             "per line): a URL or a file."),
    out: Optional[Path] = typer.Option(None, "--out", callback=paths.FILE,
                                         help="Also write the proposal to this file."),
    deadline: Optional[float] = DeadlineOpt,
) -> None:
    """Propose what Ascend's compatibility table and the official CANN images name and the knowledge
    base lacks (CANN releases, torch_npu pairings, chips, OSes), with the source of each. Nothing is
    applied: edit builder/data/ascend-compat.yaml after checking the sources.

    Example: ascend-build releases cann --table COMPATIBILITY.en.md --images build_cann_arg.json --release-notes files.txt
    """
    from builder import knowledge
    from builder.releases import cann_watch

    with within(deadline):
        rows = cann_watch.table_rows(cann_watch.read(table))
        if not rows:
            raise UserError(f"{table} has no row of the compatibility table (| torch_npu | ... | PyTorch | CANN X |)",
                            fix="pass Ascend/pytorch's COMPATIBILITY.en.md", exit_code=1)
        tags = cann_watch.image_tags(cann_watch.read(images), images) if images else []
        released = cann_watch.release_notes(cann_watch.read(notes)) if notes else []
    text = cann_watch.to_yaml(cann_watch.propose(knowledge.load(), rows, tags, table, images or "", released, notes or ""))
    typer.echo(text, nl=False)
    if out:
        writes.replace_file(out, text.encode())
        typer.echo(f"wrote {out}", err=True)
