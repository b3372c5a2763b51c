"""The catalogue's facts, gathered once into one value: which images of a registry are validated, by
whom, what passed, what they weigh, and which cells of the matrix have none.

Every tag of each repository is read (cosign's statement tags aside; an index brings its arch
images). An image is **validated** only when the team's key vouches for it through the one trust
decision `verify`, `pull`, `run` and `index` make (`builder.trust.policy.vouching`, which is
`judge` with the statement it rests on): a validation statement attached to its digest verifies
with the key, is about that digest, says passed with every required tier, and agrees with the
image's labels. What the entry shows of the tiers and of where it ran is that very statement's.
Every other image is listed apart with the reason (no statement, another key, a statement edited
after signing, ...); so is a tag that names another cell than the statement of the image under it.
A lazily pullable variant (``<tag>-estargz``) trusted through its lazy-variant statement is named
beside the validated image it is bound to.

The image's facts are its own, bound to its digest: labels (cell, arch, OS, Python, torch; the NPU
image's CANN, chip, torch_npu, minimum driver), else, for a CPU twin, which carries no CANN label,
its cell id (`builder.cell_id.parse_id`) and the driver its guard requires (its config's ENV).
Sizes are the manifest's layer sizes, compressed as the registry stores them; the bytes an image
shares are those of its layers that another validated image of the catalogue holds too.

Example:
    >>> shell_line(["ascend-build", "pull", "--cann", "8.0.RC3", "--python", "3.10; rm -rf ~"])
    "ascend-build pull --cann 8.0.RC3 --python '3.10; rm -rf ~'"
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from builder import versions
from builder.cell_id import named_by_tag, parse_id
from builder.registry import Manifest, Registry, config_labels
from builder.trust import attached, policy, variant
from builder.trust.attached import is_attached_tag
from builder.trust.signing import PublicKey, fingerprint
from builder.vocabulary import CPU, NPU, REQUIRE_DRIVER_ENV, REQUIRE_FIRMWARE_ENV, VARIANTS, Label

SCHEMA = 1
INDEXED = " (index)"  # after the tag of an index that lists the image


@dataclass(frozen=True)
class Tier:
    """One tier as the validation statement says it ran."""

    name: str
    status: str
    seconds: Optional[float]   # None: the statement gives no time (its smoke report gave none)
    summary: str
    reason: str = ""           # a skipped tier's reason (skippedTiers)


@dataclass(frozen=True)
class Command:
    """A command line a researcher copies: which command, what it does, the line."""

    name: str
    what: str
    line: str


@dataclass(frozen=True)
class Validated:
    """One image the key vouches for, with what it is, where it ran, what passed and what it weighs."""

    anchor: str
    repository: str
    reference: str              # REGISTRY/REPOSITORY@sha256:...
    digest: str
    tags: Tuple[str, ...]       # the tags naming it (an index's tag: "TAG (index)")
    cell: str
    variant: str
    arch: str
    chip: str
    product: str
    cann: str
    torch: str
    torch_npu: str
    python: str
    os: str
    min_driver: str
    min_firmware: str
    stand_in: str               # a twin built on another OS than its cell's: which, and why
    ran_on: str                 # ranOn.kind: npu-host, cpu-twin, emulated, stand-in
    ran_on_detail: str
    smoke_started: str
    tiers: Tuple[Tier, ...]
    compressed_bytes: int
    shared_bytes: int           # of its layers that another validated image of the catalogue holds too
    layers: Tuple[Tuple[str, int], ...]   # (digest, compressed size) of each layer, in its manifest's order
    lazy_variants: Tuple[str, ...]
    commands: Tuple[Command, ...]


@dataclass(frozen=True)
class Refused:
    """An image (or a tag) in the registry that is not validated, and why."""

    repository: str
    tags: Tuple[str, ...]
    digest: str
    claims: str                 # the cell and variant its labels claim ("" when none)
    why: str


@dataclass(frozen=True)
class Missing:
    """A cell of the matrix without a validated image of some variant."""

    cell: str
    cann: str
    chip: str
    arch: str
    missing: Tuple[str, ...]    # the variants without one (npu, cpu)
    validated: Tuple[str, ...]  # the variants with one


@dataclass(frozen=True)
class Catalogue:
    """Everything the site shows; `to_dict` is catalogue.json."""

    registry: str
    repositories: Tuple[str, ...]
    key_name: str
    key_fingerprint: str
    require: str
    generated: str
    validated: Tuple[Validated, ...]
    refused: Tuple[Refused, ...]
    missing: Tuple[Missing, ...]
    cells_in_matrix: int
    unique_bytes: int           # every distinct layer of the validated images, once
    total_bytes: int            # the validated images' sizes added up

    def to_dict(self) -> Dict[str, Any]:
        return {"schema": SCHEMA, **asdict(self)}


@dataclass
class _Seen:
    """An image manifest met under one or more tags."""

    manifest: Manifest
    tags: Set[str] = field(default_factory=set)


def unique_bytes(images: Iterable[Validated]) -> int:
    """What pulling every one of ``images`` onto one node moves: each distinct layer once."""
    return sum(dict(layer for image in images for layer in image.layers).values())


def shell_line(words: Iterable[str]) -> str:
    """``words`` as one shell line, each quoted when it needs it: a value read from a registry never
    becomes shell syntax in a line someone copies."""
    return " ".join(shlex.quote(w) for w in words)


def _images(registry: Registry, repository: str) -> Dict[str, _Seen]:
    """Every image manifest of ``repository`` by digest, with the tags naming it (an index's arch
    images under ``TAG (index)``); statement and referrers tags left out."""
    seen: Dict[str, _Seen] = {}
    for tag in registry.tags(repository):
        if is_attached_tag(tag):
            continue
        try:
            top = registry.manifest(repository, tag)
            if not top.is_index:
                seen.setdefault(top.digest, _Seen(top)).tags.add(tag)
                continue
            listed = top.data.get("manifests")
            for entry in listed if isinstance(listed, list) else []:
                digest = entry.get("digest") if isinstance(entry, dict) else None
                if isinstance(digest, str) and digest.startswith("sha256:"):
                    child = seen.get(digest) or _Seen(registry.manifest(repository, digest))
                    if not child.manifest.is_index:
                        seen.setdefault(digest, child).tags.add(tag + INDEXED)
        except LookupError:
            continue  # deleted while we read
    return seen


def _env(config: Dict) -> Dict[str, str]:
    inner = config.get("config")
    listed = inner.get("Env") if isinstance(inner, dict) else None
    pairs = [str(item).partition("=") for item in (listed if isinstance(listed, list) else [])]
    return {name: value for name, _, value in pairs}


def _layers(manifest: Manifest) -> List[Tuple[str, int]]:
    listed = manifest.data.get("layers")
    return [(str(layer.get("digest")), layer["size"]) for layer in (listed if isinstance(listed, list) else [])
            if isinstance(layer, dict) and isinstance(layer.get("size"), int) and not isinstance(layer.get("size"), bool)]


def _tiers(predicate: Dict) -> Tuple[Tier, ...]:
    reasons = policy.skip_reasons(predicate)
    listed = predicate.get("tiers")
    out = []
    for tier in listed if isinstance(listed, list) else []:
        if not isinstance(tier, dict):
            continue
        seconds = tier.get("seconds")
        number = float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else None
        name = str(tier.get("name"))
        out.append(Tier(name, str(tier.get("status")), number, str(tier.get("summary") or ""), reasons.get(name, "")))
    return tuple(out)


def _ran_on(predicate: Dict) -> Tuple[str, str]:
    """(ranOn.kind, what else the statement says of the host) of a validation predicate."""
    ran: Dict = predicate["ranOn"] if isinstance(predicate.get("ranOn"), dict) else {}
    npu: Dict = ran["npuHost"] if isinstance(ran.get("npuHost"), dict) else {}
    detail = [f"{k} {npu[k]}" for k in ("chip", "driver", "firmware") if npu.get(k)]
    if npu.get("npus"):
        detail.append(f"{npu['npus']} NPU(s)")
    for key, said in (("emulated", "emulated: {}"), ("standIn", "stand-in: {}")):
        if ran.get(key):
            detail.append(said.format(ran[key]))
    if ran.get("buildHostArch"):
        detail.append(f"build host {ran['buildHostArch']}")
    return str(ran.get("kind") or "unnamed"), ", ".join(detail)


def _commands(where: str, reference: str, labels: Dict[str, str], cann: str, key_name: str,
              require: str) -> Tuple[Command, ...]:
    """What a researcher runs with this image: check its statement, pull what fits a node, run it by
    digest, submit a Job for a pool. Each value is quoted for the shell (`shell_line`)."""
    twin = labels.get(Label.VARIANT) == CPU
    policy_words = ["--require", require] if require != policy.ANY else []
    trust = ["--trust-key", key_name, *policy_words]
    wanted = [*(["--cann", cann] if cann else []), *(["--torch", labels[Label.TORCH]] if labels.get(Label.TORCH) else []),
              *(["--python", labels[Label.PYTHON]] if labels.get(Label.PYTHON) else []),
              *(["--variant", CPU] if twin else [])]
    pool = [] if twin else ["--npus", "8", "--nodes", "nodes.json"]
    train = ["python", "train.py"] if twin else ["torchrun", "--nproc_per_node", "8", "train.py"]
    return (
        Command("verify", "check its signed statement",
                shell_line(["ascend-build", "verify", reference, "--key", key_name, *policy_words])),
        Command("pull", "on a node: pull the validated image that fits it (this one when it fits best)",
                shell_line(["ascend-build", "pull", "--registry", where, *wanted, *trust])),
        Command("run", "start this very image, by its digest",
                shell_line(["ascend-build", "run", *trust, reference, "--", "python", "train.py"])),
        Command("k8s job", "a Kubernetes Job for the image that fits the pool",
                shell_line(["ascend-build", "k8s", "job", "--registry", where, *wanted, *pool, *trust, "--", *train])),
    )


def _facts(labels: Dict[str, str], env: Dict[str, str]) -> Dict[str, str]:
    """What the image is, from its labels; a twin's CANN, chip and torch_npu from its cell id, its
    minimum driver and firmware from what its driver guard requires (both bound to the digest)."""
    parsed = parse_id(labels.get(Label.CELL, ""))
    return {"cann": labels.get(Label.CANN) or (parsed.cann if parsed else ""),
            "chip": labels.get(Label.CHIP) or (parsed.chip if parsed else ""),
            "product": labels.get(Label.PRODUCT) or (parsed.product if parsed else ""),
            "torch_npu": labels.get(Label.TORCH_NPU) or (parsed.torch_npu if parsed else ""),
            "min_driver": labels.get(Label.MIN_DRIVER) or env.get(REQUIRE_DRIVER_ENV, ""),
            "min_firmware": labels.get(Label.MIN_FIRMWARE) or env.get(REQUIRE_FIRMWARE_ENV, "")}


def _anchor(repository: str, digest: str) -> str:
    return "img-" + hashlib.sha256(f"{repository}@{digest}".encode()).hexdigest()[:16]


def _claims(labels: Dict[str, str]) -> str:
    cell = labels.get(Label.CELL)
    return f"{cell} ({labels.get(Label.VARIANT) or '?'})" if cell else ""


def _cann_order(text: str) -> Tuple:
    """Newest CANN first; unreadable ones after, by text."""
    parsed = versions.lenient("cann", text)
    return (0, tuple(-n for n in parsed.key), text) if parsed is not None else (1, (), text)


def order(cann: str, chip: str, arch: str, cell: str, variant_name: str) -> Tuple:
    """How the site lists images and cells: newest CANN first, then chip, arch, cell, the NPU image before its twin."""
    return (_cann_order(cann), chip, arch, cell, VARIANTS.index(variant_name) if variant_name in VARIANTS else 2)


@dataclass(frozen=True)
class _Vouched:
    """An image the key vouches for: its manifest and config's facts, the statement, its honest tags."""

    repository: str
    manifest: Manifest
    labels: Dict[str, str]
    env: Dict[str, str]
    statement: attached.Found
    tags: Tuple[str, ...]


