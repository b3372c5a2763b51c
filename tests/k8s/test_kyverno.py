"""`ascend-build policy kyverno`: a ClusterPolicy valid against Kyverno's own CRD schema (v1.19.0).

The CRD is a fixture with its source (tests/fixtures/kyverno/README.md); the policy is validated
with `jsonschema` against its v1 openAPIV3Schema, and every field it sets must be declared there
(an unknown one would be pruned by the API server without a word). No Kyverno runs here.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from builder.trust import policy, signing, statements

CLI = str(Path(sys.executable).with_name("ascend-build"))
CRD = Path(__file__).resolve().parents[1] / "fixtures" / "kyverno" / "kyverno.io_clusterpolicies.yaml.gz"
CRD_SHA256 = "fb041ee35f8e89b5bca566bb6e00cd67fccc30be8859998757333f2a40d79655"  # v1.19.0, uncompressed


@pytest.fixture(scope="module")
def schema() -> dict:
    raw = gzip.decompress(CRD.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == CRD_SHA256  # the file as Kyverno ships it
    crd = yaml.safe_load(raw)
    assert crd["spec"]["names"]["kind"] == "ClusterPolicy"
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert v1["served"] and v1["storage"]
    return v1["schema"]["openAPIV3Schema"]


@pytest.fixture(scope="module")
def pub(tmp_path_factory) -> Path:
    saved = os.environ.pop(signing.PASSPHRASE_ENV, None)
    try:
        return signing.generate(tmp_path_factory.mktemp("keys"), "team")[1]
    finally:
        if saved is not None:
            os.environ[signing.PASSPHRASE_ENV] = saved


def undeclared(document, schema: dict, where: str = "") -> list:
    """Every field of ``document`` its schema does not declare (where unknown fields are not kept)."""
    found = []
    if isinstance(document, dict) and "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        for key, value in document.items():
            if key not in schema["properties"]:
                found.append(f"{where}.{key}")
            else:
                found += undeclared(value, schema["properties"][key], f"{where}.{key}")
    elif isinstance(document, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(document):
            found += undeclared(item, schema["items"], f"{where}[{i}]")
    return found


def emitted(pub: Path, *extra: str) -> dict:
    done = subprocess.run([CLI, "policy", "kyverno", "--key", str(pub), "--images", "registry.example:5000/ascend-build/*",
                           *extra], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# made by ascend-build policy kyverno")
    return yaml.safe_load(done.stdout)


@pytest.mark.parametrize("require", policy.REQUIREMENTS)
def test_the_policy_is_valid_against_kyvernos_crd_and_sets_no_undeclared_field(schema, pub, require):
    document = emitted(pub, "--require", require)
    jsonschema.Draft7Validator(schema).validate(document)
    assert undeclared(document, schema) == []


def test_the_policy_checks_our_statement_with_our_key(pub):
    document = emitted(pub, "--require", "npu-host")
    assert (document["apiVersion"], document["kind"]) == ("kyverno.io/v1", "ClusterPolicy")
    (rule,) = document["spec"]["rules"]
    (verify,) = rule["verifyImages"]
    assert verify["imageReferences"] == ["registry.example:5000/ascend-build/*"]
    assert verify["failureAction"] == "Enforce" and verify["required"] and "attestors" not in verify
    (statement,) = verify["attestations"]
    assert statement["type"] == statements.VALIDATION_V1
    (entry,) = statement["attestors"][0]["entries"]
    assert entry["keys"]["publicKeys"] == pub.read_text()  # the .pub, byte for byte
    assert entry["keys"]["rekor"] == {"ignoreTlog": True}
    (conditions,) = statement["conditions"]
    said = {(c["key"], c["operator"], str(c["value"])) for c in conditions["all"]}
    assert ("{{ verdict }}", "Equals", "passed") in said
    assert ("{{ requiredTiers }}", "AllIn", "{{ tiers[?status == 'passed' || status == 'skipped'].name }}") in said
    assert ("{{ ranOn.kind }}", "Equals", "npu-host") in said
    assert "ranOn.kind" not in str(emitted(pub)["spec"])  # --require any: no host condition


def test_the_schema_check_bites(schema, pub):
    """A misspelled operator and an undeclared field are caught: the validation is not vacuous."""
    document = emitted(pub)
    wrong = copy.deepcopy(document)
    wrong["spec"]["rules"][0]["verifyImages"][0]["attestations"][0]["conditions"][0]["all"][0]["operator"] = "Is"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(schema).validate(wrong)
    unknown = copy.deepcopy(document)
    unknown["spec"]["rules"][0]["verifyImages"][0]["attestations"][0]["predicate"] = "x"
    assert undeclared(unknown, schema) == [".spec.rules[0].verifyImages[0].attestations[0].predicate"]


def test_a_private_key_or_an_unknown_requirement_is_refused(pub):
    private = pub.with_suffix(".key")
    done = subprocess.run([CLI, "policy", "kyverno", "--key", str(private), "--images", "r/*"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "is not a PEM public key" in done.stderr
    done = subprocess.run([CLI, "policy", "kyverno", "--key", str(pub), "--images", "r/*", "--require", "npu"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "none of any, npu-host" in done.stderr
