"""What an image's signed validation statement must say before `pull`, `run` or `index` trust it.

Labels choose; the statement decides. Given the team's public key (``--trust-key FILE`` or
``ASCEND_BUILD_TRUST_KEY``), an image is trusted only when a validation statement attached to
its digest (`builder.attached`, cosign's ``.att`` tag) verifies with that key, is about that
very digest, and says:

- ``verdict: passed``, and each of its ``requiredTiers`` passed (or was skipped with a reason,
  as the seal and `index` count a skipped tier: not failed);
- the same cell and variant as the image's labels (both are bound to the digest; a mismatch
  means the statement and the labels disagree about what the image is);
- under ``--require npu-host``: ``ranOn.kind`` is ``npu-host`` (the smoke test ran on an NPU
  host); under ``--require any`` (the default) whatever kind the signer reported (a CPU twin,
  an emulated or stand-in run) is enough: the signer decided that passing there is passing.

The host kind is what the signer reported, not something a verifier can check. Both wings use
this module: the node's `pull` and `run`, the build wing's `index`.

Example:
    >>> from builder.attached import Verification
    >>> judge(Verification("t", "sha256:" + "ab" * 32, "sha256-ab.att", missing="no statement is attached"), {}, ANY)
    'no statement is attached'
"""

from __future__ import annotations

from typing import Dict, List, Optional

from builder import attached, attestation
from builder.errors import UserError
from builder.registry import Registry
from builder.signing import PublicKey
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


def _why_not(predicate: Dict, labels: Dict[str, str], require: str) -> str:
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
    ran: Dict = predicate["ranOn"] if isinstance(predicate.get("ranOn"), dict) else {}
    if require == NPU_HOST and ran.get("kind") != NPU_HOST:
        return f"its validation statement says it ran on {ran.get('kind') or 'an unnamed host'}; --require {NPU_HOST}"
    return ""


def judge(verification: attached.Verification, labels: Dict[str, str], require: str = ANY) -> str:
    """"" when a validation statement of ``verification`` verified and satisfies the policy; else why not."""
    verified = verification.verified(attestation.VALIDATION_V1)
    if not verified:
        return verification.why_not_validated()
    reasons: List[str] = []
    for found in verified:
        why = _why_not(found.checked.predicate, labels, require)
        if not why:
            return ""
        reasons.append(why)
    return "; ".join(sorted(set(reasons)))


def trusted(registry: Registry, repository: str, digest: str, labels: Dict[str, str], key: Optional[PublicKey],
            require: str = ANY) -> str:
    """"" when ``repository@digest`` (whose config carries ``labels``) is trusted under the policy; else
    why not. Without a key nothing is checked ("")."""
    if key is None:
        return ""
    return judge(attached.verify(registry, repository, digest, key), labels, require)


# --- the same rules for a Kubernetes cluster: a Kyverno ClusterPolicy ------------------------------

KYVERNO_API = "kyverno.io/v1"  # ClusterPolicy's version in Kyverno v1.19.0's CRD (tests/fixtures/kyverno)


def kyverno(public_pem: str, images: List[str], require: str = ANY, name: str = "ascend-build-validated") -> Dict:
    """A Kyverno ``ClusterPolicy`` admitting a Pod's image matching ``images`` only when a validation
    statement in cosign's layout verifies with ``public_pem`` and its predicate says passed, every
    required tier passed or was skipped (and, under ``npu-host``, that it ran on an NPU host).

    Only the statement is verified (``attestations`` with their own attestors): images are not
    signed with cosign's ``.sig``, so no top-level attestor is set. No transparency log holds our
    statements, hence ``ignoreTlog``/``ignoreSCT``. The statement-versus-labels check of `judge`
    (same cell and variant) has no counterpart here: Kyverno's conditions see the predicate only.

    Example:
        >>> rule = kyverno("PEM", ["registry.example/ascend-build/*"])["spec"]["rules"][0]
        >>> rule["verifyImages"][0]["attestations"][0]["type"] == attestation.VALIDATION_V1
        True
    """
    check_requirement(require)
    conditions = [
        {"key": "{{ verdict }}", "operator": "Equals", "value": "passed",
         "message": "the ascend-build validation statement does not say passed"},
        {"key": "{{ length(requiredTiers) }}", "operator": "GreaterThan", "value": 0,
         "message": "the ascend-build validation statement names no required tiers"},
        {"key": "{{ requiredTiers }}", "operator": "AllIn",
         "value": "{{ tiers[?status == 'passed' || status == 'skipped'].name }}",
         "message": "not every required smoke tier passed (or was skipped with a reason)"},
    ]
    if require == NPU_HOST:
        conditions.append({"key": "{{ ranOn.kind }}", "operator": "Equals", "value": NPU_HOST,
                           "message": "the smoke test did not run on an NPU host"})
    attestor = {"entries": [{"keys": {"publicKeys": public_pem.strip() + "\n", "signatureAlgorithm": "sha256",
                                      "rekor": {"ignoreTlog": True}, "ctlog": {"ignoreSCT": True}}}]}
    return {
        "apiVersion": KYVERNO_API,
        "kind": "ClusterPolicy",
        "metadata": {"name": name, "annotations": {
            "policies.kyverno.io/title": "Images validated by ascend-build",
            "policies.kyverno.io/description": (
                "Admit an image only when a validation statement signed by the team's key "
                f"({attestation.VALIDATION_V1}) is attached to its digest and says every required smoke tier "
                "passed" + (" on an NPU host" if require == NPU_HOST else "") + ".")}},
        "spec": {
            "background": False,
            "webhookTimeoutSeconds": 30,
            "rules": [{
                "name": "validated-by-ascend-build",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "verifyImages": [{
                    "imageReferences": list(images),
                    "failureAction": "Enforce",
                    "mutateDigest": True,
                    "verifyDigest": True,
                    "required": True,
                    "attestations": [{"type": attestation.VALIDATION_V1, "attestors": [attestor],
                                      "conditions": [{"all": conditions}]}],
                }],
            }],
        },
    }
