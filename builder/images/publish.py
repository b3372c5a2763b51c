"""One reference for both arches: an image index of a cell's validated arch images.

A cell's arches are built separately (natively or under qemu, perhaps on different
machines) and each passed image is pushed under its own tag, ``<family>-<arch>``. Once
every arch has passed, the index goes under ``<family>`` (``<family>-cpu`` for twins),
so one reference pulls the right image on an x86_64 or an aarch64 node.

Each entry is re-read from the registry, not taken from the build's memory: its
manifest and config are hashed against their digests, and its labels must show that
it passed every tier it owes (``Label.VALIDATED`` and ``vocabulary.required_tiers``), is of that arch in
both its label and its config, is not a stand-in, and agrees with the other arches
on everything but the arch. An arch that failed, was never pushed, or was pushed
without passing stops the index: none is written, and what is there stays.

Example:
    >>> family_of("cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-aarch64-cpu")
    ('cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1', 'cpu')
    >>> family_of("my-cell") is None
    True
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from builder.errors import UserError
from builder.registry import (ARCH_TO_PLATFORM, DOCKER_LIST, DOCKER_MANIFEST, IMAGE_TYPES, OCI_INDEX, Registry,
                              config_labels)
from builder.vocabulary import ARCHS, CPU, NPU, Label, release_tag, required_tiers

# ArchImage -> "" when its signed validation statement is trusted, else why not (`builder.trust.policy.decide`)
Trust = Callable[["ArchImage"], str]

# Labels every arch of one cell shares; the arch's own labels (and seal details) may differ.
SHARED_LABELS = (Label.VARIANT, Label.OS, Label.PYTHON, Label.TORCH, Label.CANN, Label.CHIP, Label.TORCH_NPU,
                 Label.MIN_DRIVER, Label.MIN_FIRMWARE, Label.PRODUCT)


@dataclass(frozen=True)
class ArchImage:
    """One arch's image as the registry holds it."""

    arch: str
    tag: str
    digest: str
    media_type: str
    size: int
    labels: Dict[str, str]


def split_variant(tag: str) -> Tuple[str, str]:
    """A release tag -> (its stem, its variant): ``x-cpu`` is the twin's, anything else the NPU image's.
    The inverse of `index_tag`."""
    return (tag[: -len(CPU) - 1], CPU) if tag.endswith("-" + CPU) else (tag, NPU)


def family_of(tag: str) -> Optional[Tuple[str, str]]:
    """``<family>-<arch>[-cpu]`` -> (family, variant); None for a tag without an arch suffix."""
    stem, variant = split_variant(tag)
    arch = next((a for a in ARCHS if stem.endswith("-" + a)), None)
    return (stem[: -len(arch) - 1], variant) if arch else None


def declared_arches(cells: Iterable[Any]) -> Dict[str, Tuple[str, ...]]:
    """Family (a cell id without its arch) -> the arches the matrix declares for it, in `ARCHS` order.

    Example:
        >>> from types import SimpleNamespace as Cell
        >>> declared_arches([Cell(id="c1-aarch64", arch="aarch64")])
        {'c1': ('aarch64',)}
    """
    found: Dict[str, set] = {}
    for cell in cells:
        found.setdefault(cell.id[: -len(cell.arch) - 1], set()).add(cell.arch)
    return {family: tuple(a for a in ARCHS if a in arches) for family, arches in found.items()}


def index_arches(family: str, declared: Optional[Dict[str, Tuple[str, ...]]], source: str = "the matrix") -> Tuple[Tuple[str, ...], str]:
    """The arches ``family``'s index covers, and why: those ``declared`` for it (the matrix's
    cells), else every arch (the cell is not in ``source``, or no matrix was read).

    Example:
        >>> index_arches("c1", {"c1": ("aarch64",)}, "team.yaml")
        (('aarch64',), 'team.yaml declares aarch64 only for this cell')
        >>> index_arches("c2", {"c1": ("aarch64",)}, "team.yaml")
        (('aarch64', 'x86_64'), 'the cell is not in team.yaml: every arch')
    """
    if declared is None:
        return ARCHS, "no matrix read: every arch"
    arches = declared.get(family)
    if not arches:
        return ARCHS, f"the cell is not in {source}: every arch"
    if len(arches) == 1:
        return arches, f"{source} declares {arches[0]} only for this cell"
    return arches, f"{source} declares {', '.join(arches)} for this cell"


def index_tag(family: str, variant: str) -> str:
    """The tag the index goes under: the family, ``-cpu`` for twins."""
    return release_tag(family, variant)


