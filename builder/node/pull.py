"""Pick the validated image that fits a node, from registry labels alone, and pull it by digest.

A node has one arch, one chip, one driver and one firmware. Every image built by
ascend-build carries its requirements as labels (``Label.MIN_DRIVER``, ``CHIP``, ``ARCH``,
``VALIDATED`` of ``builder.vocabulary``), so the choice needs no pull:
keep the sealed NPU images this node can run, prefer the newest torch (then
torch_npu), pull that one **by digest** so what runs is exactly what was checked,
and check the labels again after the pull. When nothing fits, every candidate
says why, and `suggestions` says which upgrade or which other CANN would fit.

Example:
    >>> node = Node(arch="aarch64", chip="910b", driver="24.1.RC3", firmware="7.5.0.1.129")   # doctest: +SKIP
    >>> best, rejected = choose(infos, node, Wanted(cann="8.0.RC3"))                         # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from builder import commands, versions
from builder.trust.attached import is_attached_tag
from builder.cell_id import parse_id
from builder.errors import UserError
from builder.registry import ImageInfo, Registry
from builder.vocabulary import CANDIDATE_SUFFIX, LAZY_FORMATS, NPU, Label

# ImageInfo -> "" when its signed validation statement is trusted, else why not (`builder.trust.policy.decide`)
Trust = Callable[[ImageInfo], str]
TRUST_REFUSED = "signed validation refused: "


@dataclass(frozen=True)
class Node:
    """What a node offers; None means unknown (then requirements on it cannot be confirmed)."""

    arch: str
    chip: Optional[str]
    driver: Optional[str]
    firmware: Optional[str]
    # Requirements not checked here ("firmware"), because nothing can show them before the container
    # starts: Kubernetes node labels carry no firmware unless `host --nfd` wrote it. The caller says so.
    unchecked: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Wanted:
    """What the user asked for: a CANN release, optionally a torch and a Python; the NPU image, or
    its CPU twin (``variant``)."""

    cann: Optional[str] = None
    torch: Optional[str] = None
    python: Optional[str] = None
    variant: str = NPU


def why_not(info: ImageInfo, node: Node, wanted: Wanted) -> List[str]:
    """Every reason ``info`` does not fit; empty when it fits."""
    labels = info.labels
    if not labels.get(Label.CELL):
        return ["not built by ascend-build (no io.ascend-build labels)"]
    reasons = []
    if labels.get(Label.VARIANT) != wanted.variant:
        reasons.append("CPU twin, not an NPU image" if wanted.variant == NPU else "NPU image, not a CPU twin")
    if labels.get(Label.VALIDATED) != "true":
        reasons.append(f"not validated (a {CANDIDATE_SUFFIX}: run `ascend-build promote` on an NPU host)")
    if labels.get(Label.ARCH) != node.arch:
        reasons.append(f"wrong arch: {labels.get(Label.ARCH) or info.architecture or 'unknown'}, node is {node.arch}")
    chip = labels.get(Label.CHIP)
    if chip and chip != node.chip:
        reasons.append(f"chip {chip} is not this node's ({node.chip or 'unknown'})")
    cann = labels.get(Label.CANN) or cann_of(info)
    if wanted.cann and not _same_cann(cann, wanted.cann):
        reasons.append(f"CANN {cann or 'unknown'}, not {wanted.cann}")
    if wanted.torch and labels.get(Label.TORCH) != wanted.torch:
        reasons.append(f"torch {labels.get(Label.TORCH)}, not {wanted.torch}")
    if wanted.python and labels.get(Label.PYTHON) != wanted.python:
        reasons.append(f"Python {labels.get(Label.PYTHON)}, not {wanted.python}")
    for what, kind, have, need in (("driver", "hdk", node.driver, labels.get(Label.MIN_DRIVER)),
                                   ("firmware", "firmware", node.firmware, labels.get(Label.MIN_FIRMWARE))):
        if not need or what in node.unchecked:
            continue
        if not have:
            reasons.append(f"node {what} unknown; requires {need}")
        elif versions.meets_minimum(kind, have, need) is not True:  # unreadable cannot be shown new enough
            reasons.append(f"{what} {have} < required {need}")
    return reasons


def cann_of(info: ImageInfo) -> str:
    """A twin carries no CANN label: its cell id (or else its tag) names it, read by ``cell_id.parse_id``;
    "" when neither is a derived id.

    Example:
        >>> cann_of(ImageInfo("cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64-cpu", "", {}, ""))
        '8.0.RC3'
    """
    for name in (info.labels.get(Label.CELL, ""), info.tag):
        parsed = parse_id(name)
        if parsed is not None:
            return parsed.cann
    return ""


def _same_cann(a: str, b: str) -> bool:
    """Equal under CANN's rules (8.0.RC2.beta1 == 8.0.RC2); unreadable ones as text."""
    parsed = versions.lenient("cann", a), versions.lenient("cann", b)
    return parsed[0] == parsed[1] if None not in parsed else a.lower() == b.lower()


