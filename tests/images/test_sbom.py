"""The CycloneDX SBOM of an image (builder/images/sbom.py): from its lock and CANN's packages,
valid against the CycloneDX 1.5 schema (cyclonedx-python-lib's strict validator), the same
bytes for the same job, and attached as a signed statement next to validation and provenance."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from cyclonedx.schema import SchemaVersion
from packageurl import PackageURL
from cyclonedx.validation.json import JsonStrictValidator

from builder.trust import signing, statements
from builder.images import attest, lock, sbom
from builder.vocabulary import CPU, NPU
from tests.support.images import MISSION_CELL, ROOT, job_of


def valid(bom: dict) -> None:
    error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(json.dumps(bom))
    assert error is None, error


def test_the_npu_image_lists_every_locked_distribution_and_cann_package_with_its_hashes():
    job = job_of(NPU)
    bom = sbom.of(job)
    valid(bom)
    locked = lock.read(ROOT / "dockerfiles" / MISSION_CELL)
    assert locked is not None
    libraries = {c["name"]: c for c in bom["components"] if c["type"] == "library"}
    assert set(libraries) == {e.name for e in locked.entries} and "torch-npu" in libraries
    for entry in locked.entries:
        found = libraries[entry.name]
        parsed = PackageURL.from_string(found["purl"])  # packageurl-python: the purl spec's own reader
        assert (parsed.type, parsed.name, parsed.version) == ("pypi", entry.name, entry.version)
        assert found["purl"] == parsed.to_string()  # canonical as written
        assert [h["content"] for h in found["hashes"]] == list(entry.hashes)
    cann = [c for c in bom["components"] if c.get("group") == "CANN"]
    assert [(c["version"], c["hashes"][0]["content"]) for c in cann] == [
        ("7.0.RC1", i.sha256) for i in job.image.installers]
    assert [c["externalReferences"][0]["url"] for c in cann] == [i.url for i in job.image.installers]
    assert bom["metadata"]["component"]["version"] == MISSION_CELL
    assert bom["compositions"] == [{"aggregate": "incomplete", "assemblies": [job.ref]}]  # OS packages: not listed


def test_a_local_version_is_percent_encoded_in_the_purl():
    """The purl spec encodes a version's '+' (PEP 440's local label) as %2B: torch 2.13.0+cpu."""
    job = job_of(CPU)
    assert job.plan.lock is not None
    entries = tuple(lock.Entry("torch", "2.13.0+cpu", ("0" * 64,)) if e.name == "torch" else e
                    for e in job.plan.lock.entries)
    job = replace(job, plan=replace(job.plan, lock=replace(job.plan.lock, entries=entries)))
    bom = sbom.of(job)
    (torch,) = [c for c in bom["components"] if c["name"] == "torch"]
    assert torch["purl"] == torch["bom-ref"] == "pkg:pypi/torch@2.13.0%2Bcpu"
    assert PackageURL.from_string(torch["purl"]).version == "2.13.0+cpu"
    valid(bom)


def test_the_twin_lists_the_lock_without_torch_npu_and_no_cann():
    bom = sbom.of(job_of(CPU))
    valid(bom)
    names = {c["name"] for c in bom["components"]}
    assert "torch-npu" not in names and "torch" in names
    assert not [c for c in bom["components"] if c.get("group") == "CANN"]


def test_the_same_job_gives_the_same_bytes_and_another_variant_another_serial():
    npu = json.dumps(sbom.of(job_of(NPU)), sort_keys=True)
    assert npu == json.dumps(sbom.of(job_of(NPU)), sort_keys=True)
    assert json.loads(npu)["serialNumber"] != sbom.of(job_of(CPU))["serialNumber"]


def test_the_sbom_is_signed_as_a_cyclonedx_statement_beside_validation_and_provenance(tmp_path, monkeypatch):
    monkeypatch.delenv(signing.PASSPHRASE_ENV, raising=False)
    private, public = signing.generate(tmp_path, "team")
    key, pub = signing.load_private(private), signing.load_public(public)
    job = job_of(NPU)
    bom = sbom.of(job)
    report = {"device": "npu", "host": {}, "tiers": [{"name": "versions", "status": "passed", "summary": "ok"}]}
    made = attest.statements_for(report, ("versions",), MISSION_CELL, NPU, "h", attest.evidence(job), bom)
    assert [kind for kind, _ in made] == [statements.VALIDATION_V1, statements.SLSA_PROVENANCE_V1,
                                          statements.CYCLONEDX_BOM]
    digest = "sha256:" + "ab" * 32
    body = statements.statement("127.0.0.1:5000/team/img", digest, statements.CYCLONEDX_BOM, bom)
    checked = statements.check(statements.sign(body, key), pub, digest)
    assert checked.ok and checked.statement and checked.statement["predicate"] == bom


@pytest.mark.parametrize("variant", [NPU, CPU])
def test_the_schema_check_can_fail(variant):
    bom = sbom.of(job_of(variant))
    bom["components"][0]["hashes"] = [{"alg": "SHA-256", "content": "not hex"}]
    assert JsonStrictValidator(SchemaVersion.V1_5).validate_str(json.dumps(bom)) is not None
