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

Example:
    >>> from builder.trust.attached import Verification
    >>> judge(Verification("t", "sha256:" + "ab" * 32, "sha256-ab.att", missing="no statement is attached"), {}, ANY)
    'no statement is attached'
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from builder.trust import attached, statements
from builder.errors import UserError
from builder.registry import Reader
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


def _why_not(predicate: Dict, labels: Dict[str, str], require: str, named: Optional[Tuple[str, str]] = None) -> str:
    """Why this verified validation predicate does not satisfy the policy ("" when it does)."""
    if predicate.get("verdict") != "passed":
        return f"its validation statement says {predicate.get('verdict')}, not passed"
    tiers = [t for t in predicate.get("tiers") or [] if isinstance(t, dict)]
    status = {t.get("name"): t.get("status") for t in tiers}
    required = [str(t) for t in predicate.get("requiredTiers") or []]
    if not required:
        return "its validation statement names no required tiers"
    failed = [f"{t} {status.get(t) or 'not run'}" for t in required if status.get(t) not in ("passed", "skipped")]
    if failed:
        return "its validation statement says not every required tier passed: " + ", ".join(failed)
    for key, field in ((Label.CELL, "cell"), (Label.VARIANT, "variant")):
        if labels.get(key) != predicate.get(field):
            return (f"its validation statement is about {field} {predicate.get(field)!r}, the image's labels say "
                    f"{labels.get(key)!r}")
    if named is not None and (predicate.get("cell"), predicate.get("variant")) != named:
        return (f"its validation statement is about cell {predicate.get('cell')} ({predicate.get('variant')}), "
                f"the tag names cell {named[0]} ({named[1]})")
    ran: Dict = predicate["ranOn"] if isinstance(predicate.get("ranOn"), dict) else {}
    if require == NPU_HOST and ran.get("kind") != NPU_HOST:
        return f"its validation statement says it ran on {ran.get('kind') or 'an unnamed host'}; --require {NPU_HOST}"
    return ""


def judge(verification: attached.Verification, labels: Dict[str, str], require: str = ANY,
          named: Optional[Tuple[str, str]] = None) -> str:
    """"" when a validation statement of ``verification`` verified and satisfies the policy; else why not.
    ``named``: the (cell id, variant) of the tag the user gave (`builder.cell_id.named_by_tag`), when it names one."""
    verified = verification.verified(statements.VALIDATION_V1)
    if not verified:
        return verification.why_not_validated()
    reasons: List[str] = []
    for found in verified:
        why = _why_not(found.checked.predicate, labels, require, named)
        if not why:
            return ""
        reasons.append(why)
    return "; ".join(sorted(set(reasons)))


def trusted(registry: Reader, repository: str, digest: str, labels: Dict[str, str], key: Optional[PublicKey],
            require: str = ANY, named: Optional[Tuple[str, str]] = None) -> str:
    """"" when ``repository@digest`` (whose config carries ``labels``) is trusted under the policy; else
    why not. Without a key nothing is checked (""). ``named``: as `judge`'s (`run` of a tag passes it)."""
    if key is None:
        return ""
    return judge(attached.verify(registry, repository, digest, key), labels, require, named)
