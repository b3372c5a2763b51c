"""Statements kept beside an image in its registry, in cosign's tag layout, and checked from there.

An image ``REPO@sha256:<hex>`` has its attestations under the tag ``sha256-<hex>.att`` of the
same repository: an OCI image manifest whose layers are the DSSE envelopes, each annotated
with its ``predicateType``, as ``cosign attest`` writes them; so ``cosign verify-attestation
--key``, Kyverno's ``verifyImages`` and sigstore's policy-controller find them. The manifest
also sets OCI 1.1's ``subject`` to the image's descriptor, so a registry with the referrers
API lists them too; on one without it (Debian's docker-registry 2.8 stores the field but answers
404 there) `refer` keeps the spec's fallback, an image index under the tag ``sha256-<hex>``
listing each manifest pushed with that ``subject``, which referrers clients read instead.

The same envelopes are attached a second time as Sigstore bundles (`attach_bundles`), the format
cosign's ``--new-bundle-format`` writes and its maintainers name as the only one of its future
versions: per statement, a bundle (``application/vnd.dev.sigstore.bundle.v0.3+json``: the DSSE
envelope, unchanged, and ``verificationMaterial`` naming the public key by a hint, with no
certificate and no transparency-log entry) in an OCI artifact manifest whose ``artifactType`` is
the bundle's media type and whose ``subject`` is the image, pushed by digest and listed among
the image's referrers (cosign ``specs/BUNDLE_SPEC.md``).

Each spelling below is cosign's, from its source (sigstore/cosign, v3.1.2):

- the tag: ``pkg/oci/remote/remote.go`` (``normalize``: ``sha256:<hex>`` -> ``sha256-<hex>.<suffix>``)
  and ``pkg/oci/remote/options.go`` (``AttestationTagSuffix = "att"``);
- the layer media type: ``pkg/types/payload.go`` (``DssePayloadType``), set by
  ``cmd/cosign/cli/attest/attest.go`` (``static.WithLayerMediaType``);
- the layer annotations: ``predicateType`` (``cmd/cosign/cli/attest/attest.go``) and an empty
  ``dev.cosignproject.cosign/signature`` (``pkg/oci/static/signature.go``: an attestation's
  signature is inside its envelope);
- the manifest and config: ``pkg/oci/empty/empty.go`` (an OCI manifest whose config has the OCI
  config media type) grown by go-containerregistry's ``mutate.Append`` (the config's
  ``rootfs.diff_ids`` and ``history`` get one entry per layer).

Appending reads the manifest there and adds a layer, so earlier statements (another predicate,
an older key) stay. Two writers at once could lose one's layer: attach from one place at a time.

Example:
    >>> attestation_tag("sha256:" + "0f" * 32)
    'sha256-0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f.att'
    >>> referrers_tag("sha256:" + "0f" * 32) == "sha256-" + "0f" * 32
    True
    >>> is_attached_tag("sha256-" + "0f" * 32 + ".sig"), is_attached_tag("cann8.0.rc3-910b-x86_64")
    (True, False)
    >>> is_attached_tag(referrers_tag("sha256:" + "0f" * 32))
    True
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from builder import documents

from builder.cell_id import named_by_tag
from builder.trust import statements
from builder.errors import UserError
from builder.registry import OCI_INDEX, OCI_MANIFEST, Manifest, Reader, Registry
from builder.trust.signing import PublicKey, der

DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"      # cosign pkg/types/payload.go DssePayloadType
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"        # go-containerregistry types.OCIConfigJSON
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"    # cosign pkg/oci/static/signature.go
PREDICATE_TYPE_ANNOTATION = "predicateType"                    # cosign cmd/cosign/cli/attest/attest.go
ATTESTATION_SUFFIX = "att"                                     # cosign pkg/oci/remote/options.go
_ATTACHED = re.compile(r"sha256-[0-9a-f]{64}(\.(att|sig|sbom))?")  # cosign's tags; bare: the referrers index
_ZERO_TIME = "0001-01-01T00:00:00Z"                              # Go's zero time.Time, as cosign's config has it
# The bundle referrer, as cosign specs/BUNDLE_SPEC.md lays it out: the bundle's media type is sigstore's
# protobuf-specs' (v0.3); the config is the OCI image spec's empty descriptor (manifest.md, "Guidance for
# an Empty Descriptor": the two bytes ``{}``); the annotations are the spec's, without the optional
# creation time (the same statements make the same bytes, so attaching them again adds nothing).
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
EMPTY_CONFIG = b"{}"
BUNDLE_CONTENT_ANNOTATION = "dev.sigstore.bundle.content"
BUNDLE_PREDICATE_ANNOTATION = "dev.sigstore.bundle.predicateType"


def attestation_tag(digest: str) -> str:
    """The tag cosign keeps the attestations of ``digest`` under."""
    algorithm, _, hexdigest = digest.partition(":")
    return f"{algorithm}-{hexdigest}.{ATTESTATION_SUFFIX}"


def is_attached_tag(tag: str) -> bool:
    """True for cosign's tags of signatures, attestations and SBOMs, and for the referrers index's
    tag (`referrers_tag`): they name no image."""
    return bool(_ATTACHED.fullmatch(tag))


def _go_json(value) -> bytes:
    """Compact JSON, keys in the order given, as Go's encoding/json writes cosign's structs."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _config(previous: Optional[dict], new_layers: Sequence[str]) -> bytes:
    """The config after appending layers: cosign's empty config, or the one there, with one
    ``diff_ids`` and ``history`` entry per new layer (an envelope's diff ID is its digest)."""
    config: Dict[str, Any] = previous if previous is not None else {
        "architecture": "", "created": _ZERO_TIME, "history": [], "os": "",
        "rootfs": {"type": "layers", "diff_ids": []}, "config": {}}
    history = config["history"] if isinstance(config.get("history"), list) else []
    rootfs: Dict[str, Any] = config["rootfs"] if isinstance(config.get("rootfs"), dict) else {"type": "layers"}
    diff_ids: List[str] = rootfs["diff_ids"] if isinstance(rootfs.get("diff_ids"), list) else []
    config["history"] = history + [{"created": _ZERO_TIME} for _ in new_layers]
    config["rootfs"] = {**rootfs, "diff_ids": diff_ids + list(new_layers)}
    return _go_json(config)


