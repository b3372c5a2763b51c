"""The node commands: host, pull, run, doctor, explain, record.

Each parses its options, calls the node wing and prints; no logic of its own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from builder.cli.app import DeadlineOpt, JsonOpt, app, host_arch, within
from builder.errors import UserError
from builder.vocabulary import DEFAULT_IMAGE, Label


RootOpt = typer.Option(Path("/"), "--root", help="Read the host's files under this folder (a fixture tree).")


@app.command("host")
def host_command(root: Path = RootOpt, as_json: bool = JsonOpt) -> None:
    """What this node has: arch, driver, firmware and their accepted ranges, chip, devices, CANN.

    Example: ascend-build host --json
    """
    from builder.node import host as host_probe

    info = host_probe.probe(root=root, run_npu_smi=True)
    typer.echo(json.dumps(info.to_dict(), indent=2) if as_json else host_probe.format_host(info))


@app.command("pull")
def pull_command(
    cann: Optional[str] = typer.Option(None, "--cann", help="The CANN release wanted, e.g. 8.0.RC3."),
    registry: str = typer.Option(..., "--registry", help="HOST[:PORT][/REPOSITORY] to pull from."),
    torch: Optional[str] = typer.Option(None, "--torch", help="Pin torch, e.g. 2.4.0 (default: the newest that fits)."),
    python: Optional[str] = typer.Option(None, "--python", help="Pin Python, e.g. 3.10."),
    root: Path = RootOpt,
    as_json: bool = JsonOpt,
    deadline: Optional[float] = DeadlineOpt,
) -> None:
    """Pull the validated image that fits this node's arch, chip, driver and firmware, by digest.

    The deadline counts what ascend-build asks the registry, not Docker Engine's own pull of the layers.

    Example: ascend-build pull --cann 8.0.RC3 --registry registry.example:5000
    """
    from builder.node import host as host_probe
    from builder.node import pull as chooser
    from builder.engine import Engine
    from builder.registry import Registry

    info = host_probe.probe(root=root, run_npu_smi=True)
    node = chooser.Node(arch=info.arch or host_arch(), chip=info.chip, driver=info.driver, firmware=info.firmware)
    wanted = chooser.Wanted(cann=cann, torch=torch, python=python)
    address, repository = chooser.split_registry(registry, DEFAULT_IMAGE)
    reg = Registry(address)
    with within(deadline):
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


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_command(
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
    from builder.node import host as host_probe
    from builder.engine import Engine

    chosen = devices.choose(devices.npu_devices(root), devices_opt)
    argv = devices.run_argv(image_ref, chosen, list(ctx.args), root=root, interactive=sys.stdin.isatty() and not print_only)
    if not chosen:
        typer.echo("note: this host has no /dev/davinci* devices to pass in", err=True)
    engine = Engine.connect()
    labels = engine.labels(image_ref) if engine.image_id(image_ref) else {}
    need = labels.get(Label.MIN_DRIVER)
    if not labels:
        typer.echo(f"note: {image_ref} is not a local image built by ascend-build; its driver needs are unchecked",
                   err=True)
    elif need and not force:
        driver = host_probe.probe(root=root, run_npu_smi=False).driver
        if versions.meets_minimum("hdk", driver, need) is not True:
            raise UserError(f"{image_ref} needs NPU driver {need} or newer; this node has {driver or 'no driver'}",
                            fix="upgrade the node's driver and firmware, pick an image that fits "
                                "(`ascend-build pull`), or pass --force", exit_code=1)
    if print_only:
        typer.echo(devices.format_argv(argv))
        return
    engine.exec_cli(argv)


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
    text: str = typer.Argument(..., help="The error text, quoted."),
    image_ref: Optional[str] = typer.Option(None, "--image", help="The image that failed: its labels name the versions."),
    root: Path = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Map an Ascend error message to its cause and fix, with this node's (and the image's) versions filled in.

    Example: ascend-build explain "libascend_hal.so: cannot open shared object file" --image IMAGE
    """
    from builder.node import explain as table
    from builder.node import host as host_probe

    labels = None
    if image_ref:
        from builder.engine import Engine

        labels = Engine.connect().labels(image_ref)
    matches = table.explain(text, host=host_probe.probe(root=root, run_npu_smi=False), labels=labels)
    if not matches:
        typer.echo("no known Ascend error in that text", err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps([m.to_dict() for m in matches], indent=2) if as_json else table.format_explanations(matches))


@app.command("record")
def record_command(
    output_dir: Path = typer.Argument(..., help="The training run's output folder."),
    sets: List[str] = typer.Option([], "--set", help="Your own key=value, e.g. --set seq_len=4096 (repeatable)."),
) -> None:
    """Write the run record (versions, driver, firmware, chip, image) next to the weights.

    Example: ascend-build record out/ --set train_mode=lora --set seq_len=4096
    """
    from builder.node import record as run_record

    path, data = run_record.run_record(output_dir, pairs=sets)
    typer.echo(run_record.format_record(path, data))
