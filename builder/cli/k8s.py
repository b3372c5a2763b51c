"""The Kubernetes commands: `k8s job` prints a manifest for the validated image that fits a node pool.

It parses its options, calls `builder.node.pull`'s choice and `builder.k8s`, and prints; no logic of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import typer

from builder.cli.app import DeadlineOpt, app
from builder.cli import k8s_choice
from builder.cli.node import RequireOpt, RootOpt, how_chosen
from builder.cli.trust_key import TrustKeyOpt, trust_key as decide_trust_key
from builder.errors import UserError
from builder.k8s import kinds
from builder.vocabulary import CPU, NPU, Label

k8s_app = typer.Typer(no_args_is_help=True, help="Kubernetes manifests for the validated image that fits a node pool.")
app.add_typer(k8s_app, name="k8s")



@k8s_app.command("job", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def job_command(
    ctx: typer.Context,
    registry: str = k8s_choice.RegistryOpt,
    cann: Optional[str] = k8s_choice.CannOpt,
    npus: Optional[int] = typer.Option(None, "--npus",
                                       help="NPUs per pod (the device plugin's resource, limits = requests); "
                                            "with --variant cpu, processes per pod (default 1)."),
    variant: str = k8s_choice.VariantOpt,
    chip: Optional[str] = k8s_choice.ChipOpt,
    nodes: Optional[Path] = k8s_choice.NodesOpt,
    kind: str = typer.Option("job", "--kind", metavar="|".join(kinds.names()), help=kinds.help_text()),
    nodes_count: int = typer.Option(1, "--nodes-count", help="A kind over several nodes: pods, one per node, N NPUs each."),
    name: str = k8s_choice.NameOpt,
    shm_size: str = typer.Option("16Gi", "--shm-size", help="Size limit of the in-memory /dev/shm."),
    torch: Optional[str] = k8s_choice.TorchOpt,
    python: Optional[str] = k8s_choice.PythonOpt,
    trust_key: Optional[str] = TrustKeyOpt,
    require: str = RequireOpt,
    root: Path = RootOpt,
    deadline: Optional[float] = DeadlineOpt,
    prepull: bool = typer.Option(False, "--prepull",
                                 help="Also print `k8s prepull`'s DaemonSet for the same image and nodes (a second YAML document)."),
) -> None:
    """Print (YAML) a Job for the validated image that fits every node of the pool, pinned by digest (`-- CMD...`).

    The pool is --nodes (its lowest driver decides) or this host. Nothing fits: why, and which
    upgrade would, on stderr, exit 1, nothing on stdout.

    Example: ascend-build k8s job --registry registry.example:5000 --cann 8.0.RC3 --npus 8 --nodes nodes.json -- torchrun --nproc_per_node 8 train.py
    (nodes.json: kubectl get nodes -o json > nodes.json)
    """
    from builder.trust import policy
    from builder.k8s import job, launcher, pod, pool, manifest_yaml, prepull as prepulls
    from builder.node import pull as chooser

    trusted = decide_trust_key(trust_key)
    key = trusted.key
    k8s_choice.check_variant(variant)
    if npus is None:
        if variant == NPU:
            raise UserError("--npus is needed: the NPUs each pod asks the device plugin for", exit_code=2,
                            fix="add e.g. --npus 8 (or --variant cpu for the CPU twin, which asks for none)")
        npus = 1
    chosen_kind = kinds.kind(kind)
    kinds.check_count(chosen_kind, nodes_count)
    launcher.check(tuple(ctx.args), nodes_count, kind)
    chosen_kind.check(tuple(ctx.args), nodes_count, variant, npus)
    job.check_name(name)
    policy.check_requirement(require)
    found = k8s_choice.read_pool(nodes, chip, root, variant)
    if chosen_kind.multi_node and nodes is not None and nodes_count > len(found.names):
        raise UserError(f"--nodes-count {nodes_count}: the pool has {len(found.names)} node(s) and each pod needs its own",
                        fix=f"--nodes-count {len(found.names)} or fewer", exit_code=1)
    if variant == NPU:
        pool.check_npus(found, npus, nodes_count)
    wanted = chooser.Wanted(cann=cann, torch=torch, python=python, variant=variant)
    # the retry it suggests carries this run's flags and command (`commands.suggest`)
    flags = (("--registry", registry), ("--npus", npus), ("--variant", variant if variant != NPU else None),
             ("--nodes", nodes), ("--chip", chip),
             ("--kind", kind if kind != "job" else None), ("--nodes-count", nodes_count if nodes_count != 1 else None),
             ("--name", name if name != "ascend-train" else None))
    carry: Dict[str, Tuple[Sequence[Tuple[str, object]], Sequence[str]]] = {
        "k8s job": (flags, ("--", *ctx.args) if ctx.args else ())}
    chosen = k8s_choice.choose(registry, found, wanted, key, require, deadline, nodes is None, "k8s job", carry)
    best, subject = chosen.best, chosen.subject
    if "firmware" in found.node.unchecked and best.labels.get(Label.MIN_FIRMWARE):
        typer.echo(f"note: firmware not checked: not every node carries a firmware label; the image needs "
                   f"{best.labels[Label.MIN_FIRMWARE]} or newer (`ascend-build host --nfd` labels it)", err=True)
    spec = pod.PodSpec(image=chosen.image, chip=best.labels.get(Label.CHIP) or found.node.chip or "",
                       arch=found.node.arch, npus=npus, command=tuple(ctx.args),
                       min_driver=best.labels.get(Label.MIN_DRIVER, ""), chip_values=found.chip_values,
                       drivers=found.drivers, shm_size=shm_size, variant=variant)
    annotations = {"ascend-build.io/image-tag": best.tag, "ascend-build.io/min-driver": spec.min_driver}
    manifest = chosen_kind.build(name, spec, nodes_count, annotations)
    verified = how_chosen(trusted, require, chosen.verdict)
    header = [f"ascend-build k8s job: image tag {best.tag}, chosen for {subject} ({pool.describe(found)}arch "
              f"{found.node.arch}, chip {found.node.chip or 'unknown'}, driver {found.node.driver or 'unknown'})", verified]
    if variant == CPU:
        header.append("the CPU twin: no NPU asked for, no driver mounted, any node of the arch "
                      "(a numerical reference, not the NPU image)")
    header += chosen_kind.header(name, spec)
    text = manifest_yaml.render(manifest, header)
    if prepull:
        text += "---\n" + manifest_yaml.render(prepulls.daemonset(name, spec, prepulls.pull_annotations(best.tag)),
                                               prepulls.header(name))
    typer.echo(text, nl=False)