def _newest_first(info: ImageInfo) -> Tuple:
    def key(label: str):
        return versions.lenient("python_package", info.labels.get(label)) or versions.lenient("python_package", "0")
    # of two that tie, the validated image itself before its lazily pullable variant (<tag>-estargz),
    # which a node without a lazy snapshotter pulls whole, and a little larger
    lazy = any(info.tag.endswith("-" + fmt) for fmt in LAZY_FORMATS)
    return (key(Label.TORCH), key(Label.TORCH_NPU), not lazy, info.tag)


def choose(infos: List[ImageInfo], node: Node, wanted: Wanted,
           trust: Optional[Trust] = None) -> Tuple[Optional[ImageInfo], List[Tuple[ImageInfo, List[str]]]]:
    """The best fitting image (newest torch, then torch_npu) and every rejected one with its reasons.

    With ``trust``, an image that fits on its labels is a candidate only when its signed
    validation statement is trusted (asked only of those: each asks the registry)."""
    fitting, rejected = [], []
    for info in infos:
        reasons = why_not(info, node, wanted)
        if not reasons and trust is not None:
            refused = trust(info)
            reasons = [TRUST_REFUSED + refused] if refused else []
        (rejected.append((info, reasons)) if reasons else fitting.append(info))
    best = max(fitting, key=_newest_first) if fitting else None
    return best, rejected


def suggestions(rejected: List[Tuple[ImageInfo, List[str]]], node: Node, wanted: Wanted,
                retry: str = "pull", subject: str = "this node") -> List[str]:
    """What would make something fit: a driver/firmware upgrade, or another CANN (``retry``: the
    command to run again with it; ``subject``: what the advice is about, for one node or a pool)."""
    out = []
    host_only = [info for info, reasons in rejected
                 if reasons and all(r.startswith(("driver", "firmware", "node driver", "node firmware")) for r in reasons)]
    if host_only:
        drivers = sorted({i.labels.get(Label.MIN_DRIVER, "") for i in host_only} - {""}, key=versions.hdk)
        firmwares = sorted({i.labels.get(Label.MIN_FIRMWARE, "") for i in host_only} - {""}, key=versions.firmware)
        whose = "the node's" if subject == "this node" else "every node's"
        line = f"upgrade {whose} driver to {drivers[0]} or newer" if drivers else f"upgrade {whose} driver"
        if firmwares:
            line += f" and {'its' if subject == 'this node' else 'their'} firmware to {firmwares[0]} or newer (same Ascend HDK release)"
        out.append(line)
    if wanted.cann:
        other = Wanted(cann=None, torch=wanted.torch, python=wanted.python, variant=wanted.variant)
        fits = sorted({i.labels.get(Label.CANN) or cann_of(i) or "" for i, reasons in rejected
                       if not why_not(i, node, other) and not any(r.startswith(TRUST_REFUSED) for r in reasons)} - {""},
                      key=versions.cann)
        if fits:
            again = commands.suggest(retry, "--cann", fits[-1], quoted=False)
            out.append(f"another CANN fits {subject}: " + ", ".join(fits) + f" ({again})")
    return out


def rejections_to_dicts(rejected: List[Tuple[ImageInfo, List[str]]]) -> List[Dict[str, object]]:
    """JSON-able: each refused image's tag, digest and reasons (``pull --json`` when nothing fits).

    Example:
        >>> rejections_to_dicts([(ImageInfo("t", "sha256:ab", {}, "amd64"), ["not validated"])])
        [{'tag': 't', 'digest': 'sha256:ab', 'reasons': ['not validated']}]
    """
    return [{"tag": info.tag, "digest": info.digest, "reasons": list(reasons)} for info, reasons in rejected]


def format_rejections(rejected: List[Tuple[ImageInfo, List[str]]]) -> str:
    return "\n".join(f"  {info.tag}: " + "; ".join(reasons) for info, reasons in rejected)


