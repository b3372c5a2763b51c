"""The trust decision as a Kyverno admission policy: a Pod's image is admitted only when its signed
validation statement says what `builder.trust.policy.judge` asks of it.

Example:
    >>> kyverno("PEM", ["registry.example/ascend-build/*"])["kind"]
    'ClusterPolicy'
"""

from __future__ import annotations

from typing import Dict, List

from builder.trust import statements
from builder.trust.policy import ANY, NPU_HOST, check_requirement

KYVERNO_API = "kyverno.io/v1"  # ClusterPolicy's version in Kyverno v1.19.0's CRD (tests/fixtures/kyverno)
# JMESPath (what Kyverno evaluates in {{ }}) stating `policy.judge`'s tier rule: every required tier is
# among the tiers run that passed or were skipped, and among those that passed or that skippedTiers
# gives a reason for (a non-empty string): together, passed, or skipped with a reason.
TIERS_RUN = "{{ tiers[?status == 'passed' || status == 'skipped'].name }}"
TIERS_COUNTED = "{{ [tiers[?status == 'passed'].name, skippedTiers[?type(reason) == 'string' && reason != ''].name][] }}"
# and no entry of a required tier says anything else (a tier listed twice, passed then failed, is refused)
TIERS_NOT_COUNTED = "{{ tiers[?status != 'passed' && status != 'skipped'].name }}"


def kyverno(public_pem: str, images: List[str], require: str = ANY, name: str = "ascend-build-validated") -> Dict:
    """A Kyverno ``ClusterPolicy`` admitting a Pod's image matching ``images`` only when a validation
    statement in cosign's layout verifies with ``public_pem`` and its predicate says passed, every
    required tier passed or was skipped with a reason (and, under ``npu-host``, that it ran on an NPU host):
    `builder.trust.policy.judge`'s conditions on the predicate, stated in JMESPath.

    Only the statement is verified (``attestations`` with their own attestors): images are not
    signed with cosign's ``.sig``, so no top-level attestor is set. No transparency log holds our
    statements, hence ``ignoreTlog``/``ignoreSCT``. `judge`'s checks of the cell and variant (against
    the image's labels and a tag naming a cell) have no counterpart here: these conditions see the
    predicate only.

    Example:
        >>> rule = kyverno("PEM", ["registry.example/ascend-build/*"])["spec"]["rules"][0]
        >>> rule["verifyImages"][0]["attestations"][0]["type"] == statements.VALIDATION_V1
        True
    """
    check_requirement(require)
    conditions = [
        {"key": "{{ verdict }}", "operator": "Equals", "value": "passed",
         "message": "the ascend-build validation statement does not say passed"},
        {"key": "{{ length(requiredTiers) }}", "operator": "GreaterThan", "value": 0,
         "message": "the ascend-build validation statement names no required tiers"},
        {"key": "{{ requiredTiers }}", "operator": "AllIn", "value": TIERS_RUN,
         "message": "not every required smoke tier passed or was skipped"},
        {"key": "{{ requiredTiers }}", "operator": "AllIn", "value": TIERS_COUNTED,
         "message": "a required smoke tier was skipped without a reason"},
        {"key": "{{ requiredTiers }}", "operator": "AllNotIn", "value": TIERS_NOT_COUNTED,
         "message": "an entry of a required smoke tier says it did not pass"},
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
                f"({statements.VALIDATION_V1}) is attached to its digest and says every required smoke tier "
                "passed (or was skipped with a reason)" + (" on an NPU host" if require == NPU_HOST else "") + ".")}},
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
                    "attestations": [{"type": statements.VALIDATION_V1, "attestors": [attestor],
                                      "conditions": [{"all": conditions}]}],
                }],
            }],
        },
    }