def _descriptor(media_type: str, body: bytes, annotations: Optional[Dict[str, str]] = None) -> dict:
    described = {"mediaType": media_type, "size": len(body), "digest": "sha256:" + hashlib.sha256(body).hexdigest()}
    if annotations:
        described["annotations"] = dict(sorted(annotations.items()))  # Go writes map keys sorted
    return described


def _existing(registry: Reader, repository: str, digest: str) -> Optional[Manifest]:
    try:
        return registry.manifest(repository, attestation_tag(digest))
    except LookupError:
        return None


def _config_of(registry: Registry, repository: str, manifest: Manifest) -> Optional[dict]:
    """The config of the .att manifest there, as JSON; None when it cannot be read."""
    try:
        config = documents.load_json(registry.blob(repository, manifest.data["config"]["digest"]), "an .att config")
    except (KeyError, TypeError, ValueError, LookupError, UserError):
        return None
    return config if isinstance(config, dict) else None


def attach(registry: Registry, repository: str, image: Manifest, envelopes: Sequence[Tuple[bytes, str]],
           signer: PublicKey) -> str:
    """Append ``envelopes`` ((DSSE bytes, predicate type), ...) to ``image``'s attestations; the new
    ``.att`` manifest's digest. An envelope already there (same bytes) is not added twice. Each
    envelope is attached as a Sigstore bundle referrer too (`attach_bundles`), naming ``signer``
    (the public key of the key that signed them) by its hint; the referrers index lists both forms."""
    there = _existing(registry, repository, image.digest)
    layers = [layer for layer in (there.data.get("layers") or []) if isinstance(layer, dict)] if there else []
    previous = _config_of(registry, repository, there) if there else None
    present = {str(layer.get("digest")) for layer in layers}
    added = []
    for body, predicate_type in envelopes:
        described = _descriptor(DSSE_MEDIA_TYPE, body, {PREDICATE_TYPE_ANNOTATION: predicate_type,
                                                        SIGNATURE_ANNOTATION: ""})
        if described["digest"] in present:
            continue
        registry.put_blob(repository, body)
        layers.append(described)
        present.add(described["digest"])
        added.append(described["digest"])
    # the config there grows by the new layers; an unreadable one is made anew from every layer
    config = _config(previous, added) if previous is not None else _config(None, [str(x.get("digest")) for x in layers])
    registry.put_blob(repository, config)
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": _descriptor(OCI_CONFIG, config),
                "layers": layers,
                "subject": {"mediaType": image.media_type, "size": len(image.body), "digest": image.digest}}
    body = _go_json(manifest)
    digest = registry.put_manifest(repository, attestation_tag(image.digest), body, OCI_MANIFEST)
    bundles = attach_bundles(registry, repository, image, envelopes, key_hint(signer))
    refer(registry, repository, image.digest, [_referrer(manifest, body)] + bundles)
    return digest


