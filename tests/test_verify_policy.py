"""`verify` decides as `pull`, `run` and `index` do (`builder.trust.policy.judge`): a statement the team's
key signed is refused when what it says does not satisfy the policy.

Against the loopback docker-registry (no Docker Engine: each image is a config and one layer put by
the registry API), with real P-256 signatures by the team's key: a statement whose verdict is not
`passed`, one naming no required tiers, one whose required tier failed under a passed verdict, one
whose required tier was skipped without a reason, and, under `--require npu-host`, a CPU twin's.
Each exits 1 with the reason; the genuine statement exits 0.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import uuid

import pytest

from builder.images import attest
from builder.registry import Registry
from builder.trust import signing, statements
from builder.vocabulary import CPU, tier_names
from tests.support import trust as ht
from tests.support.trust import CELL_ID, CLI  # the fixtures (creds, keys) come from the plugin tests/conftest.py names

REPO = f"ascend-build-test/verify-policy-{uuid.uuid4().hex[:8]}"


def genuine_predicate() -> dict:
    return attest.validation_predicate(ht.report(), tier_names(), CELL_ID, CPU, ht.CONTENT_HASH)


def with_skip(reason: str) -> dict:
    predicate = genuine_predicate()
    predicate["tiers"][-1]["status"] = "skipped"
    predicate["passedTiers"] = predicate["passedTiers"][:-1]
    predicate["skippedTiers"] = [{"name": tier_names()[-1], "reason": reason}]
    return predicate


def changed(**fields) -> dict:
    return {**genuine_predicate(), **fields}


def failed_tier() -> dict:
    predicate = copy.deepcopy(genuine_predicate())
    predicate["tiers"][1]["status"] = "failed"
    return predicate


CASES = {
    "verdict-failed": (changed(verdict="failed"), "its validation statement says failed, not passed"),
    "no-required-tiers": (changed(requiredTiers=[]), "its validation statement names no required tiers"),
    "failed-tier": (failed_tier(), f"not every required tier passed: {tier_names()[1]} failed"),
    "skipped-no-reason": (with_skip(""), f"required tier(s) {tier_names()[-1]} skipped without a reason"),
}


def signed_image(registry, keys, predicate: dict) -> str:
    """A tiny image with the sealed twin's labels, and ``predicate`` signed by the team's key about its
    digest; ``@<digest>`` (a digest names no cell: only the statement and the labels decide)."""
    reg = Registry(registry.host)
    tag = ht.TAG
    digest = ht.put_tiny_image(reg, REPO, "p-" + uuid.uuid4().hex[:8])
    attest.attest(f"{registry.host}/{REPO}:{tag}", digest, [(statements.VALIDATION_V1, predicate)],
                  signing.load_private(keys["team"][0]))
    return "@" + digest


def verify(registry, creds, keys, reference: str, *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run([CLI, "verify", f"{registry.host}/{REPO}{reference}", "--key", str(keys["team"][1]), *extra],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **creds})
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_team_signed_statement_that_does_not_satisfy_the_policy_is_refused(registry, creds, keys, case):
    predicate, reason = CASES[case]
    reference = signed_image(registry, keys, predicate)
    done = verify(registry, creds, keys, reference)
    print(f"\n$ ascend-build verify {registry.host}/{REPO}{reference} --key team.pub\n{done.stdout}{done.stderr}")
    assert done.returncode == 1
    assert "  OK   " + statements.VALIDATION_V1 in done.stdout  # the signature verified: the policy refused
    assert "NOT verified: " in done.stderr and reason in done.stderr
    as_json = json.loads(verify(registry, creds, keys, reference, "--json").stdout)
    assert as_json["validated"] is False and reason in as_json["why_not"]


def test_the_genuine_statement_and_a_skip_with_its_reason_verify(registry, creds, keys):
    for predicate in (genuine_predicate(), with_skip("one NPU: nothing to collect over")):
        done = verify(registry, creds, keys, signed_image(registry, keys, predicate))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "every required tier passed or was skipped with a reason (--require any)" in done.stdout


def test_require_npu_host_refuses_a_cpu_twins_statement(registry, creds, keys):
    reference = signed_image(registry, keys, genuine_predicate())
    done = verify(registry, creds, keys, reference, "--require", "npu-host")
    assert done.returncode == 1 and "it ran on cpu-twin; --require npu-host" in done.stderr
    wrong = verify(registry, creds, keys, reference, "--require", "npu")
    assert wrong.returncode == 2 and "none of any, npu-host" in wrong.stderr
