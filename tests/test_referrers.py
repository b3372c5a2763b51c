"""The OCI referrers fallback: where the registry has no referrers API, attaching keeps the index
under the tag ``sha256-<hex of the image digest>`` (OCI distribution spec v1.1, "Pushing Manifests
with Subject" and "Referrers Tag Schema"); it lists the ``.att`` manifests and the Sigstore bundle
referrers (one per statement, cosign ``specs/BUNDLE_SPEC.md``).

Against the loopback docker-registry 2.8 (htpasswd auth, no Docker Engine: the image is a config
and one layer put by the registry API), which answers 404 on ``/v2/<name>/referrers/<digest>``.
The index and the bundle manifests are read by an independent client, skopeo (``skopeo inspect
--raw``), the index validated against the OCI image-spec v1.1.1 image index schema
(tests/fixtures/oci-image-spec); each bundle is parsed by sigstore's own models (sigstore-models,
the pydantic models of sigstore's protobuf specs that sigstore-python reads bundles with) and its
DSSE signature verified by securesystemslib.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import uuid
from pathlib import Path

import jsonschema
import base64

import pytest
from cryptography.hazmat.primitives import serialization
from referencing import Registry as SchemaRegistry, Resource
from referencing.jsonschema import DRAFT4

from builder.errors import UserError
from builder.registry import OCI_INDEX, OCI_MANIFEST, Registry
from builder.images import attest
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
            "artifactType": manifest.get("artifactType") or manifest["config"]["mediaType"],
            "subject": manifest["subject"]["digest"]}


def listed(index: dict) -> list:
    return [{k: m.get(k) for k in ("mediaType", "size", "digest", "artifactType")} for m in index["manifests"]]


def bundles_listed(index: dict) -> list:
    return [m for m in index["manifests"] if m.get("artifactType") == attached.BUNDLE_MEDIA_TYPE]


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
    [b1] = [referrer_of(registry, m["digest"]) for m in bundles_listed(index)]  # one statement, one bundle
    assert b1.pop("subject") == digest and b1["artifactType"] == attached.BUNDLE_MEDIA_TYPE
    assert listed(index) == [one, b1]

    ht.attest_as(registry, REPO, TAG, digest, keys["team-2027"][0])  # another statement: a new .att manifest
    second = reg.manifest(REPO, attached.attestation_tag(digest)).digest
    assert second != first
    index = json.loads(skopeo_raw(registry, ":" + tag))
    assert index_schema_errors(index) == []
    two = referrer_of(registry, second)
    assert two.pop("subject") == digest
    [b2] = [referrer_of(registry, m["digest"]) for m in bundles_listed(index) if m["digest"] != b1["digest"]]
    b2.pop("subject")
    assert listed(index) == [one, b1, two, b2]  # appended; the earlier .att manifest (still held) stays listed

    # attaching what is there already makes the same .att manifest and bundle: not listed twice
    layer = reg.manifest(REPO, second).data["layers"][0]  # the team's statement, signed first
    again = attached.attach(reg, REPO, reg.manifest(REPO, digest),
                            [(reg.blob(REPO, layer["digest"]), layer["annotations"]["predicateType"])],
                            signing.load_public(keys["team"][1]))
    assert again == second
    assert listed(json.loads(skopeo_raw(registry, ":" + tag))) == [one, b1, two, b2]
    assert tag not in [t for t in reg.tags(REPO) if not attached.is_attached_tag(t)]  # names no image


def _sslib_key(public, keyid: str):
    from securesystemslib.signer import SSlibKey

    pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return SSlibKey(keyid, "ecdsa", "ecdsa-sha2-nistp256", {"public": pem})


def test_each_statement_is_a_sigstore_bundle_referrer_sigstores_models_parse_and_securesystemslib_verifies(
        registry, creds, keys):
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from sigstore_models.bundle.v1 import Bundle

    reg = Registry(registry.host)
    image_tag = "bundle-" + uuid.uuid4().hex[:6]
    digest = ht.put_tiny_image(reg, REPO, image_tag)
    key = signing.load_private(keys["team"][0])
    predicates = [(statements.VALIDATION_V1, {"verdict": "passed", "cell": "c"}),
                  (statements.CYCLONEDX_BOM, {"bomFormat": "CycloneDX", "specVersion": "1.5"})]
    att = attest.attest(f"{registry.host}/{REPO}:{image_tag}", digest, predicates, key)
    envelopes = {layer["annotations"]["predicateType"]: reg.blob(REPO, layer["digest"])
                 for layer in reg.manifest(REPO, att).data["layers"]}

    index = json.loads(skopeo_raw(registry, ":" + attached.referrers_tag(digest)))
    assert index_schema_errors(index) == []
    entries = bundles_listed(index)
    assert [e["annotations"] for e in entries] == [  # the index carries each manifest's annotations
        {"dev.sigstore.bundle.content": "dsse-envelope", "dev.sigstore.bundle.predicateType": kind}
        for kind, _ in predicates]
    hint = base64.b64encode(hashlib.sha256(signing.der(key.public_key())).digest()).decode()
    for entry, (kind, predicate) in zip(entries, predicates):
        manifest = json.loads(skopeo_raw(registry, "@" + entry["digest"]))
        print(f"\n$ skopeo inspect --raw .../{REPO}@{entry['digest']}\n{json.dumps(manifest, indent=1)}")
        assert manifest["artifactType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
        assert manifest["subject"]["digest"] == digest
        # the OCI image spec's empty descriptor (manifest.md, "Guidance for an Empty Descriptor")
        assert manifest["config"] == {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2,
                                      "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"}
        [layer] = manifest["layers"]
        assert layer["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
        text = reg.blob(REPO, layer["digest"])
        assert "sha256:" + hashlib.sha256(text).hexdigest() == layer["digest"]

        parsed = Bundle.from_json(text)  # sigstore's own models
        assert parsed.media_type == "application/vnd.dev.sigstore.bundle.v0.3+json"
        named = parsed.verification_material.public_key
        assert named is not None and named.hint == hint
        assert parsed.verification_material.certificate is None and parsed.verification_material.tlog_entries == []
        envelope = parsed.dsse_envelope
        assert envelope is not None and envelope.payload_type == "application/vnd.in-toto+json"
        assert json.loads(envelope.payload)["predicate"] == predicate

        document = json.loads(text)
        assert document["dsseEnvelope"] == json.loads(envelopes[kind])  # the same envelope as in the .att layer
        theirs = Envelope.from_dict(document["dsseEnvelope"])  # securesystemslib's DSSE
        assert list(theirs.verify([_sslib_key(key.public_key(), "")], 1)) == [""]
        other = signing.load_private(keys["stranger"][0]).public_key()
        with pytest.raises(VerificationError):
            theirs.verify([_sslib_key(other, "")], 1)
    with pytest.raises(ValueError):  # sigstore's models can refuse: a bundle without verification material
        Bundle.from_json(json.dumps({"mediaType": attached.BUNDLE_MEDIA_TYPE,
                                     "dsseEnvelope": json.loads(envelopes[statements.VALIDATION_V1])}))
    # verify reads the .att form as before: the statements verify with the key
    assert attached.verify(reg, REPO, digest, key.public_key()).verified(statements.VALIDATION_V1)


class WithReferrersAPI(Registry):
    """The loopback registry as one with the referrers API would answer (200 with an image index)."""

    def referrers(self, repository: str, digest: str):
        return {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}


def test_a_registry_with_the_referrers_api_gets_no_fallback_tag(registry, creds, keys):
    reg = WithReferrersAPI(registry.host)
    digest = ht.put_tiny_image(reg, REPO, "api-" + uuid.uuid4().hex[:6])
    body = statements.sign(statements.statement(f"{registry.host}/{REPO}", digest, statements.VALIDATION_V1,
                                                {"verdict": "passed"}), signing.load_private(keys["team"][0]))
    attached.attach(reg, REPO, reg.manifest(REPO, digest), [(body, statements.VALIDATION_V1)],
                    signing.load_public(keys["team"][1]))
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
