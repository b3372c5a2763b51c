"""The node commands: host, pull, run, doctor, explain, record.

Each parses its options, calls the node wing and prints; no logic of its own.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import List, Optional

import typer

from builder import commands
from builder.cli.app import DeadlineOpt, JsonOpt, app, host_arch, within
from builder.cli import paths
from builder.cli.trust_key import TrustKey, TrustKeyOpt, trust_key as decide_trust_key
from builder.errors import UserError
from builder.trust.policy import ANY, REQUIRE_HELP, Verdict
from builder.vocabulary import DEFAULT_IMAGE, GUARD_ENV, GUARD_OFF, NPU, VARIANTS, Label


RootOpt = typer.Option(Path("/"), "--root", callback=paths.FOLDER,
                       help="Read the host's files under this folder (a fixture tree).")
RequireOpt = typer.Option(ANY, "--require", metavar="any|npu-host", help=REQUIRE_HELP)


def _file_opt(flag: str, what: str):
    """``--nfd FILE`` writes FILE, ``--nfd -`` prints (typer has no option with an optional value)."""
    return typer.Option(None, flag, metavar="FILE|-", callback=paths.FILE_OR_STDOUT,
                        help=f"Write {what} to FILE (replaced atomically); - prints it.")


def how_chosen(trusted: TrustKey, require: str, verdict: Optional[Verdict] = None) -> str:
    """What vouches for the chosen image, said by `pull` and `k8s job` alike: the statement checked (for a
    lazy variant, its validated image's, through its binding: ``verdict``), or nothing.

    Example:
        >>> how_chosen(TrustKey(None), "any")
        'chosen on its labels alone: no --trust-key, no statement checked'
        >>> how_chosen(TrustKey(object(), "team.pub"), "any", Verdict(lazy_of="r/p@sha256:ab"))  # type: ignore[arg-type]
        'a lazy variant of r/p@sha256:ab, whose validation statement verifies with team.pub (--require any)'
    """
    return (f"{(verdict or Verdict()).vouched} with {trusted.path} (--require {require})" if trusted.key is not None
            else "chosen on its labels alone: no --trust-key, no statement checked")


@app.command("host")
def host_command(root: Path = RootOpt, as_json: bool = JsonOpt,
                 nfd_file: Optional[str] = _file_opt("--nfd", "a node-feature-discovery feature file (node labels)"),
                 cdi_file: Optional[str] = _file_opt("--cdi", "a CDI spec of this node's NPUs")) -> None:
    """What this node has: arch, driver, firmware and their accepted ranges, chip, devices, CANN.

    --nfd: the same facts as node labels for node-feature-discovery's local source (install it in
    /etc/kubernetes/node-feature-discovery/features.d/), with the driver's integer ordinal a node
    affinity compares. --cdi: a CDI spec (for /etc/cdi/) of the devices and mounts `run` passes.

    Example: ascend-build host --nfd /etc/kubernetes/node-feature-discovery/features.d/ascend-build --cdi -
    """
    from builder.node import cdi, nfd
    from builder.node import host as host_probe

    if nfd_file == "-" and cdi_file == "-":
        raise UserError("--nfd and --cdi cannot both print to stdout", fix="give one of them a FILE")
    info = host_probe.probe(root=root, run_npu_smi=True)
    outputs = [(target, make) for target, make in ((nfd_file, lambda: nfd.features_text(info)),
                                                   (cdi_file, lambda: cdi.spec_text(cdi.node_spec(root))))
               if target is not None]
    if not outputs:
        typer.echo(json.dumps(info.to_dict(), indent=2) if as_json else host_probe.format_host(info))
    texts = [(target, make()) for target, make in outputs]  # every error before anything is written
    for target, text in texts:
        if target == "-":
            typer.echo(text, nl=False)
        else:
            nfd.write_atomically(Path(target), text)
            typer.echo(f"wrote {target}", err=True)


@app.command("pull")
def pull_command(
    cann: Optional[str] = typer.Option(None, "--cann", help="The CANN release wanted, e.g. 8.0.RC3."),
    registry: str = typer.Option(..., "--registry", help="HOST[:PORT][/REPOSITORY] to pull from."),
    torch: Optional[str] = typer.Option(None, "--torch", help="Pin torch, e.g. 2.4.0 (default: the newest that fits)."),
    python: Optional[str] = typer.Option(None, "--python", help="Pin Python, e.g. 3.10."),
    variant: str = typer.Option(NPU, "--variant", metavar="npu|cpu",
                                help="The NPU image (default), or its CPU twin (a numerical reference; no NPU needed)."),
    trust_key: Optional[str] = TrustKeyOpt,
    require: str = RequireOpt,
    root: Path = RootOpt,
    as_json: bool = JsonOpt,
    deadline: Optional[float] = DeadlineOpt,
) -> None:
    """Pull the validated image that fits this node's arch, chip, driver and firmware, by digest.

    With --trust-key (or $ASCEND_BUILD_TRUST_KEY), an image is a candidate only when a validation
    statement attached to its digest verifies with the key and says every required tier passed
    (--require npu-host: on an NPU host); a lazy variant (<tag>-estargz) only when its signed
    binding names a validated image that is trusted so. Each refused image is named with the reason.

    The deadline counts what ascend-build asks the registry and Docker Engine's own pull of the layers.

    Example: ascend-build pull --cann 8.0.RC3 --registry registry.example:5000 --trust-key team.pub
    """
    from builder.trust import policy
    from builder.node import host as host_probe
    from builder.node import pull as chooser
    from builder.engine import Engine
    from builder.registry import Registry

    try:
        trusted = decide_trust_key(trust_key)
        key = trusted.key
        if variant not in VARIANTS:
            raise UserError(f"--variant {variant!r} is none of {', '.join(VARIANTS)}", exit_code=2,
                            fix="--variant npu (the NPU image) or --variant cpu (its CPU twin)")
        policy.check_requirement(require)
        info = host_probe.probe(root=root, run_npu_smi=True)
        node = chooser.Node(arch=info.arch or host_arch(), chip=info.chip, driver=info.driver, firmware=info.firmware)
        wanted = chooser.Wanted(cann=cann, torch=torch, python=python, variant=variant)
        address, repository = chooser.split_registry(registry, DEFAULT_IMAGE)
        reg = Registry(address)
        verdicts: dict = {}
        with within(deadline):
            best, rejected = chooser.pick(reg, repository, node, wanted, key, require, verdicts=verdicts)
            if best is None:
                # the retry it suggests carries this run's flags (`commands.suggest`)
                flags = (("--registry", registry), ("--torch", torch), ("--python", python),
                         ("--variant", variant if variant != NPU else None), ("--root", root if root != Path("/") else None))
                with commands.given(carry={"pull": (flags, ())}):
                    if as_json:
                        typer.echo(json.dumps({"ref": None, "registry": f"{address}/{repository}", "node": asdict(node),
                                               "rejected": chooser.rejections_to_dicts(rejected),
                                               "fixes": chooser.suggestions(rejected, node, wanted)}, indent=2))
                    typer.echo(chooser.refusal(f"{address}/{repository}", node, rejected, wanted), err=True)
                raise typer.Exit(1)
            ref, moved = chooser.fetch(Engine.connect(), reg, repository, best, node.arch)
    except UserError as exc:  # --json: a script reads the error from stdout too; stderr still says it
        if as_json:
            typer.echo(json.dumps({"ref": None, "error": exc.message, "fix": exc.fix or None}, indent=2))
        raise
    verdict = verdicts.get(best.digest)
    verified = how_chosen(trusted, require, verdict)
    if as_json:
        typer.echo(json.dumps({"ref": ref, "tag": best.tag, "digest": best.digest, "labels": best.labels,
                               "verified": key is not None, "require": require if key is not None else None,
                               "lazy_variant_of": verdict.lazy_of if verdict is not None and verdict.lazy_of else None},
                              indent=2))
    else:
        run_it = f"ascend-build run {ref}" + (f" --trust-key {trusted.path}" if key is not None else "")
        typer.echo(f"pulled {ref}\n  tag {best.tag}\n  {verified}\n  run it: {run_it}")
    if moved:
        typer.echo(f"note: tag {best.tag} moved to {moved} after it was chosen; pulled the validated {best.digest}",
                   err=True)


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_command(
    ctx: typer.Context,
    image_ref: str = typer.Argument(..., metavar="IMAGE", help="The image to start."),
    devices_opt: Optional[str] = typer.Option(None, "--devices", help="NPU devices to pass in, e.g. 0,1 (default: all)."),
    print_only: bool = typer.Option(False, "--print", help="Print the docker run line instead of running it."),
    force: bool = typer.Option(False, "--force", help="Start even if the image needs a newer driver than this node's "
                                                      "(passes ASCEND_DRIVER_GUARD=off-unsafe to the image's driver guard)."),
    trust_key: Optional[str] = TrustKeyOpt,
    require: str = RequireOpt,
    insecure: bool = typer.Option(False, "--insecure",
                                  help="With --trust-key: start IMAGE even when its statement does not verify, or the "
                                       "key given cannot be read (said loudly, with the reason)."),
    root: Path = RootOpt,
) -> None:
    """Start IMAGE with the NPU devices and driver mounts of this node (`-- CMD...` after the image).

    With --trust-key (or $ASCEND_BUILD_TRUST_KEY), IMAGE must be REGISTRY/REPOSITORY:TAG or @sha256:
    whose validation statement verifies with the key (as `pull --trust-key` checks; a lazy variant:
    through its signed binding to a validated image whose statement verifies); it is then started by
    that verified digest. An image whose statement does not verify is refused unless --insecure is given.

    Example: ascend-build run --devices 0,1 --print --trust-key team.pub REGISTRY/ascend-build/pytorch@sha256:... -- python train.py
    """
    from builder import devices, versions
    from builder.node import doctor as checklist
    from builder.node import host as host_probe
    from builder.engine import Engine

    trusted = decide_trust_key(trust_key, insecure)
    host = host_probe.probe(root=root, run_npu_smi=False)  # once: its devices, arch and driver serve every step
    host.arch = host.arch or host_arch()
    if trusted.key is not None:
        image_ref = _verified_ref(image_ref, trusted, require, insecure, host.arch)
    elif trusted.refused:
        typer.echo(f"WARNING: --insecure: {trusted.refused}; starting {image_ref} with no statement checked: nothing "
                   "signed says it passed the smoke test, nor that it is the image that was tested", err=True)
    elif insecure:
        typer.echo("note: --insecure skips nothing without --trust-key: no statement is checked", err=True)
    chosen = devices.choose(host.devices, devices_opt)
    engine = Engine.connect()
    seen = checklist.look_up(engine, image_ref, host.arch)
    refused = [c for c in checklist.launch_checks(host, seen) if c.status == checklist.FAIL]
    if refused:  # the checks `doctor` reports, so the two never disagree
        raise UserError(f"{image_ref} cannot start on this node: " + "; ".join(c.detail for c in refused),
                        fix="; ".join(c.fix for c in refused), exit_code=1)
    # --force reaches the image's driver guard too, by the one override it knows, in the line shown
    labels = seen.labels
    # the firmware's version.info only for an image whose driver guard reads it (a firmware minimum stated)
    argv = devices.run_argv(image_ref, chosen, list(ctx.args), root=root, interactive=sys.stdin.isatty() and not print_only,
                            env=[(GUARD_ENV, GUARD_OFF)] if force else [], firmware=bool(labels.get(Label.MIN_FIRMWARE)))
    if not chosen:
        typer.echo("note: this host has no /dev/davinci* devices to pass in", err=True)
    need = labels.get(Label.MIN_DRIVER)
    if not labels:
        typer.echo(f"note: {image_ref} is not an image built by ascend-build; its driver needs are unchecked",
                   err=True)
    elif need and not force:
        driver = host.driver
        if versions.meets_minimum("hdk", driver, need) is not True:
            raise UserError(f"{image_ref} needs NPU driver {need} or newer; this node has {driver or 'no driver'}",
                            fix="upgrade the node's driver and firmware, pick an image that fits "
                                "(`ascend-build pull`), or pass --force", exit_code=1)
    if print_only:
        typer.echo(devices.format_argv(argv))
        return
    engine.exec_cli(argv)


def _verified_ref(image_ref: str, trusted: TrustKey, require: str, insecure: bool, arch: str) -> str:
    """``image_ref`` as ``REGISTRY/REPOSITORY@sha256:...`` when its validation statement is trusted; refused
    (UserError) when it is not, unless ``insecure`` (then said loudly, and ``image_ref`` is started as given).
    ``arch``: this node's, whose image of an index is the one checked."""
    from builder.cell_id import named_by_tag
    from builder.trust import policy
    from builder.registry import split_reference
    from builder.node import doctor
    from builder.registry import Registry

    policy.check_requirement(require)
    verdict = policy.Verdict()
    if not doctor.names_registry(image_ref):
        why = "it names no registry, so no statement can be looked up (a local name says nothing signed)"
    else:
        host, repository, reference = split_reference(image_ref)
        registry = Registry(host)
        info = registry.inspect(repository, reference, arch)
        if info is None:
            raise UserError(f"{image_ref} is not in the registry {host}", exit_code=1,
                            fix="check the reference (`ascend-build pull` prints the one to run)")
        if not info.labels and info.architecture.startswith("none of"):
            why = f"it has no image for this node's arch {arch} ({info.architecture})"
        else:
            named = None if reference.startswith("sha256:") else named_by_tag(reference)
            verdict = policy.decide(registry, repository, info.digest, info.labels, trusted.key, require, named)
            why = verdict.why_not
        if not why:
            verified = f"{host}/{repository}@{info.digest}"
            typer.echo(f"verified: {verified}: {verdict.vouched} with {trusted.path} "
                       f"(--require {require}); starting it by that digest", err=True)
            return verified
    if not insecure:
        raise UserError(f"{image_ref}: signed validation refused: {why}", exit_code=1,
                        fix=(f"{verdict.fix}; or " if verdict.fix else "") +
                            "run an image `ascend-build pull --trust-key` chose (the REGISTRY/REPOSITORY@sha256 "
                            "reference it prints), or pass --insecure to start it unverified")
    typer.echo(f"WARNING: --insecure: {image_ref} is NOT verified ({why}); starting it anyway: nothing signed "
               f"says it passed the smoke test, nor that it is the image that was tested", err=True)
    return image_ref


