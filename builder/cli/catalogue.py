"""`catalogue`: a static site (HTML pages and catalogue.json) of a registry's validated images.

It parses its options, calls `builder.catalogue.collect` (the facts) and `builder.catalogue.pages`
(the site), and prints what it wrote; no logic of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from builder.cli import paths
from builder.cli.app import DeadlineOpt, JsonOpt, app, within
from builder.cli.build import _default as default_path
from builder.cli.node import RequireOpt
from builder.cli.trust_key import OPTION, TrustKeyOpt, trust_key as decide_trust_key
from builder.errors import UserError


@app.command("catalogue")
def catalogue_command(
    registry_value: str = typer.Option(..., "--registry", metavar="HOST[:PORT][/NAMESPACE]",
                                       help="Where `image --push` put the images: each repository the matrix's "
                                            "cells name (image:) is read under it."),
    out: Path = typer.Option(..., "--out", "-o", callback=paths.FOLDER,
                             help="Folder of the site (made, or an earlier catalogue replaced whole)."),
    trust_key: Optional[str] = TrustKeyOpt,
    require: str = RequireOpt,
    matrix_path: Optional[Path] = typer.Option(None, "--matrix", "-m", callback=paths.FILE_OR_FOLDER,
                                               help="The matrix whose cells without a validated image are listed "
                                                    "as missing, in whichever repository (default: ./matrix/ of "
                                                    "this folder)."),
    generated: str = typer.Option("", "--generated", metavar="TEXT",
                                  help="A line shown as the site's 'Generated:', e.g. a time or a commit (default: "
                                       "none, so that the same registry and key give the same bytes)."),
    as_json: bool = JsonOpt,
    deadline: Optional[float] = DeadlineOpt,
) -> None:
    """Write a static site of the validated images in a registry: index.html, a page per CANN
    release, chip and arch, and catalogue.json. No page needs JavaScript. The repositories read are
    those the matrix's cells name, under --registry as `image --push` puts them.

    An image is listed as validated only when its signed validation statement is trusted with the key,
    as `verify`, `pull`, `run` and `index` decide: for each, its cell, chip, arch, versions, the tiers
    with their times, where it ran, the minimum driver, digest, compressed size and the bytes it
    shares with the others, the key, and the commands to verify, pull, run it and submit a Job. Images
    that are not validated are listed apart with the reason; cells of the matrix without a validated
    image, as missing.

    Example: ascend-build catalogue --registry registry.example:5000 --trust-key team.pub --out site/
    """
    from builder.catalogue import collect, pages
    from builder.images import matrix
    from builder.registry import Registry
    from builder.trust import policy

    policy.check_requirement(require)
    trusted = decide_trust_key(trust_key)
    if trusted.key is None:
        raise UserError("the catalogue lists only images whose signed statements verify, and no key was given",
                        exit_code=2, fix=f"give {OPTION} FILE, the team's public key (the .pub of `ascend-build keys "
                                         "generate`)")
    host, _, namespace = registry_value.strip("/").partition("/")
    cells = matrix.load(matrix_path or default_path("matrix")).cells
    repositories = sorted({f"{namespace}/{cell.image}" if namespace else cell.image for cell in cells})
    if not repositories:
        raise UserError("the matrix has no cells: no repository to read", exit_code=2,
                        fix="give --matrix the team's matrix (its cells name the repositories)")
    registry = Registry(host)
    with within(deadline):
        catalogue = collect.gather(registry, repositories, trusted.key, Path(trusted.path).name, cells, require,
                                   generated)
    written = pages.site(catalogue, out)
    if as_json:
        typer.echo(json.dumps({"out": str(out), "files": list(written), "validated": len(catalogue.validated),
                               "missing": len(catalogue.missing), "not_validated": len(catalogue.refused)}, indent=2))
        return
    typer.echo(f"{out}/{pages.INDEX}: {len(catalogue.validated)} validated image(s), {len(catalogue.missing)} cell(s) "
               f"missing a validated image, {len(catalogue.refused)} image(s) or tag(s) not validated; "
               f"{len(written)} files")