def _judged(registry: Registry, repository: str, key: PublicKey, require: str, vouched: List[_Vouched],
            refused: List[Refused], lazy: Dict[Tuple[str, str], List[str]]) -> None:
    """Every image of ``repository`` judged by the one trust decision, into ``vouched``, ``refused`` and
    ``lazy`` ((repository, validated digest) -> the tags of its trusted lazily pullable variants)."""
    for digest, seen in sorted(_images(registry, repository).items()):
        try:
            config = registry.config(repository, seen.manifest)
        except LookupError:
            continue  # deleted while we read
        labels = config_labels(config)
        verification = attached.verify(registry, repository, digest, key)
        statement, why = policy.vouching(verification, labels, require)
        if statement is None and any(f.predicate_type == variant.LAZY_VARIANT_V1 for f in verification.found):
            if not policy.verdict(registry, repository, verification, labels, key, require).why_not:
                for binding in verification.verified(variant.LAZY_VARIANT_V1):
                    bound = binding.checked.predicate.get("validatedImage")
                    lazy.setdefault((repository, str(bound.get("digest") if isinstance(bound, dict) else "")),
                                    []).extend(sorted(seen.tags))
                continue
        if statement is None:
            refused.append(Refused(repository, tuple(sorted(seen.tags)), digest, _claims(labels), why))
            continue
        honest = []
        for tag in sorted(seen.tags, key=lambda t: (t.endswith(INDEXED), t)):  # its own tags first
            named = None if tag.endswith(INDEXED) else named_by_tag(tag)  # an index's tag names no arch
            lie = policy.judge(verification, labels, require, named) if named is not None else ""
            if lie:  # a tag naming another cell than the statement: the tag is refused, not the image
                refused.append(Refused(repository, (tag,), digest, _claims(labels), lie))
            else:
                honest.append(tag)
        vouched.append(_Vouched(repository, seen.manifest, labels, _env(config), statement, tuple(honest)))