def key_hint(key: PublicKey) -> str:
    """The bundle's ``publicKey.hint``: the standard base64 of the SHA-256 of the key's DER
    SubjectPublicKeyInfo, the hint sigstore-go's keypairs give their keys. A hint only tells a
    verifier which of its keys to try: the key itself is the verifier's own, never the bundle's."""
    return base64.b64encode(hashlib.sha256(der(key)).digest()).decode()


def bundle(envelope: bytes, hint: str) -> bytes:
    """The Sigstore bundle v0.3 (protobuf-specs ``dev.sigstore.bundle.v1.Bundle`` in its JSON form)
    of one DSSE envelope: the envelope as signed, the key named by ``hint``, no certificate, no
    transparency-log entry (``tlogEntries`` is written, empty: sigstore's models require the field)."""
    return _go_json({"mediaType": BUNDLE_MEDIA_TYPE,
                     "verificationMaterial": {"publicKey": {"hint": hint}, "tlogEntries": []},
                     "dsseEnvelope": json.loads(envelope)})


def attach_bundles(registry: Registry, repository: str, image: Manifest, envelopes: Sequence[Tuple[bytes, str]],
                   hint: str) -> List[dict]:
    """Push each envelope as a bundle referrer of ``image`` (by digest, no tag); their descriptors
    as a referrers list holds them (`refer` lists them). The same envelope makes the same bytes."""
    registry.put_blob(repository, EMPTY_CONFIG)
    listed = []
    for envelope, predicate_type in envelopes:
        body = bundle(envelope, hint)
        registry.put_blob(repository, body)
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": BUNDLE_MEDIA_TYPE,
                    "config": _descriptor(OCI_EMPTY, EMPTY_CONFIG),
                    "layers": [_descriptor(BUNDLE_MEDIA_TYPE, body)],
                    "subject": {"mediaType": image.media_type, "size": len(image.body), "digest": image.digest},
                    "annotations": {BUNDLE_CONTENT_ANNOTATION: "dsse-envelope",
                                    BUNDLE_PREDICATE_ANNOTATION: predicate_type}}
        text = _go_json(manifest)
        digest = "sha256:" + hashlib.sha256(text).hexdigest()
        registry.put_manifest(repository, digest, text, OCI_MANIFEST)
        listed.append(_referrer(manifest, text))
    return listed


def referrers_tag(digest: str) -> str:
    """The tag of ``digest``'s referrers index where the registry has no referrers API: OCI
    distribution spec v1.1, "Referrers Tag Schema" (``<alg>-<encoded>``, truncated to 32 and 64
    characters; a sha256 digest's are shorter and need no replacing)."""
    algorithm, _, encoded = digest.partition(":")
    return f"{algorithm[:32]}-{encoded[:64]}"


