"""A lazily pullable variant of a validated image, bound to it by a signed statement.

`image --push --lazy estargz` pushes an eStargz variant of a validated image
(`builder.images.lazy`). The variant is another digest, and its diff IDs are not the validated
image's: each layer is re-written (its files in another order, a TOC and eStargz's landmark files
added), so its uncompressed tar is another tar. What stays true, and can be checked, is the files:

    every regular file of each original layer (its path, its permission bits and the sha256 of its
    content) and every link (its path, hard or symbolic, and its target) is in the variant layer
    of the same index, as the variant's TOC describes it, and that TOC has no other regular file
    and no other link, besides eStargz's landmarks (`builder.estargz.LANDMARKS`).

`bind` checks exactly that (each original layer streamed from the registry and hashed file by file,
each variant layer's TOC read by Range and checked against its manifest annotation) and returns the
predicate of the statement that says so (`LAZY_VARIANT_V1`): the variant's digest as the subject,
the validated image's digest, both sides' layer and diff IDs, the TOC digests, and per layer the
count of files and links and the sha256 of their sorted listing. Directories, owners, times and
extended attributes are not compared.

The statement records the signer's check; a verifier (`builder.trust.policy.decide`, the one
decision of `verify`, `pull`, `run`, `index`, `k8s job` and `mirror`) trusts the variant only
through it: the statement verifies with the key and names this variant, the variant's manifest
holds the layers and TOC digests it lists, the validated image it names is in the same repository
with the variant's labels, and that image's own validation statement passes the same judge.

Example:
    >>> listing_digest([("usr/bin/x", 0o755, "sha256:ab")], [("usr/bin/y", "x", "symlink")])[:7]
    'sha256:'
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from typing import Any, Dict, List, Tuple

from builder import estargz
from builder.errors import UserError
from builder.registry import Manifest, Registry

LAZY_VARIANT_V1 = "https://ascend-build.io/attestations/lazy-variant/v1"
BINDING = ("every regular file (path, permission bits, sha256 of its content) and every link (path, hard or "
           "symbolic, target) of each layer of the validated image is in the variant's layer of the same index "
           "as its eStargz TOC describes it, and that TOC has no other regular file or link besides eStargz's "
           "landmarks; directories, owners, times and extended attributes are not compared")

Files = List[Tuple[str, int, str]]   # (path, permission bits, sha256)
Links = List[Tuple[str, str, str]]   # (path, target, "symlink" | "hardlink")


def _name(path: str) -> str:
    """A tar member's or TOC entry's name as one path: no ``./`` or ``/`` before, no ``/`` after."""
    while path.startswith("./"):
        path = path[2:]
    return path.strip("/")


def listing_digest(files: Files, links: Links) -> str:
    """The sha256 of the sorted listing of files and links (what the statement records of a layer)."""
    text = json.dumps({"files": sorted(files), "links": sorted(links)}, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def tar_listing(stream, media_type: str) -> Tuple[Files, Links]:
    """Every regular file and link of the layer tar ``stream`` (gzip or plain, by ``media_type``)."""
    if "zstd" in media_type:
        raise UserError(f"a layer of type {media_type} cannot be compared here (zstd is not read)", exit_code=1,
                        fix="build the image with gzip layers (Docker's default)")
    files: Files = []
    links: Links = []
    with tarfile.open(fileobj=stream, mode="r|gz" if media_type.endswith("gzip") else "r|") as tar:
        for member in tar:
            name = _name(member.name)
            if member.isreg():
                handle = tar.extractfile(member)
                digest = hashlib.sha256()
                while handle is not None:
                    block = handle.read(1 << 20)
                    if not block:
                        break
                    digest.update(block)
                files.append((name, member.mode & 0o7777, "sha256:" + digest.hexdigest()))
            elif member.issym() or member.islnk():
                links.append((name, member.linkname if member.issym() else _name(member.linkname),
                              "symlink" if member.issym() else "hardlink"))
    while stream.read(1 << 20):  # to its end: a `Checked` stream checks the blob's digest there
        pass
    return files, links


def toc_listing(layer: estargz.Layer) -> Tuple[Files, Links]:
    """Every regular file and link an eStargz TOC describes (its landmarks left out)."""
    files: Files = []
    links: Links = []
    for entry in layer.toc["entries"]:
        if not isinstance(entry, dict):
            continue
        name, kind = _name(str(entry.get("name", ""))), entry.get("type")
        if kind == "reg" and name not in estargz.LANDMARKS:
            files.append((name, int(entry.get("mode", 0) or 0) & 0o7777,
                          str(entry.get("digest") or "sha256:" + hashlib.sha256(b"").hexdigest())))
        elif kind == "symlink":
            links.append((name, str(entry.get("linkName", "")), "symlink"))
        elif kind == "hardlink":
            links.append((name, _name(str(entry.get("linkName", ""))), "hardlink"))
    return files, links


def _differences(original: Tuple[Files, Links], variant: Tuple[Files, Links]) -> List[str]:
    out = []
    for what, a, b in (("regular file", original[0], variant[0]), ("link", original[1], variant[1])):
        theirs = {entry[0]: entry for entry in b}
        ours = {entry[0]: entry for entry in a}
        out += [f"{what} {n} is not in the variant" for n in sorted(set(ours) - set(theirs))][:3]
        out += [f"{what} {n} is only in the variant" for n in sorted(set(theirs) - set(ours))][:3]
        out += [f"{what} {n} differs: {ours[n][1:]} != {theirs[n][1:]}"
                for n in sorted(set(ours) & set(theirs)) if ours[n] != theirs[n]][:3]
    return out


def _diff_ids(registry: Registry, repository: str, manifest: Manifest) -> List[str]:
    ids = (registry.config(repository, manifest).get("rootfs") or {}).get("diff_ids")
    return [str(i) for i in ids] if isinstance(ids, list) else []


def bind(registry: Registry, repository: str, validated: str, variant: str, validation: Dict[str, Any],
         prefetch: Dict[str, Any]) -> Dict[str, Any]:
    """Check that ``variant`` holds the files of ``validated`` (`BINDING`) and return the predicate of
    the statement saying so; ``validation``: the validated image's validation predicate (its verdict,
    cell and variant are copied), ``prefetch``: what the variant's prioritized files were. Raises
    UserError naming the first differences when it does not hold."""
    original, lazy = registry.manifest(repository, validated), registry.manifest(repository, variant)
    ours, theirs = list(original.data.get("layers") or []), list(lazy.data.get("layers") or [])
    if len(ours) != len(theirs):
        raise UserError(f"the variant {variant} has {len(theirs)} layers, the validated image {validated} "
                        f"{len(ours)}: it is not a layer-by-layer conversion", exit_code=1,
                        fix="convert the validated image again")
    ids, lazy_ids = _diff_ids(registry, repository, original), _diff_ids(registry, repository, lazy)
    layers = []
    for index, (a, b) in enumerate(zip(ours, theirs)):
        with registry.open_blob(repository, str(a["digest"]), int(a["size"])) as stream:
            files, links = tar_listing(stream, str(a.get("mediaType", "")))
        try:
            toc = estargz.from_registry(registry, repository, b)
        except estargz.Corrupt as exc:
            raise UserError(f"layer {index} of the variant {variant}: {exc}", exit_code=1,
                            fix="convert the validated image again") from None
        found = toc_listing(toc)
        differences = _differences((files, links), found)
        if differences:
            raise UserError(f"layer {index} of the variant {variant} does not hold the files of the validated image's "
                            f"layer {a['digest']}: " + "; ".join(differences[:6]), exit_code=1,
                            fix="convert the validated image again; no statement was signed for this variant")
        layers.append({
            "original": {"digest": a["digest"], "diffID": ids[index] if index < len(ids) else None},
            "variant": {"digest": b["digest"], "diffID": lazy_ids[index] if index < len(lazy_ids) else None,
                        "tocDigest": toc.toc_digest},
            "regularFiles": len(files), "links": len(links), "listingSha256": listing_digest(files, links)})
    return {"format": "estargz", "verdict": validation.get("verdict"), "cell": validation.get("cell"),
            "variant": validation.get("variant"),
            "validatedImage": {"digest": validated, "name": f"{registry.name}/{repository}"},
            "binding": BINDING, "layers": layers, "prefetch": prefetch}


def manifest_why_not(manifest: Manifest, predicate: Dict[str, Any]) -> str:
    """Why the variant's manifest does not hold the layers (and TOC digests) the binding statement lists ("" when it does)."""
    listed = [layer.get("variant") or {} for layer in predicate.get("layers") or [] if isinstance(layer, dict)]
    held = [layer for layer in manifest.data.get("layers") or [] if isinstance(layer, dict)]
    pairs = [(str(m.get("digest")), str((m.get("annotations") or {}).get(estargz.TOC_DIGEST, ""))) for m in held]
    wanted = [(str(v.get("digest")), str(v.get("tocDigest"))) for v in listed if isinstance(v, dict)]
    if not wanted or pairs != wanted:
        return "its lazy-variant statement lists other layers than the variant's manifest holds"
    return ""


def is_lazy(manifest: Manifest) -> bool:
    """Whether ``manifest`` is an eStargz image: it has layers, and each carries the TOC digest annotation
    (`builder.estargz.TOC_DIGEST`) ctr-remote's conversion gives it. Read from the manifest, which the
    digest binds, so an image tells it is a variant even with no statement attached."""
    layers = manifest.data.get("layers")
    return bool(layers) and isinstance(layers, list) and all(
        isinstance(layer, dict) and isinstance(layer.get("annotations"), dict)
        and estargz.TOC_DIGEST in layer["annotations"] for layer in layers)