def _validated(image: _Vouched, registry_name: str, holders: Dict[str, Set[str]], lazy: Dict[Tuple[str, str], List[str]],
               key_name: str, require: str) -> Validated:
    facts = _facts(image.labels, image.env)
    labels, predicate, digest = image.labels, image.statement.checked.predicate, image.manifest.digest
    where = f"{registry_name}/{image.repository}"
    reference = f"{where}@{digest}"
    layers = _layers(image.manifest)
    ran_on, detail = _ran_on(predicate)
    smoke = predicate.get("smoke")
    return Validated(
        anchor=_anchor(image.repository, digest), repository=image.repository, reference=reference, digest=digest,
        tags=image.tags, cell=labels.get(Label.CELL, ""), variant=labels.get(Label.VARIANT, ""),
        arch=labels.get(Label.ARCH, ""), python=labels.get(Label.PYTHON, ""), os=labels.get(Label.OS, ""),
        torch=labels.get(Label.TORCH, ""), stand_in=labels.get(Label.STAND_IN, ""), **facts,
        ran_on=ran_on, ran_on_detail=detail,
        smoke_started=str(smoke.get("started") or "") if isinstance(smoke, dict) else "",
        tiers=_tiers(predicate), compressed_bytes=sum(size for _, size in layers),
        shared_bytes=sum(size for layer, size in layers if len(holders[layer]) > 1), layers=tuple(layers),
        lazy_variants=tuple(sorted(lazy.get((image.repository, digest), []))),
        commands=_commands(where, reference, labels, facts["cann"], key_name, require))