def _referrer(manifest: dict, body: bytes) -> dict:
    """A manifest's descriptor as a referrers list holds it: OCI distribution spec v1.1, "Pushing
    Manifests with Subject" (``artifactType`` is the manifest's own, else its config's media type;
    its annotations copied)."""
    described: Dict[str, Any] = {"mediaType": manifest["mediaType"], "size": len(body),
                                 "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
                                 "artifactType": manifest.get("artifactType") or manifest["config"]["mediaType"]}
    if manifest.get("annotations"):
        described["annotations"] = dict(manifest["annotations"])
    return described


def refer(registry: Registry, repository: str, subject: str, referrers: Sequence[dict]) -> None:
    """Have ``referrers`` (descriptors) listed among ``subject``'s referrers.

    OCI distribution spec v1.1, "Backwards Compatibility: Unavailable Referrers API" and "Pushing
    Manifests with Subject": a client pushing a manifest with ``subject`` checks that the referrers
    API is there; where it is not (docker-registry 2.8 answers 404), the client keeps the list
    itself, an image index under the "Referrers Tag Schema" tag (`referrers_tag`): pulled (none
    there: an empty index), each descriptor added unless it is listed already, pushed again. A
    registry with the API lists the manifests by their ``subject``: nothing is pushed there. As with
    the ``.att`` tag, two writers at once could lose one's entry (no conditional request is made).
    """
    if registry.referrers(repository, subject) is not None:
        return
    tag = referrers_tag(subject)
    try:
        there: Optional[Manifest] = registry.manifest(repository, tag)
    except LookupError:
        there = None
    if there is not None and not is_referrers_index(there):
        # the spec: a tag there that is not an image index is a failure to stop at, not to overwrite
        raise UserError(f"{registry.name}/{repository}:{tag} holds a {there.media_type or 'manifest'}, not the "
                        f"referrers image index of {subject}: it was left as it is", exit_code=1,
                        fix=f"the statements are attached under {attestation_tag(subject)}; to have the referrers "
                            f"index kept too, remove the tag {tag} (it names no image) and attach again")
    merged = merged_index(there, referrers)
    if merged is not None:
        registry.put_manifest(repository, tag, merged, OCI_INDEX)


def is_referrers_index(manifest: Manifest) -> bool:
    """Whether ``manifest`` can be a referrers list: an OCI image index with a ``manifests`` list."""
    return manifest.media_type == OCI_INDEX and isinstance(manifest.data.get("manifests"), list)


def listed_referrers(index: Optional[Manifest]) -> List[dict]:
    """The descriptors a referrers index lists ([] for none)."""
    if index is None or not is_referrers_index(index):
        return []
    return [m for m in index.data["manifests"] if isinstance(m, dict) and isinstance(m.get("digest"), str)]


def merged_index(there: Optional[Manifest], referrers: Sequence[dict]) -> Optional[bytes]:
    """The referrers index ``there`` (None: an empty one) with each of ``referrers`` appended unless
    a descriptor of its digest is listed already; None when nothing is to be added."""
    listed = listed_referrers(there)
    present = {m["digest"] for m in listed}
    added = []
    for referrer in referrers:
        if referrer["digest"] not in present:
            added.append(referrer)
            present.add(referrer["digest"])
    if not added:
        return None
    return _go_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": listed + added})


@dataclass(frozen=True)
class Found:
    """One statement attached to an image, checked: the layer's claimed type and the verdict."""

    layer: str                    # the layer's digest in the .att manifest
    claimed_type: str             # its predicateType annotation (unsigned: what it says it is)
    checked: statements.Checked

    @property
    def predicate_type(self) -> str:
        """The signed predicate type when it verified, else the claimed one."""
        return self.checked.predicate_type or self.claimed_type


