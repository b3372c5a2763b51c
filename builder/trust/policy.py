"""What an image's signed validation statement must say before `pull`, `run` or `index` trust it.

Labels choose; the statement decides. Given the team's public key (``--trust-key FILE`` or
``ASCEND_BUILD_TRUST_KEY``), an image is trusted only when a validation statement attached to
its digest (`builder.trust.attached`, cosign's ``.att`` tag) verifies with that key, is about that
very digest, and says:

- ``verdict: passed``, and each of its ``requiredTiers`` passed (or was skipped with a reason,
  as the seal and `index` count a skipped tier: not failed);
- the same cell and variant as the image's labels (both are bound to the digest; a mismatch
  means the statement and the labels disagree about what the image is), and, for `run` of a
  tag that names a cell, as that tag (a tag is not bound to the digest: anyone who can push
  can put one cell's signed image under another cell's tag);
- under ``--require npu-host``: ``ranOn.kind`` is ``npu-host`` (the smoke test ran on an NPU
  host); under ``--require any`` (the default) whatever kind the signer reported (a CPU twin,
  an emulated or stand-in run) is enough: the signer decided that passing there is passing.

The host kind is what the signer reported, not something a verifier can check. Both wings use
this module: the node's `pull` and `run`, the build wing's `index`.

A lazily pullable variant (``<tag>-estargz``, `builder.trust.variant`) carries no validation
statement of its own: `verdict`, the one decision every command makes, takes it only through its
signed lazy-variant statement, which must bind it to a validated image that `judge` trusts; the
`Verdict` then names that image, and every command says "a lazy variant of X, whose validation
statement verifies".

Example:
    >>> from builder.trust.attached import Verification
    >>> judge(Verification("t", "sha256:" + "ab" * 32, "sha256-ab.att", missing="no statement is attached"), {}, ANY)
    'no statement is attached'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from builder import documents
from builder.trust import attached, statements, variant
from builder.errors import UserError
from builder.registry import Reader, Registry, config_labels
from builder.trust.signing import PublicKey
from builder.vocabulary import Label

TRUST_KEY_ENV = "ASCEND_BUILD_TRUST_KEY"
ANY, NPU_HOST = "any", "npu-host"
REQUIREMENTS = (ANY, NPU_HOST)
REQUIRE_HELP = (f"What the verified statement must say of where the smoke test ran: {ANY} (default: the kind the "
                f"signer reported, CPU twin, emulated or stand-in included) or {NPU_HOST} (on an NPU host).")


def check_requirement(require: str) -> str:
    if require not in REQUIREMENTS:
        raise UserError(f"--require {require!r} is none of {', '.join(REQUIREMENTS)}", exit_code=2,
                        fix=f"--require {ANY} accepts a CPU twin's verdict, --require {NPU_HOST} only an NPU host's")
    return require


def skip_reasons(predicate: Dict) -> Dict[str, str]:
    """The tiers ``skippedTiers`` gives a reason for (a non-empty string), with that reason."""
    listed = predicate.get("skippedTiers")
    return {t["name"]: t["reason"] for t in (listed if isinstance(listed, list) else [])
            if isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("reason"), str)
            and t["reason"]}


def _tiers_why_not(predicate: Dict) -> str:
    """Why the required tiers of ``predicate`` do not all count ("" when they do): each must be named in
    ``tiers`` as passed, or as skipped with its reason in ``skippedTiers``, and by no entry as anything
    else (a tier listed twice, passed then failed, failed). The Kyverno policy states the same
    (`builder.k8s.kyverno`)."""
    tiers = predicate.get("tiers")
    said: Dict[str, List[Any]] = {}
    for t in tiers if isinstance(tiers, list) else []:
        if isinstance(t, dict) and isinstance(t.get("name"), str):
            said.setdefault(t["name"], []).append(t.get("status"))
    listed = predicate.get("requiredTiers")
    required = [str(t) for t in listed] if isinstance(listed, list) else []
    if not required:
        return "its validation statement names no required tiers"
    reasons = skip_reasons(predicate)
    failed = [f"{t} {_said(said.get(t))}" for t in required
              if not said.get(t) or any(status not in ("passed", "skipped") for status in said[t])]
    unexplained = [t for t in required if "passed" not in said.get(t, ()) and t not in reasons]
    if failed:
        return "its validation statement says not every required tier passed: " + ", ".join(failed)
    if unexplained:
        return ("its validation statement says required tier(s) " + ", ".join(unexplained) +
                " skipped without a reason (a skipped tier counts only with its reason in skippedTiers)")
    return ""


def _said(statuses: Optional[List[Any]]) -> str:
    """What a tier's entries say: ``not run``, ``failed``, or ``passed then failed`` for a tier listed twice."""
    return " then ".join(str(status) for status in statuses) if statuses else "not run"


