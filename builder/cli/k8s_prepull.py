"""`k8s prepull`: print the manifest that pulls the image `k8s job` would choose onto the nodes its
Job may land on. Parses, calls `builder.cli.k8s_choice` and `builder.k8s.prepull`, prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from builder.cli import k8s_choice
from builder.cli.app import DeadlineOpt
from builder.cli.k8s import k8s_app
from builder.cli.node import RequireOpt, RootOpt, how_chosen
from builder.cli.trust_key import TrustKeyOpt, trust_key as decide_trust_key
from builder.errors import UserError
from builder.vocabulary import CPU, Label

PREPULL_KINDS = ("daemonset", "openkruise")


@k8s_app.command("prepull")
def prepull_command(
    registry: str = k8s_choice.RegistryOpt,
    cann: Optional[str] = k8s_choice.CannOpt,
    chip: Optional[str] = k8s_choice.ChipOpt,
    nodes: Optional[Path] = k8s_choice.NodesOpt,
    kind: str = typer.Option("daemonset", "--kind", metavar="daemonset|openkruise",
                             help="An apps/v1 DaemonSet, or an OpenKruise ImagePullJob (needs --nodes: it names the nodes)."),
    name: str = k8s_choice.NameOpt,
    variant: str = k8s_choice.VariantOpt,
    torch: Optional[str] = k8s_choice.TorchOpt,
    python: Optional[str] = k8s_choice.PythonOpt,
    trust_key: Optional[str] = TrustKeyOpt,
    require: str = RequireOpt,
    root: Path = RootOpt,
    deadline: Optional[float] = DeadlineOpt,
) -> None:
    """Print (YAML) what pulls the image `k8s job` chooses (same options, same choice) onto the nodes
    its Job may land on, running nothing of the image.

    daemonset: the Job's node affinity, one pod per admitted node running `sleep infinity` (not the
    image's entrypoint), Ready once its node holds the image. openkruise: an ImagePullJob naming
    the pool's nodes. Nothing fits: why, on stderr, exit 1, nothing on stdout.

    Example: ascend-build k8s prepull --registry registry.example:5000 --cann 8.0.RC3 --nodes nodes.json
    """
    from builder.k8s import job, manifest_yaml, pod, prepull
    from builder.node import pull as chooser
    from builder.trust import policy

    trusted = decide_trust_key(trust_key)
    k8s_choice.check_variant(variant)
    if kind not in PREPULL_KINDS:
        raise UserError(f"--kind {kind!r} is none of {', '.join(PREPULL_KINDS)}", fix="--kind daemonset or --kind openkruise")
    if kind == "openkruise" and nodes is None:
        raise UserError("--kind openkruise names the nodes to pull on, and without --nodes there are none to name",
                        fix="pass --nodes (kubectl get nodes -o json > nodes.json), or --kind daemonset")
    job.check_name(name)
    policy.check_requirement(require)
    found = k8s_choice.read_pool(nodes, chip, root, variant)
    wanted = chooser.Wanted(cann=cann, torch=torch, python=python, variant=variant)
    chosen = k8s_choice.choose(registry, found, wanted, trusted.key, require, deadline, nodes is None,
                               "k8s prepull")
    best = chosen.best
    annotations = prepull.pull_annotations(best.tag)
    if kind == "daemonset":
        spec = pod.PodSpec(image=chosen.image, chip=best.labels.get(Label.CHIP) or found.node.chip or "",
                           arch=found.node.arch, npus=1, command=(), min_driver=best.labels.get(Label.MIN_DRIVER, ""),
                           chip_values=found.chip_values, drivers=found.drivers, variant=variant)
        manifest, notes = prepull.daemonset(name, spec, annotations), prepull.header(name)
    else:
        manifest = prepull.image_pull_job(name, chosen.image, found.names, annotations)
        notes = [f"pre-pull: OpenKruise pulls the image on the pool's {len(found.names)} node(s) by name",
                 f"per node: kubectl get imagepulljob {prepull.prepull_name(name)} -o yaml (status.failedNodes)"]
    header = [f"ascend-build k8s prepull: image tag {best.tag}, chosen for {chosen.subject} (arch {found.node.arch}, "
              f"chip {found.node.chip}, driver {found.node.driver})", how_chosen(trusted, require, chosen.verdict), *notes]
    if variant == CPU:
        header.append("the CPU twin (--variant cpu): the image k8s job --variant cpu chooses, on any node of the arch")
    typer.echo(manifest_yaml.render(manifest, header), nl=False)