def gather(registry: Registry, repositories: Sequence[str], key: PublicKey, key_name: str, cells: Sequence[Any],
           require: str = policy.ANY, generated: str = "") -> Catalogue:
    """The catalogue of ``repositories`` of ``registry`` under ``key`` (whose file is ``key_name``):
    every validated image, every other image with the reason, and the ``cells`` (the matrix's:
    ``id``, ``cann``, ``chip``, ``arch``) lacking a validated image of a variant, in any of them."""
    vouched: List[_Vouched] = []
    refused: List[Refused] = []
    lazy: Dict[Tuple[str, str], List[str]] = {}
    for repository in sorted(set(repositories)):
        _judged(registry, repository, key, require, vouched, refused, lazy)
    holders: Dict[str, Set[str]] = {}  # layer -> the images holding it
    for image in vouched:
        for layer, _ in _layers(image.manifest):
            holders.setdefault(layer, set()).add(f"{image.repository}@{image.manifest.digest}")
    validated = sorted((_validated(image, registry.name, holders, lazy, key_name, require) for image in vouched),
                       key=lambda v: (order(v.cann, v.chip, v.arch, v.cell, v.variant), v.repository, v.digest))

    have = {(v.cell, v.variant) for v in validated if not v.stand_in}
    missing = []
    for cell in cells:
        gaps = tuple(v for v in VARIANTS if (cell.id, v) not in have)
        if gaps:
            missing.append(Missing(cell.id, cell.cann, cell.chip, cell.arch, gaps,
                                   tuple(v for v in VARIANTS if v not in gaps)))
    missing.sort(key=lambda m: order(m.cann, m.chip, m.arch, m.cell, NPU))
    refused.sort(key=lambda r: (r.repository, r.tags, r.digest))
    return Catalogue(registry=registry.name, repositories=tuple(sorted(set(repositories))), key_name=key_name,
                     key_fingerprint=fingerprint(key), require=require, generated=generated,
                     validated=tuple(validated), refused=tuple(refused), missing=tuple(missing),
                     cells_in_matrix=len(cells), unique_bytes=unique_bytes(validated),
                     total_bytes=sum(v.compressed_bytes for v in validated))
