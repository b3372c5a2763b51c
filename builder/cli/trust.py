"""The trust commands: `keys generate` (the team's signing pair), `verify` (an image's statements)
and `policy kyverno` (the same check as a Kyverno admission policy).

Each parses its options, calls `builder.trust.signing` / `builder.trust.attached` / `builder.trust.policy` and prints; no logic of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional

import typer

from builder.trust import attached, policy, signing, statements, variant
from builder.registry import split_reference
from builder.cli.app import DeadlineOpt, JsonOpt, app, within
from builder.cli import paths

keys_app = typer.Typer(no_args_is_help=True, help="The team's signing keys (ECDSA P-256, plain PEM).")
app.add_typer(keys_app, name="keys")


@keys_app.command("generate")
def keys_generate_command(
    folder: Path = typer.Argument(..., metavar="DIR", callback=paths.FOLDER, help="Folder of the new pair (made if missing)."),
    name: str = typer.Option("ascend-build", "--name", help="The pair's file name: DIR/NAME.key and DIR/NAME.pub."),
) -> None:
    """Make an ECDSA P-256 key pair: DIR/NAME.key (PKCS#8 PEM, mode 0600) signs, DIR/NAME.pub
    (PEM public key) verifies; hand out the .pub. An existing file is never overwritten.

    The private key is encrypted with the passphrase in the environment variable
    ASCEND_BUILD_KEY_PASSPHRASE when it is set (then every command signing with it needs it
    too), stored unencrypted otherwise.

    Example: ascend-build keys generate keys/ --name team-2026   (export ASCEND_BUILD_KEY_PASSPHRASE first to encrypt)
    """
    key_path, pub_path = signing.generate(folder, name)
    encrypted = (f"encrypted with ${signing.PASSPHRASE_ENV}" if signing.encrypting()
                 else f"NOT encrypted: {signing.PASSPHRASE_ENV} is not set")
    typer.echo(f"private key: {key_path} (mode 0600, {encrypted}): keep it where images are signed")
    checkout = signing.unignored_in_git(key_path)
    if checkout:
        typer.echo(f"warning: {key_path} is inside the git checkout {checkout} and no .gitignore covers it: "
                   f"add '*{signing.KEY_SUFFIX}' to {checkout}/.gitignore before any `git add`", err=True)
    typer.echo(f"public key:  {pub_path}: give it to whoever verifies (ascend-build verify --key, cosign --key)")
    typer.echo(f"keyid:       {signing.fingerprint(signing.load_public(pub_path))}")


def _tiers(predicate: Dict) -> str:
    """A validation predicate's tiers in one line: ``versions passed, collective skipped (why)``."""
    skipped = {t.get("name"): t.get("reason") for t in predicate.get("skippedTiers") or [] if isinstance(t, dict)}
    parts: List[str] = []
    for tier in predicate.get("tiers") or []:
        if isinstance(tier, dict):
            reason = skipped.get(tier.get("name"))
            parts.append(f"{tier.get('name')} {tier.get('status')}" + (f" ({reason})" if reason else ""))
    return ", ".join(parts) or "no tiers"


def _says(found: attached.Found) -> str:
    """What a verified statement says, in one line."""
    predicate = found.checked.predicate
    if found.predicate_type == statements.VALIDATION_V1:
        ran = predicate.get("ranOn") or {}
        where = ran.get("kind", "?") + (f" ({ran['emulated']})" if ran.get("emulated") else "") + (
            f" (stand-in: {ran['standIn']})" if ran.get("standIn") else "")
        npu = ran.get("npuHost") or {}
        if npu:
            where += f", chip {npu.get('chip')}, driver {npu.get('driver')}, firmware {npu.get('firmware')}"
        return (f"{predicate.get('verdict')}: cell {predicate.get('cell')} ({predicate.get('variant')}), "
                f"content hash {predicate.get('contentHash')}, on {where}\n         tiers: {_tiers(predicate)}")
    if found.predicate_type == statements.SLSA_PROVENANCE_V1:
        build = predicate.get("buildDefinition") or {}
        builder = (predicate.get("runDetails") or {}).get("builder") or {}
        params = build.get("externalParameters") or {}
        version = ", ".join(f"{k} {v}" for k, v in (builder.get("version") or {}).items())
        return (f"built by {builder.get('id')} ({version}) from {params.get('matrix')}, cell {params.get('cell')}; "
                f"{len(build.get('resolvedDependencies') or [])} resolved dependencies")
    if found.predicate_type == statements.CYCLONEDX_BOM:
        components = [c for c in predicate.get("components") or [] if isinstance(c, dict)]
        return (f"SBOM (CycloneDX {predicate.get('specVersion')}): {len(components)} components, "
                f"{sum(c.get('type') == 'library' for c in components)} Python distributions of the lock, "
                f"{sum(c.get('group') == 'CANN' for c in components)} CANN packages")
    if found.predicate_type == variant.LAZY_VARIANT_V1:
        image = predicate.get("validatedImage") or {}
        layers = [layer for layer in predicate.get("layers") or [] if isinstance(layer, dict)]
        return (f"a lazy variant ({predicate.get('format')}) of the validated image {image.get('digest')}, signed "
                f"when in {image.get('name')}: the files of its {len(layers)} layer(s) compared "
                f"({sum(int(layer.get('regularFiles') or 0) for layer in layers)} regular files, "
                f"{sum(int(layer.get('links') or 0) for layer in layers)} links); that image's verdict "
                f"{predicate.get('verdict')}, cell {predicate.get('cell')} ({predicate.get('variant')})")
    return "a statement of a type this tool does not read"


@app.command("verify")
def verify_command(
    ref: str = typer.Argument(..., metavar="REGISTRY/REPOSITORY:TAG",
                              help="The image, by tag or @sha256: digest, e.g. 127.0.0.1:5000/ascend-build/pytorch:<cell>-x86_64-cpu"),
    key: Path = typer.Option(..., "--key", callback=paths.FILE,
                             help="The team's public key (the .pub of `ascend-build keys generate`)."),
    require: str = typer.Option(policy.ANY, "--require", metavar="any|npu-host", help=policy.REQUIRE_HELP),
    as_json: bool = JsonOpt,
    deadline: Optional[float] = DeadlineOpt,
) -> None:
    """Check the signed statements attached to an image (cosign's sha256-<digest>.att tag): which
    verify with KEY and are about this very digest, what they say (the smoke test tier by tier,
    the provenance), and why any does not (not signed by this key, another image's statement,
    none attached). Exits 1 unless the image is trusted as `pull`, `run` and `index` trust it: a
    validation statement verifies, says passed, names required tiers and each passed (or was skipped
    with a reason), is about the cell and variant of the image's labels and, when TAG names a cell
    (<cell>, <cell>-cpu, <cell>-cpu-estargz, ...), of TAG (another cell's image under this tag is
    refused, naming both; --json: tag_mismatch), and under --require npu-host says it ran on an NPU
    host. A lazy variant (<tag>-estargz) has no validation statement of its own: it is trusted when
    its lazy-variant statement verifies and binds it to a validated image that is trusted so.

    Example: ascend-build verify 127.0.0.1:5000/ascend-build/pytorch:cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64-cpu --key team.pub
    """
    from builder.registry import Registry

    policy.check_requirement(require)
    public = signing.load_public(key)
    host, repository, reference = split_reference(ref)
    registry = Registry(host)
    with within(deadline):
        result = attached.verify(registry, repository, reference, public)
        labels = policy.labels_of(registry, repository, result.digest) if result.found else {}
        told = policy.verdict(registry, repository, result, labels, public, require)
    why = told.why_not
    if as_json:
        typer.echo(json.dumps({
            "reference": ref, "digest": result.digest, "tag": result.tag, "key": signing.fingerprint(public),
            "require": require, "validated": not why, "why_not": why, "fix": told.fix or None,
            "lazy_variant_of": told.lazy_of or None,
            "tag_names": {"cell": result.named[0], "variant": result.named[1]} if result.named else None,
            "tag_mismatch": policy.tag_mismatch(result, labels, require),
            "statements": [{"layer": f.layer, "predicateType": f.predicate_type, "verified": f.checked.ok,
                            "reason": f.checked.reason, "predicate": f.checked.predicate if f.checked.ok else None}
                           for f in result.found]}, indent=2))
    else:
        typer.echo(f"{ref}\n  digest {result.digest}\n  key    {key} (keyid {signing.fingerprint(public)[:16]})")
        typer.echo(f"  {len(result.found)} statement(s) in {result.tag}" if not result.missing else f"  {result.missing}")
        for f in result.found:
            typer.echo(f"  {'OK  ' if f.checked.ok else 'FAIL'} {f.predicate_type or '(no predicate type)'}")
            typer.echo(f"         {_says(f) if f.checked.ok else f.checked.reason}")
        about = f", about cell {result.named[0]} ({result.named[1]}) as its tag names" if result.named else ""
        if why:
            typer.echo(f"NOT verified: {why}" + (f"\n  fix: {told.fix}" if told.fix else ""), err=True)
        elif told.lazy_of:
            typer.echo(f"verified: {told.vouched}: its lazy-variant statement about this digest, signed by this key, "
                       f"binds it to that image, whose validation statement, signed by this key, says passed{about}; "
                       f"every required tier passed or was skipped with a reason (--require {require})")
        else:
            typer.echo(f"verified: a validation statement about this digest, signed by this key, says passed{about}; "
                       f"every required tier passed or was skipped with a reason (--require {require})")
    if why:
        raise typer.Exit(1)


policy_app = typer.Typer(no_args_is_help=True, help="Admission policies that check the signed statements in a cluster.")
app.add_typer(policy_app, name="policy")


@policy_app.command("kyverno")
def policy_kyverno_command(
    key: Path = typer.Option(..., "--key", callback=paths.FILE,
                             help="The team's public key (the .pub of `ascend-build keys generate`)."),
    images: List[str] = typer.Option(..., "--images", metavar="PATTERN",
                                     help="Image references the policy covers, e.g. 'registry.example/ascend-build/*' "
                                          "(repeatable)."),
    require: str = typer.Option(policy.ANY, "--require", metavar="any|npu-host", help=policy.REQUIRE_HELP),
    name: str = typer.Option("ascend-build-validated", "--name", help="The ClusterPolicy's name."),
) -> None:
    """Print a Kyverno ClusterPolicy (kyverno.io/v1, verifyImages) admitting a Pod's images only when
    their validation statement verifies with KEY and says every required tier passed (or was skipped
    with a reason); --require npu-host: on an NPU host. Apply it with `kubectl apply -f -`.

    Example: ascend-build policy kyverno --key team.pub --images 'registry.example:5000/ascend-build/*' > policy.yaml
    """
    import yaml
    from cryptography.hazmat.primitives import serialization

    from builder.k8s import kyverno

    public = signing.load_public(key)
    pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    document = kyverno.kyverno(pem, images, require, name)
    typer.echo(f"# made by ascend-build policy kyverno; key {key} (keyid {signing.fingerprint(public)[:16]})")
    class Dumper(yaml.SafeDumper):
        """Multi-line strings (the PEM key) as literal blocks, as one writes them by hand."""

    Dumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))
    typer.echo(yaml.dump(document, Dumper=Dumper, sort_keys=False, width=1000), nl=False)
