"""The choice `k8s job` and `k8s prepull` share: read the pool, pick the validated image that fits
it, or say why none does (stderr, exit 1). Parsing and printing only: the pool is
`builder.k8s.pool`'s, the pick `builder.node.pull`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import typer

from builder import bounded, commands
from builder.cli import paths
from builder.cli.app import host_arch, within
from builder.errors import UserError
from builder.k8s.pool import Pool
from builder.registry import ImageInfo
from builder.trust.policy import Verdict
from builder.vocabulary import CPU, DEFAULT_IMAGE, NPU, VARIANTS

# The options `k8s job` and `k8s prepull` share: the same words choose the same image.
RegistryOpt = typer.Option(..., "--registry", help="HOST[:PORT][/REPOSITORY] the images are in.")
CannOpt = typer.Option(None, "--cann", help="The CANN release wanted, e.g. 8.0.RC3.")
ChipOpt = typer.Option(None, "--chip", help="Only this chip's nodes of --nodes (910b, a3, ...).")
NodesOpt = typer.Option(None, "--nodes", metavar="FILE", callback=paths.FILE,
                        help="`kubectl get nodes -o json` output: the pool (default: this host).")
NameOpt = typer.Option("ascend-train", "--name", help="The job's name (its pre-pull manifest is NAME-prepull).")
TorchOpt = typer.Option(None, "--torch", help="Pin torch (default: the newest that fits).")
PythonOpt = typer.Option(None, "--python", help="Pin Python, e.g. 3.10.")
VariantOpt = typer.Option(NPU, "--variant", metavar="npu|cpu",
                          help="The NPU image (default), or its CPU twin: no NPU asked for, no driver mounted, "
                               "any node of the arch (a manifest to try before any NPU image exists).")


def check_variant(variant: str) -> str:
    """``--variant`` as given, if it is one ascend-build builds."""
    if variant not in VARIANTS:
        raise UserError(f"--variant {variant!r} is none of {', '.join(VARIANTS)}", exit_code=2,
                        fix="--variant npu (the NPU image) or --variant cpu (its CPU twin)")
    return variant


def read_pool(nodes: Optional[Path], chip: Optional[str], root: Path, variant: str = NPU) -> Pool:
    """``--nodes FILE`` (kubectl get nodes -o json), or this host: its probe under ``root``, or for
    the CPU twin (which needs no NPU) any node of this host's arch."""
    from builder.k8s import pool
    from builder.node import host as host_probe
    from builder.node import pull as chooser

    if nodes is None and variant == CPU:
        return pool.Pool(node=chooser.Node(arch=host_arch(), chip=chip, driver=None, firmware=None),
                         names=("this host",), weakest="this host", chip_values=(), drivers=())
    if nodes is not None:
        text = bounded.read_text(nodes, pool.NODES_MAX, "--nodes", "write it with: kubectl get nodes -o json > nodes.json")
        return pool.read_pool(text, str(nodes), chip)
    info = host_probe.probe(root=root, run_npu_smi=True)
    return pool.host_pool(info, info.arch or host_arch(), chip)


@dataclass(frozen=True)
class Choice:
    best: ImageInfo
    image: str  # HOST[:PORT]/REPOSITORY@DIGEST
    subject: str  # "this node" or "the pool"
    verdict: Optional[Verdict] = None  # the trust decision about ``best`` (with a key): what vouches for it


def choose(registry: str, found: Pool, wanted, key, require: str, deadline: Optional[float], on_host: bool,
           retry: str, carry: Optional[Dict[str, Tuple[Sequence[Tuple[str, object]], Sequence[str]]]] = None) -> Choice:
    """The image of ``registry`` that fits every node of ``found``; nothing fits: why, on stderr, exit 1.
    ``retry`` is the command the advice names, ``carry`` this run's flags it repeats (`commands.given`)."""
    from builder.k8s import pool
    from builder.node import pull as chooser
    from builder.registry import Registry

    for left in found.left_out:
        typer.echo(f"note: left out (--chip {found.node.chip}): {left}", err=True)
    address, repository = chooser.split_registry(registry, DEFAULT_IMAGE)
    subject = "this node" if on_host else "the pool"
    verdicts: Dict[str, Verdict] = {}
    with within(deadline):
        best, rejected = chooser.pick(Registry(address), repository, found.node, wanted, key, require, verdicts=verdicts)
    if best is None:
        with commands.given(carry=carry):
            typer.echo(chooser.refusal(f"{address}/{repository}", found.node, rejected, wanted, subject,
                                       retry, pool.describe(found)), err=True)
        raise typer.Exit(1)
    return Choice(best, f"{address}/{repository}@{best.digest}", subject, verdicts.get(best.digest))