def _why_not(predicate: Dict, labels: Dict[str, str], require: str, named: Optional[Tuple[str, str]] = None) -> str:
    """Why this verified validation predicate does not satisfy the policy ("" when it does)."""
    if predicate.get("verdict") != "passed":
        return f"its validation statement says {predicate.get('verdict')}, not passed"
    tiers = _tiers_why_not(predicate)
    if tiers:
        return tiers
    for key, field in ((Label.CELL, "cell"), (Label.VARIANT, "variant")):
        if labels.get(key) != predicate.get(field):
            return (f"its validation statement is about {field} {predicate.get(field)!r}, the image's labels say "
                    f"{labels.get(key)!r}")
    if named is not None and (predicate.get("cell"), predicate.get("variant")) != named:
        return _another_cell(named, [(str(predicate.get("cell")), str(predicate.get("variant")))])
    ran: Dict = predicate["ranOn"] if isinstance(predicate.get("ranOn"), dict) else {}
    if require == NPU_HOST and ran.get("kind") != NPU_HOST:
        return f"its validation statement says it ran on {ran.get('kind') or 'an unnamed host'}; --require {NPU_HOST}"
    return ""


def _another_cell(named: Tuple[str, str], about: List[Tuple[str, str]]) -> str:
    cells = " and ".join(f"cell {cell} ({variant})" for cell, variant in about)
    return (f"the tag names cell {named[0]} ({named[1]}), but its validation statement is about {cells}: "
            "another cell's image under this cell's tag")


def _unverified(verification: attached.Verification) -> str:
    """Why no validation statement of ``verification`` verified (it has none that did)."""
    if verification.missing:
        return verification.missing
    claimed = [f for f in verification.found if f.predicate_type == statements.VALIDATION_V1]
    if not claimed:
        return "no validation statement is attached (only: " + (
            ", ".join(sorted({f.predicate_type or "?" for f in verification.found})) or "nothing") + ")"
    return "; ".join(sorted({f.checked.reason for f in claimed}))


def judge(verification: attached.Verification, labels: Dict[str, str], require: str = ANY,
          named: Optional[Tuple[str, str]] = None) -> str:
    """"" when a validation statement of ``verification`` verified and satisfies the policy; else why not.

    The rule on an image's own validation statements, which `verdict` (the one decision `verify`, `pull`,
    `run`, `index`, `k8s job`, `mirror` and `catalogue` make) applies to every image, and to the
    validated image a lazy variant is bound to. ``labels``: the image config's labels (bound to the
    digest as the statement is); ``named``: the (cell id, variant) of the tag the user gave
    (`builder.cell_id.named_by_tag`), by default the one of the reference ``verification`` was made
    for (None for a digest or a tag naming no cell)."""
    return vouching(verification, labels, require, named)[1]


def vouching(verification: attached.Verification, labels: Dict[str, str], require: str = ANY,
             named: Optional[Tuple[str, str]] = None) -> Tuple[Optional[attached.Found], str]:
    """`judge`'s decision with the statement it rests on: (the first verified validation statement
    that satisfies the policy, "") when one does, else (None, why not). `catalogue` shows what that
    statement says (its tiers, where it ran)."""
    named = named if named is not None else verification.named
    verified = verification.verified(statements.VALIDATION_V1)
    if not verified:
        return None, _unverified(verification)
    reasons: List[str] = []
    for found in verified:
        why = _why_not(found.checked.predicate, labels, require, named)
        if not why:
            return found, ""
        reasons.append(why)
    return None, "; ".join(sorted(set(reasons)))


