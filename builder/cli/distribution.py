"""Distribution commands: `mirror` (images with their statements, to a registry or an OCI layout)
and `k8s mirror-config` (the files that make nodes pull through a mirror).

Each parses its options, calls `builder.node.mirror` or `builder.k8s.node_mirrors`, and prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from builder.cli.app import LOCK_DEADLINE, DeadlineOpt, JsonOpt, app, interruptible, within
from builder.cli.k8s import k8s_app
from builder.cli import paths
from builder.cli.node import RequireOpt
from builder.cli.trust_key import TrustKeyOpt, trust_key as decide_trust_key
from builder.vocabulary import DEFAULT_IMAGE

MIRROR_DEADLINE = LOCK_DEADLINE  # a selection of images of GBs each; every blob has its own deadline too


@app.command("mirror")
def mirror_command(
    source: str = typer.Argument(..., metavar="SRC", callback=paths.REGISTRY_OR_LAYOUT, help="HOST[:PORT][/REPOSITORY] or oci:FOLDER (an OCI image layout)."),
    destination: str = typer.Argument(..., metavar="DST", callback=paths.REGISTRY_OR_LAYOUT, help="HOST[:PORT][/REPOSITORY] or oci:FOLDER (made if absent)."),
    cann: Optional[str] = typer.Option(None, "--cann", help="Only images of this CANN release, e.g. 8.0.RC3."),
    chip: Optional[str] = typer.Option(None, "--chip", help="Only images for this chip (910b, a3, ...)."),
    cells: List[str] = typer.Option([], "--cell", help="Only this cell's images (repeatable)."),
    trust_key: Optional[str] = TrustKeyOpt,
    require: str = RequireOpt,
    warm: bool = typer.Option(False, "--warm", help="DST is a pull-through cache of SRC: copy nothing, make it "
                                                    "store every blob of the selected images, and wait until it does."),
    as_json: bool = JsonOpt,
    deadline: Optional[float] = DeadlineOpt,
) -> None:
    """Copy validated images by digest, with every statement attached to them, from SRC to DST.

    With --trust-key (or $ASCEND_BUILD_TRUST_KEY) every selected image's validation statement must
    verify at SRC before anything is copied, and again on DST before any tag is put there. Blobs DST
    holds are skipped (mounted when SRC and DST are one registry); a run again of an unchanged
    selection copies no blob byte. Credentials as `pull` and `push` take them, per registry.

    With --warm, DST is a pull-through cache in front of SRC (HOST[:PORT], serving SRC's repository):
    each blob of the selected images (both arches of an index, and their statements) is asked of the
    cache until it answers from its own storage, so that N nodes pulling through it at once cost SRC
    one copy of each blob.

    Example: ascend-build mirror registry.example:5000/ascend-build/pytorch oci:./carry --cann 8.0.RC3 --trust-key team.pub
    """
    from builder.node import mirror
    from builder.trust import policy

    policy.check_requirement(require)
    trusted = decide_trust_key(trust_key)
    key = trusted.key
    selection = mirror.Selection(cann=cann, chip=chip, cells=tuple(cells))
    if warm:
        return _warm(source, destination, selection, trusted, require, as_json, deadline)
    with interruptible(), within(deadline, MIRROR_DEADLINE):
        src = mirror.place(source, DEFAULT_IMAGE, create=False)
        dst = mirror.place(destination, DEFAULT_IMAGE, create=True)
        units, figures = mirror.mirror(src, dst, selection, key, require,
                                       say=(lambda _: None) if as_json else lambda line: typer.echo(f"mirrored {line}"))
    attached = mirror.statements_attached(units)
    if key is not None:
        verified = f"statements verified at the source and on the destination with {trusted.path} (--require {require})"
    elif attached:
        verified = (f"no --trust-key: the {attached} statement manifest(s) were not checked (each is on the destination "
                    "as at the source)")
    else:
        verified = ("no --trust-key, and no statement is attached to these images: nothing vouches for them on the "
                    "destination (`verify` and `pull --trust-key` refuse them)")
    if as_json:
        typer.echo(json.dumps({"source": src.name, "destination": dst.name, "tags": [u.tag for u in units],
                               "digests": {u.tag: u.top.digest for u in units}, "verified": key is not None,
                               "statements": attached, **figures.to_dict()}, indent=2))
        return
    typer.echo(f"{src.name} -> {dst.name}: {len(units)} tag(s)\n  {mirror.describe(figures)}\n  {verified}")


def _warm(source: str, destination: str, selection, trusted, require: str, as_json: bool,
          deadline: Optional[float]) -> None:
    from builder.node import cache_warm, mirror

    with interruptible(), within(deadline, MIRROR_DEADLINE):
        src = mirror.place(source, DEFAULT_IMAGE, create=False)
        cache = cache_warm.cache_of(destination, src)
        units, figures = cache_warm.warm(src, cache, selection, trusted.key, require,
                                         say=(lambda _: None) if as_json else lambda line: typer.echo(f"warmed {line}"))
    where = f"{cache.name}/{src.repository}"
    verified = (f"statements verified at the source with {trusted.path} (--require {require})"
                if trusted.key is not None else "no --trust-key: the source's statements were not checked")
    if as_json:
        typer.echo(json.dumps({"source": src.name, "cache": where, "tags": [u.tag for u in units],
                               "digests": {u.tag: u.top.digest for u in units}, "verified": trusted.key is not None,
                               **figures.to_dict()}, indent=2))
        return
    typer.echo(f"{src.name} -> the cache {where}: {len(units)} tag(s)\n  {cache_warm.describe(figures)}\n  {verified}")


@k8s_app.command("mirror-config")
def mirror_config_command(
    mirrors: List[str] = typer.Option(..., "--mirror", metavar="URL",
                                      help="A mirror nodes pull through, e.g. http://10.0.0.5:5000 (repeatable: tried in order)."),
    registry: str = typer.Option(..., "--registry", metavar="HOST[:PORT]", help="The registry the images are named by."),
    out: Optional[Path] = typer.Option(None, "--out", metavar="FOLDER", callback=paths.FOLDER,
                                       help="Write certs.d/<host>/hosts.toml and daemon.json under FOLDER "
                                            "(default: print both)."),
) -> None:
    """containerd's hosts.toml and Docker's registry-mirrors, so nodes pull through the mirrors, the
    registry itself the fallback.

    containerd: /etc/containerd/certs.d/<registry>/hosts.toml (the CRI plugin's config_path must name
    /etc/containerd/certs.d). Docker: the "registry-mirrors" key of /etc/docker/daemon.json, which
    Docker uses only for Docker Hub's images.

    Example: ascend-build k8s mirror-config --registry registry.example:5000 --mirror http://10.0.0.5:5000
    """
    from builder.k8s import node_mirrors

    config = node_mirrors.configure(registry, mirrors)
    if out is None:
        typer.echo(f"# {config.hosts_path}\n{config.hosts_toml}\n# daemon.json\n{config.daemon_json}", nl=False)
        for note in config.notes:
            typer.echo(f"note: {note}", err=True)
        return
    for path in node_mirrors.write(config, out):
        typer.echo(f"wrote {path}", err=True)
    for note in config.notes:
        typer.echo(f"note: {note}", err=True)