def why_not(image: ArchImage, family: str, variant: str, architecture: str) -> List[str]:
    """Every reason ``image`` may not enter the index (empty when it may)."""
    labels, reasons = image.labels, []
    if labels.get(Label.CELL) != f"{family}-{image.arch}":
        reasons.append(f"its cell label is {labels.get(Label.CELL) or 'missing'}, not {family}-{image.arch}")
    if labels.get(Label.VARIANT) != variant:
        reasons.append(f"it is a {labels.get(Label.VARIANT) or 'unlabelled'} image, not {variant}")
    # a tier skipped with a reason (one NPU: no all-reduce) did not fail; the seal names it apart
    passed = set((labels.get(Label.VALIDATED_TIERS) or "").split(",")) | set((labels.get(Label.SKIPPED_TIERS) or "").split(","))
    required = required_tiers(variant, cann_only=not labels.get(Label.TORCH))
    if labels.get(Label.VALIDATED) != "true" or not set(required) <= passed:
        missing = [t for t in required if t not in passed]
        reasons.append("it did not pass every tier (not validated" + (f": {', '.join(missing)} missing)" if missing else ")"))
    if labels.get(Label.STAND_IN):
        reasons.append(f"it is a stand-in ({labels[Label.STAND_IN]}), not the cell's own image")
    if labels.get(Label.ARCH) != image.arch or architecture != ARCH_TO_PLATFORM[image.arch]:
        reasons.append(f"it is labelled {labels.get(Label.ARCH) or 'no arch'} and its config says {architecture or 'nothing'}, "
                       f"not {image.arch}")
    return reasons


def read_arch(registry: Registry, repository: str, family: str, variant: str, arch: str) -> Tuple[Optional[ArchImage], List[str]]:
    """The arch's image under ``<family>-<arch>[-cpu]`` and the reasons it may not enter (or why it is absent)."""
    tag = release_tag(f"{family}-{arch}", variant)
    try:
        manifest = registry.manifest(repository, tag)
    except LookupError:
        return None, [_absent(registry, repository, tag)]
    if manifest.is_index or manifest.media_type not in IMAGE_TYPES:
        return None, [f"{repository}:{tag} is not a single-arch image manifest ({manifest.media_type})"]
    config = registry.config(repository, manifest)
    image = ArchImage(arch, tag, manifest.digest, manifest.media_type, len(manifest.body), config_labels(config))
    return image, [f"{tag}: {r}" for r in why_not(image, family, variant, str(config.get("architecture", "")))]


def _absent(registry: Registry, repository: str, tag: str) -> str:
    """Why ``tag`` is not there: never pushed, or pushed only as a stand-in (a twin built on
    another OS, tagged ``<tag>-on-<os>``), which never enters the cell's index."""
    stand_ins = sorted(t for t in registry.tags(repository) if t.startswith(tag + "-on-"))
    if stand_ins:
        return (f"{repository}:{tag} is not in {registry.name}: only the stand-in "
                f"{', '.join(f'{repository}:{t}' for t in stand_ins)} is (a twin built on another OS than the "
                "cell's, labelled as one), and a stand-in never enters the cell's index")
    return f"{repository}:{tag} is not in {registry.name} (it failed, or was never pushed)"


def index_body(images: List[ArchImage]) -> Tuple[bytes, str]:
    """The index JSON (deterministic bytes) and its media type: a Docker manifest list over
    Docker manifests, an OCI index otherwise, as engines expect."""
    docker = all(i.media_type == DOCKER_MANIFEST for i in images)
    media_type = DOCKER_LIST if docker else OCI_INDEX
    body = {"schemaVersion": 2, "mediaType": media_type, "manifests": [
        {"mediaType": i.media_type, "digest": i.digest, "size": i.size,
         "platform": {"architecture": ARCH_TO_PLATFORM[i.arch], "os": "linux"}}
        for i in sorted(images, key=lambda i: i.arch)]}
    return (json.dumps(body, indent=2, sort_keys=True) + "\n").encode(), media_type


def publish(registry: Registry, repository: str, family: str, variant: str,
            archs: Tuple[str, ...] = ARCHS, trust: Optional[Trust] = None) -> Tuple[str, Dict[str, str]]:
    """Write the index of ``family``'s ``archs`` under its tag; (index digest, arch -> digest).

    With ``trust``, an arch image whose labels let it in must also have its signed validation
    statement trusted. Raises UserError naming every arch that may not enter; then nothing is written.
    """
    images, problems = [], []
    for arch in archs:
        image, reasons = read_arch(registry, repository, family, variant, arch)
        if image is not None and not reasons and trust is not None:
            refused = trust(image)
            reasons = [f"{image.tag} ({image.digest}): signed validation refused: {refused}"] if refused else []
        problems += reasons
        if image is not None:
            images.append(image)
    if not problems:
        first = images[0].labels
        problems += [f"{i.tag}: {key} is {i.labels.get(key)!r}, {images[0].tag} has {first.get(key)!r}"
                     for i in images[1:] for key in SHARED_LABELS if i.labels.get(key) != first.get(key)]
    if problems:
        raise UserError(f"no index for {repository}:{index_tag(family, variant)}: every arch must have passed\n  "
                        + "\n  ".join(problems), exit_code=1,
                        fix="build, test and push each arch (`ascend-build image --arch ARCH --push ..."
                            + (" --sign-key KEY`, KEY the private half of --trust-key" if trust is not None else "`")
                            + "), then index again")
    body, media_type = index_body(images)
    digest = registry.put_manifest(repository, index_tag(family, variant), body, media_type)
    return digest, {i.arch: i.digest for i in images}