def tag_mismatch(verification: attached.Verification, labels: Dict[str, str], require: str = ANY,
                 named: Optional[Tuple[str, str]] = None) -> Optional[Dict[str, Any]]:
    """When `judge` refuses only because the tag names another cell than the statements that would
    otherwise be trusted: what the tag names and what those statements are about (`verify --json`); else None."""
    named = named if named is not None else verification.named
    if named is None or not judge(verification, labels, require, named):
        return None
    about = sorted({(str(f.checked.predicate.get("cell")), str(f.checked.predicate.get("variant")))
                    for f in verification.verified(statements.VALIDATION_V1)
                    if not _why_not(f.checked.predicate, labels, require, None)})
    if not about:
        return None
    return {"tagNames": {"cell": named[0], "variant": named[1]},
            "statementIsAbout": [{"cell": cell, "variant": variant} for cell, variant in about],
            "why": _another_cell(named, about)}


def labels_of(registry: Registry, repository: str, digest: str) -> Dict[str, str]:
    """The labels of the image config ``repository@digest`` names ({} when it names none)."""
    try:
        manifest = registry.manifest(repository, digest)
        return {} if manifest.is_index else config_labels(registry.config(repository, manifest))
    except LookupError:
        return {}


@dataclass(frozen=True)
class Verdict:
    """The trust decision about one image (`decide`, `verdict`).

    ``why_not``: "" when the image is trusted, else why not. ``lazy_of``: for a lazily pullable variant
    whose verified lazy-variant statement binds it to a validated image, that image
    (``NAME@sha256:…``, where it was looked up). ``fix``: for a refused variant, what would make it
    trusted (a refused image of another kind gets its fix from the command that refused it)."""

    why_not: str = ""
    lazy_of: str = ""
    fix: str = ""

    @property
    def vouched(self) -> str:
        """What vouches for a trusted image, in the words every command prints."""
        return (f"a lazy variant of {self.lazy_of}, whose validation statement verifies" if self.lazy_of
                else "its validation statement verifies")

    @property
    def line(self) -> str:
        """The refusal in one line, as the lists of `pull`, `mirror`, `index` and `k8s job` give it: the
        reason, then the fix when there is one ("" when trusted)."""
        return self.why_not + (f" (fix: {self.fix})" if self.why_not and self.fix else "")


# what would make a refused variant trusted: its binding signed again, or the validated image used instead
_SIGN_AGAIN = ("make the variant again from its validated image with `ascend-build image --push REGISTRY --sign-key "
               "KEY --lazy estargz` (KEY the private half of the trusted key), which signs its binding; or use the "
               "validated image itself")


def decide(registry: Reader, repository: str, digest: str, labels: Dict[str, str], key: Optional[PublicKey],
           require: str = ANY, named: Optional[Tuple[str, str]] = None) -> Verdict:
    """The trust decision about ``repository@digest`` (whose config carries ``labels``) under the policy.
    Without a key nothing is checked (trusted). ``named``: as `judge`'s (`run` of a tag passes it)."""
    if key is None:
        return Verdict()
    return verdict(registry, repository, attached.verify(registry, repository, digest, key), labels, key, require,
                   named)


def verdict(registry: Reader, repository: str, verification: attached.Verification, labels: Dict[str, str],
            key: PublicKey, require: str = ANY, named: Optional[Tuple[str, str]] = None) -> Verdict:
    """The one decision `verify`, `pull`, `run`, `index`, `k8s job` and `mirror` make about the image
    ``verification`` checked the statements of.

    An image is trusted when a validation statement of its own satisfies `judge`. A lazily pullable
    variant (`builder.trust.variant`) has none: it is trusted only through a lazy-variant statement,
    signed with the key and about this very digest, binding it to a validated image that is trusted
    (`_judge_variant`). An image that is an eStargz variant by its manifest and has no such statement
    is refused as one, with the fix."""
    named = named if named is not None else verification.named
    why = judge(verification, labels, require, named)
    if not why:
        return Verdict()
    if any(f.predicate_type == variant.LAZY_VARIANT_V1 for f in verification.found):
        return _judge_variant(registry, repository, verification, labels, key, require, named)
    if not verification.verified(statements.VALIDATION_V1) and _is_lazy(registry, repository, verification.digest):
        return Verdict("it is an eStargz variant, trusted only through a lazy-variant statement that binds it to its "
                       f"validated image, and none is attached: {why}", fix=_SIGN_AGAIN)
    return Verdict(why)