@dataclass(frozen=True)
class Verification:
    """Every statement attached to ``digest`` checked against one key; what they must say to be
    trusted is `builder.trust.policy.judge`'s decision, not this class's.

    ``named``: the (cell id, variant) the reference's tag names (`builder.cell_id.named_by_tag`),
    None for a digest or a tag that names no cell: a tag is a claim anyone who can push makes,
    so `judge` refuses a statement about another cell under that tag.
    """

    reference: str
    digest: str
    tag: str                                  # where they were looked for (the .att tag)
    found: List[Found] = field(default_factory=list)
    missing: str = ""                         # why none could be read, when none could
    named: Optional[Tuple[str, str]] = None   # (cell id, variant) the reference's tag names

    def verified(self, predicate_type: str) -> List[Found]:
        return [f for f in self.found if f.checked.ok and f.checked.predicate_type == predicate_type]


def _held(registry: Reader, repository: str, tag: str, digest: str) -> None:
    """A manifest served for ``tag`` whose digest names no statement: the registry must hold it by
    that digest too, else what was served is not what the tag names (bytes altered on the way, with
    no digest header to catch it), and "no statement" would be the wrong diagnosis."""
    try:
        registry.manifest(repository, digest)  # another body than ``digest`` names: refused there, saying so
    except LookupError:
        raise UserError(f"{registry.name}/{repository}:{tag}: the registry served other bytes than the digest asked "
                        f"for: the manifest served for the tag hashes to {digest}, which the registry does not hold",
                        exit_code=1, fix="nothing was verified: check the registry and any proxy before it "
                                         "(the manifest was altered on the way), then verify again") from None


def verify(registry: Reader, repository: str, reference: str, key: PublicKey) -> Verification:
    """Check every statement attached to ``repository:reference`` (tag or digest) against ``key``;
    ``registry`` is a `Registry` or an OCI image layout (`builder.registry.Reader`). A tag naming a
    cell (`builder.cell_id.named_by_tag`) is recorded as ``named`` for `builder.trust.policy.judge`."""
    named = None if reference.startswith("sha256:") else named_by_tag(reference)
    try:
        image = registry.manifest(repository, reference)
    except LookupError:
        raise UserError(f"{registry.name}/{repository}:{reference} is not in the registry", exit_code=1,
                        fix="check the repository and tag (`ascend-build pull` lists what is there)") from None
    tag = attestation_tag(image.digest)
    there = _existing(registry, repository, image.digest)
    if there is None and not reference.startswith("sha256:"):
        _held(registry, repository, reference, image.digest)
    if there is None:
        why = ("it is an image index, and statements are attached to each arch's image: verify the arch's tag"
               if image.is_index else "pushed without --sign-key, or by someone without the key")
        return Verification(reference, image.digest, tag, named=named,
                            missing=f"no statement is attached: {registry.name}/{repository} has no tag {tag} ({why})")
    found = []
    for layer in there.data.get("layers") or []:
        if not isinstance(layer, dict) or not isinstance(layer.get("digest"), str):
            continue
        annotations = layer["annotations"] if isinstance(layer.get("annotations"), dict) else {}
        claimed = str(annotations.get(PREDICATE_TYPE_ANNOTATION, ""))
        if layer.get("mediaType") != DSSE_MEDIA_TYPE:
            found.append(Found(layer["digest"], claimed, statements.Checked(
                False, f"its layer is {layer.get('mediaType')!r}, not a DSSE envelope ({DSSE_MEDIA_TYPE})")))
            continue
        try:
            body = registry.blob(repository, layer["digest"], limit=statements.ENVELOPE_LIMIT)
        except LookupError:
            found.append(Found(layer["digest"], claimed, statements.Checked(False, "its layer's blob is not in the registry")))
            continue
        found.append(Found(layer["digest"], claimed, statements.check(body, key, image.digest)))
    return Verification(reference, image.digest, tag, found, named=named)