def pick(registry: Registry, repository: str, node: Node, wanted: Wanted, key=None, require: str = "any",
         verdicts: Optional[Dict[str, Any]] = None) -> Tuple[Optional[ImageInfo], List[Tuple[ImageInfo, List[str]]]]:
    """The choice `pull` and `k8s job` both make: every image of ``repository`` for ``node.arch``,
    the best that fits ``node`` and ``wanted``, and every rejected one with its reasons.

    With a public ``key`` (`builder.trust.signing.load_public`), an image fitting on its labels is a
    candidate only when its signed validation statement verifies and says ``require`` passed.

    Parameters:
        registry, repository: where the images are (``split_registry`` of ``--registry``).
        node: what the node, or the weakest node of a pool, offers.
        wanted: the CANN/torch/Python/variant asked for.
        key, require: ``--trust-key`` and ``--require`` (``builder.trust.policy``).
        verdicts: given, filled with the trust decision (`builder.trust.policy.Verdict`) of each image
            asked, by digest: what vouches for the chosen one (a lazy variant names its validated image).

    Example:
        >>> best, rejected = pick(Registry("127.0.0.1:5000"), "ascend-build/pytorch", node, Wanted(cann="8.0.RC3"))  # doctest: +SKIP
    """
    from builder.trust import policy

    def trust(image: ImageInfo) -> str:
        verdict = policy.decide(registry, repository, image.digest, image.labels, key, require)
        if verdicts is not None:
            verdicts[image.digest] = verdict
        return verdict.line

    return choose(listing(registry, repository, node.arch), node, wanted, trust if key is not None else None)


def refusal(where: str, node: Node, rejected: List[Tuple[ImageInfo, List[str]]], wanted: Wanted,
            subject: str = "this node", retry: str = "pull", detail: str = "") -> str:
    """The "nothing fits" text: what was looked at, why each image does not fit, and which upgrade
    or other CANN would (``where``: registry/repository; ``subject``: "this node" or "the pool",
    ``detail``: said before the node's facts; ``retry``: the command the advice names).

    Example:
        >>> print(refusal("r:5000/p", Node("aarch64", "910b", "24.1.RC3", None), [], Wanted()))
        no image in r:5000/p fits this node (arch aarch64, chip 910b, driver 24.1.RC3, firmware unknown):
          (no tags)
    """
    firmware_unknown = "not checked" if "firmware" in node.unchecked else "unknown"
    lines = [f"no image in {where} fits {subject} ({detail}arch {node.arch}, chip {node.chip or 'unknown'}, "
             f"driver {node.driver or 'unknown'}, firmware {node.firmware or firmware_unknown}):",
             format_rejections(rejected) or "  (no tags)"]
    lines += [f"  fix: {tip}" for tip in suggestions(rejected, node, wanted, retry, subject)]
    return "\n".join(lines)


def split_registry(value: str, default_repository: str) -> Tuple[str, str]:
    """``host[:port][/repository]`` -> (host, repository)."""
    host, _, repository = value.strip("/").partition("/")
    if not host:
        raise UserError(f"--registry {value!r} names no registry host", fix="write e.g. --registry 127.0.0.1:5000")
    return host, repository or default_repository


def verify_pulled(expected: Dict[str, str], actual: Dict[str, str], ref: str) -> None:
    """The labels after the pull must be the ones the choice was made on."""
    if expected != actual:
        differs = sorted(k for k in set(expected) | set(actual) if expected.get(k) != actual.get(k))
        raise UserError(f"{ref}: the pulled image's labels differ from the registry's ({', '.join(differs)})",
                        fix="the registry changed under us; run the pull again", exit_code=1)


def listing(registry: Registry, repository: str, arch: str) -> List[ImageInfo]:
    """Every tag of ``repository`` with its digest and labels for ``arch`` (no image is pulled);
    cosign's ``sha256-<hex>.att``/``.sig`` tags hold statements, not images, and are left out."""
    tags = [tag for tag in registry.tags(repository) if not is_attached_tag(tag)]
    return [info for info in (registry.inspect(repository, tag, arch) for tag in tags) if info]


def fetch(engine, registry: Registry, repository: str, best: ImageInfo, arch: str) -> Tuple[str, Optional[str]]:
    """Pull ``best`` by digest and check its labels; also return the tag's new digest if it moved meanwhile.

    Pulling by digest means a tag re-pushed after the choice cannot swap the image:
    what runs is what was checked.
    """
    ref = f"{registry.name}/{repository}@{best.digest}"
    engine.pull(ref)  # the layers come through Docker Engine, within the command's deadline too
    verify_pulled(best.labels, engine.labels(ref), ref)
    now = registry.inspect(repository, best.tag, arch)
    return ref, (now.digest if now is not None and now.digest != best.digest else None)