@app.command("doctor")
def doctor_command(
    image_ref: Optional[str] = typer.Option(None, "--image", help="Also check inside this image."),
    root: Path = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The field guide's pre-flight checklist: OK / WARN / FAIL with a fix each.

    Example: ascend-build doctor --image ascend-build/pytorch:TAG
    """
    from builder.node import doctor as checklist

    checks = checklist.run_doctor(image=image_ref, root=root)
    typer.echo(json.dumps(checklist.checks_to_dicts(checks), indent=2) if as_json else checklist.format_checks(checks))
    raise typer.Exit(checklist.exit_code(checks))


@app.command("explain")
def explain_command(
    text: Optional[str] = typer.Argument(None, help="The error text, quoted (or a log, e.g. \"$(cat train.log)\")."),
    image_ref: Optional[str] = typer.Option(None, "--image", help="The image that failed: its labels name the versions."),
    list_known: bool = typer.Option(False, "--list", help="List every error it knows (with --json: patterns, fix, source)."),
    root: Path = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Map an Ascend error message to its cause and fix, with this node's (and the image's) versions filled in.

    Example: ascend-build explain "libascend_hal.so: cannot open shared object file" --image IMAGE
    """
    from builder.node import explain as table
    from builder.node import host as host_probe

    if list_known:
        typer.echo(json.dumps(table.entries_to_dicts(), indent=2) if as_json else table.format_table())
        return
    if not text:
        raise UserError("explain needs the error text (or --list)", exit_code=2,
                        fix='ascend-build explain "EI0006: Getting socket times out", or ascend-build explain --list')
    labels = None
    if image_ref:
        from builder.engine import Engine

        labels = Engine.connect().labels(image_ref)
    matches = table.explain(text, host=host_probe.probe(root=root, run_npu_smi=False), labels=labels)
    if not matches:
        if as_json:  # the same list, empty: a script reads "no match" as it reads matches
            typer.echo("[]")
        typer.echo(f"no known Ascend error in that text ({len(table.table())} errors are known)\n"
                   "  next: `ascend-build explain --list` shows every one; give the lines that hold the error code "
                   "(e.g. EI0006), not only the last line of the log", err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps([m.to_dict() for m in matches], indent=2) if as_json else table.format_explanations(matches))


@app.command("record")
def record_command(
    output_dir: Path = typer.Argument(..., callback=paths.FOLDER,
                                      help="The training run's output folder (its parent must exist)."),
    sets: List[str] = typer.Option([], "--set", help="Your own key=value, e.g. --set seq_len=4096 (repeatable)."),
    image_ref: Optional[str] = typer.Option(None, "--image",
                                            help="The image the run used: its environment is measured inside it "
                                                 "(default: the python3 on PATH)."),
    root: Path = RootOpt,
) -> None:
    """Write the run record (versions, driver, firmware, chip, image) next to the weights.

    Example: ascend-build record out/ --image ascend-build/pytorch:TAG --set train_mode=lora --set seq_len=4096
    """
    from builder.node import record as run_record

    path, data = run_record.run_record(output_dir, pairs=sets, root=root, image=image_ref)
    typer.echo(run_record.format_record(path, data))
