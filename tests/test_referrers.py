"""The OCI referrers fallback: where the registry has no referrers API, attaching keeps the index
under the tag ``sha256-<hex of the image digest>`` (OCI distribution spec v1.1, "Pushing Manifests
with Subject" and "Referrers Tag Schema").

Against the loopback docker-registry 2.8 (htpasswd auth, no Docker Engine: the image is a config
and one layer put by the registry API), which answers 404 on ``/v2/<name>/referrers/<digest>``.
The index is read by an independent client, skopeo (``skopeo inspect --raw``), and validated
against the OCI image-spec v1.1.1 image index schema (tests/fixtures/oci-image-spec).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import uuid
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry as SchemaRegistry, Resource
from referencing.jsonschema import DRAFT4

from builder.errors import UserError
from builder.registry import OCI_INDEX, OCI_MANIFEST, Registry
from builder.trust import attached, signing, statements
from tests.support import trust as ht
from tests.support.trust import TAG  # the fixtures (creds, keys) come from the plugin tests/conftest.py names

REPO = f"ascend-build-test/referrers-{uuid.uuid4().hex[:8]}"
SCHEMAS = Path(__file__).parent / "fixtures" / "oci-image-spec"


def skopeo_raw(registry, reference: str) -> bytes:
    """The manifest ``reference`` names, as skopeo reads it (an independent registry client)."""
    if not shutil.which("skopeo"):
        pytest.skip("skopeo missing: apt-get install skopeo")
    done = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                           "--creds", f"{registry.username}:{registry.password}",
                           f"docker://{registry.host}/{REPO}{reference}"], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def index_schema_errors(index: dict) -> list:
    """What the OCI image index schema finds wrong with ``index``. Its relative ``$ref``s resolve
    against the ``id`` URLs nested in it (draft 4): each file is served under those folders."""
    folders = ("https://opencontainers.org/schema/", "https://opencontainers.org/schema/image/",
               "https://opencontainers.org/schema/image/descriptor/")
    schemas = SchemaRegistry().with_resources(
        (folder + path.name, Resource.from_contents(json.loads(path.read_text()), default_specification=DRAFT4))
        for path in SCHEMAS.glob("*.json") for folder in folders)
    schema = json.loads((SCHEMAS / "image-index-schema.json").read_text())
    validator = jsonschema.Draft4Validator(schema, registry=schemas)
    return [e.message for e in validator.iter_errors(index)]


def referrer_of(registry, digest: str) -> dict:
    """What a referrers list must say of the manifest ``digest``, read with skopeo."""
    body = skopeo_raw(registry, "@" + digest)
    assert "sha256:" + hashlib.sha256(body).hexdigest() == digest
    manifest = json.loads(body)
    return {"mediaType": OCI_MANIFEST, "size": len(body), "digest": digest,
            "artifactType": manifest["config"]["mediaType"], "subject": manifest["subject"]["digest"]}


def listed(index: dict) -> list:
    return [{k: m.get(k) for k in ("mediaType", "size", "digest", "artifactType")} for m in index["manifests"]]


def test_each_attachment_is_listed_once_in_the_fallback_index_skopeo_reads(registry, creds, keys):
    reg = Registry(registry.host)
    digest = ht.put_tiny_image(reg, REPO, TAG)
    assert reg.referrers(REPO, digest) is None  # docker-registry 2.8: no referrers API (404)
    tag = "sha256-" + digest.split(":")[1]

    ht.attest_as(registry, REPO, TAG, digest, keys["team"][0])
    first = reg.manifest(REPO, attached.attestation_tag(digest)).digest
    index = json.loads(skopeo_raw(registry, ":" + tag))
    print(f"\n$ skopeo inspect --raw docker://{registry.host}/{REPO}:{tag}\n{json.dumps(index, indent=1)}")
    assert index_schema_errors(index) == []
    assert index_schema_errors({"schemaVersion": 2, "manifests": [{"mediaType": OCI_MANIFEST, "size": 1,
                                                                   "digest": "not a digest"}]})  # it can refuse
    assert index["mediaType"] == OCI_INDEX
    one = referrer_of(registry, first)
    assert one.pop("subject") == digest
    assert one["artifactType"] == "application/vnd.oci.image.config.v1+json"  # the config's: no artifactType
    assert listed(index) == [one]

    ht.attest_as(registry, REPO, TAG, digest, keys["team-2027"][0])  # another statement: a new .att manifest
    second = reg.manifest(REPO, attached.attestation_tag(digest)).digest
    assert second != first
    index = json.loads(skopeo_raw(registry, ":" + tag))
    assert index_schema_errors(index) == []
    two = referrer_of(registry, second)
    assert two.pop("subject") == digest
    assert listed(index) == [one, two]  # appended; the earlier .att manifest (still held) stays listed

    # attaching what is there already makes the same .att manifest: not listed twice
    layer = reg.manifest(REPO, second).data["layers"][0]
    again = attached.attach(reg, REPO, reg.manifest(REPO, digest),
                            [(reg.blob(REPO, layer["digest"]), layer["annotations"]["predicateType"])])
    assert again == second
    assert listed(json.loads(skopeo_raw(registry, ":" + tag))) == [one, two]
    assert tag not in [t for t in reg.tags(REPO) if not attached.is_attached_tag(t)]  # names no image


class WithReferrersAPI(Registry):
    """The loopback registry as one with the referrers API would answer (200 with an image index)."""

    def referrers(self, repository: str, digest: str):
        return {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}


def test_a_registry_with_the_referrers_api_gets_no_fallback_tag(registry, creds, keys):
    reg = WithReferrersAPI(registry.host)
    digest = ht.put_tiny_image(reg, REPO, "api-" + uuid.uuid4().hex[:6])
    body = statements.sign(statements.statement(f"{registry.host}/{REPO}", digest, statements.VALIDATION_V1,
                                                {"verdict": "passed"}), signing.load_private(keys["team"][0]))
    attached.attach(reg, REPO, reg.manifest(REPO, digest), [(body, statements.VALIDATION_V1)])
    tags = reg.tags(REPO)
    assert attached.attestation_tag(digest) in tags
    assert attached.referrers_tag(digest) not in tags


def test_a_tag_there_that_is_no_index_is_refused_not_overwritten(registry, creds, keys):
    reg = Registry(registry.host)
    digest = ht.put_tiny_image(reg, REPO, "squat-" + uuid.uuid4().hex[:6])
    other = ht.put_tiny_image(reg, REPO, "other-" + uuid.uuid4().hex[:6])
    squatter = reg.manifest(REPO, other)
    reg.put_manifest(REPO, attached.referrers_tag(digest), squatter.body, squatter.media_type)
    with pytest.raises(UserError) as refused:
        ht.attest_as(registry, REPO, TAG, digest, keys["team"][0])
    assert f"{attached.referrers_tag(digest)} holds a {OCI_MANIFEST}, not the referrers image index" in str(refused.value)
    assert "remove the tag" in refused.value.fix
    assert reg.manifest(REPO, attached.referrers_tag(digest)).digest == other  # left as it was
    assert attached.attestation_tag(digest) in reg.tags(REPO)  # the statements themselves are attached


def test_the_referrers_api_is_detected_by_its_answer(tmp_path, serve_folder):
    """200 with an image index: the API is there; 404, or 200 with anything else: it is not."""
    with_api, other = "sha256:" + "1a" * 32, "sha256:" + "2b" * 32
    folder = tmp_path / "v2" / "team" / "img" / "referrers"
    folder.mkdir(parents=True)
    (folder / with_api).write_text(json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}))
    (folder / other).write_text(json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []}))
    reg = Registry(serve_folder(tmp_path).removeprefix("http://"))
    assert reg.referrers("team/img", with_api) == {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
    assert reg.referrers("team/img", other) is None
    assert reg.referrers("team/img", "sha256:" + "3c" * 32) is None  # 404