def _is_lazy(registry: Reader, repository: str, digest: str) -> bool:
    try:
        return variant.is_lazy(registry.manifest(repository, digest))
    except LookupError:
        return False


def _name(registry: Reader, repository: str, digest: str) -> str:
    """``NAME/REPOSITORY@digest`` (``oci:FOLDER@digest`` in a layout): the image as this command found it."""
    return f"{registry.name}/{repository}@{digest}" if repository else f"{registry.name}@{digest}"


def _labels(registry: Reader, repository: str, digest: str) -> Optional[Dict[str, str]]:
    """The labels of the image ``repository@digest`` ({} when it names none); None when it is not there."""
    try:
        manifest = registry.manifest(repository, digest)
        if manifest.is_index:
            return {}
        config = documents.load_json(registry.blob(repository, str(manifest.data["config"]["digest"])), "an image config")
    except LookupError:
        return None
    except (KeyError, TypeError, ValueError, UserError):
        return {}
    return config_labels(config) if isinstance(config, dict) else {}


def _judge_variant(registry: Reader, repository: str, verification: attached.Verification, labels: Dict[str, str],
                   key: PublicKey, require: str, named: Optional[Tuple[str, str]]) -> Verdict:
    """The image of ``verification``, which carries no trusted validation statement of its own, as a lazily
    pullable variant: trusted when a lazy-variant statement that verified with the key and names this very
    digest (``verification`` holds only those) binds it to a validated image that is trusted: the
    variant's manifest holds the layers and TOC digests it lists, the validated image it names is another
    digest of the same repository with the same labels as the variant, and that image's own statements
    pass `judge`."""
    bindings = verification.verified(variant.LAZY_VARIANT_V1)
    if not bindings:
        claimed = [f for f in verification.found if f.predicate_type == variant.LAZY_VARIANT_V1]
        return Verdict("it is a lazy variant whose lazy-variant statement does not verify: "
                       + "; ".join(sorted({f.checked.reason for f in claimed})), fix=_SIGN_AGAIN)
    refusals: List[Verdict] = []
    for found in bindings:
        predicate = found.checked.predicate
        validated = str((predicate.get("validatedImage") or {}).get("digest", ""))
        told = _variant_verdict(registry, repository, verification.digest, validated, predicate, labels, key,
                                require, named)
        if not told.why_not:
            return told
        refusals.append(told)
    return Verdict("; ".join(sorted({r.why_not for r in refusals})), refusals[0].lazy_of, refusals[0].fix)


def _variant_verdict(registry: Reader, repository: str, digest: str, validated: str, predicate: Dict,
                     labels: Dict[str, str], key: PublicKey, require: str, named: Optional[Tuple[str, str]]) -> Verdict:
    """One verified binding of the variant ``digest`` to ``validated``, judged."""
    if not validated.startswith("sha256:") or validated == digest:
        return Verdict("its lazy-variant statement names no other image as its validated image", fix=_SIGN_AGAIN)
    bound = _name(registry, repository, validated)
    try:
        why = variant.manifest_why_not(registry.manifest(repository, digest), predicate)
    except LookupError:
        why = "the variant's manifest is not in the registry"
    if why:
        return Verdict(f"it is bound to {bound}, but {why}", bound, _SIGN_AGAIN)
    theirs = _labels(registry, repository, validated)
    if theirs is None:
        return Verdict(f"it is a lazy variant of {bound}, which is not there", bound,
                       f"{bound} must be beside the variant with its statements: tag it there too (`ascend-build "
                       "mirror` copies the tagged images it selects, the validated image before its variant), or use "
                       "another image")
    if theirs != labels:
        differs = sorted(k for k in set(theirs) | set(labels) if theirs.get(k) != labels.get(k))
        return Verdict(f"it is bound to {bound}, whose labels are not the variant's (" + ", ".join(differs[:5]) + ")",
                       bound, _SIGN_AGAIN)
    why = judge(attached.verify(registry, repository, validated, key), theirs, require, named)
    if why:
        return Verdict(f"it is a lazy variant of {bound}, whose validation statement is refused: {why}", bound,
                       f"a variant is trusted only as its validated image is: `ascend-build verify {bound} --key "
                       "KEY` says why; attest that image, or use another one")
    return Verdict("", bound)
