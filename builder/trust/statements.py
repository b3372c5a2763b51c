"""Signed statements about an image: in-toto Statement v1 in a DSSE envelope, made and checked.

"Validated" is a signed statement, not a label: labels are written by whoever builds an
image, a statement is signed by the team's key and names the image by digest. Both wings
use this module: the build wing signs what it validated (`builder.images.attest`), `verify`
(and later the node's `pull`/`run`) check it. Where statements are kept in a registry is
`builder.trust.attached`'s job.

- **Statement** (https://github.com/in-toto/attestation, spec/v1/statement.md):
  ``{"_type": "https://in-toto.io/Statement/v1", "subject": [{"name", "digest": {"sha256"}}],
  "predicateType": URI, "predicate": {...}}``.
- **Envelope** (DSSE v1, https://github.com/secure-systems-lab/dsse, protocol.md):
  ``{"payloadType": "application/vnd.in-toto+json", "payload": base64(statement),
  "signatures": [{"keyid", "sig": base64(DER ECDSA P-256 SHA-256 over PAE)}]}``, with
  ``PAE = "DSSEv1" SP len(type) SP type SP len(body) SP body`` (lengths in ASCII decimal).
  ``keyid`` is empty: go-securesystemslib's ``dsse.EnvelopeVerifier`` (v0.11, ``dsse/verify.go``),
  behind sigstore's DSSE adapters (sigstore/sigstore ``pkg/signature/dsse``), skips a signature
  whose keyid is set and differs from the verifier's, which is, when the adapter names none, the
  key's SSH SHA256 fingerprint (``dsse.SHA256KeyID``); on an empty keyid it tries the key. Python's
  securesystemslib matches keyids exactly: give its key the id ``""``. The keyid is unsigned
  anyway, so `check` never reads it: the signature alone decides, and says why.

`check` says what verified and, when nothing did, why, from what it verified only: not an
envelope, another payload type, not signed by the trusted key (a signature that does not verify
cannot tell another key from an edit after signing), or a statement about another image.

Example:
    >>> from cryptography.hazmat.primitives.asymmetric import ec
    >>> key = ec.generate_private_key(ec.SECP256R1())
    >>> digest = "sha256:" + "ab" * 32
    >>> envelope = sign(statement("registry.example/team/img", digest, VALIDATION_V1, {"verdict": "passed"}), key)
    >>> found = check(envelope, key.public_key(), digest)
    >>> found.ok, found.predicate_type, found.predicate["verdict"]
    (True, 'https://ascend-build.io/attestations/validation/v1', 'passed')
    >>> check(envelope, key.public_key(), "sha256:" + "cd" * 32).reason.split(":")[0]
    'its subject is sha256'
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from builder import documents
from builder.trust.signing import PrivateKey, PublicKey, fingerprint

STATEMENT_V1 = "https://in-toto.io/Statement/v1"
# The envelope's payload type for in-toto statements: cosign's IntotoPayloadType
# (sigstore/cosign pkg/types/payload.go), which `cosign verify-attestation` requires.
INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
KEYID = ""  # the envelope's keyid: none, which every DSSE verifier tries (see the module docstring)
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
# cosign's predicate type for `attest --type cyclonedx`: the predicate is the CycloneDX document itself
CYCLONEDX_BOM = "https://cyclonedx.org/bom"
# Ours. The host is the label prefix's domain (labels are io.ascend-build.*, reverse DNS of it).
VALIDATION_V1 = "https://ascend-build.io/attestations/validation/v1"
BUILD_TYPE_V1 = "https://ascend-build.io/buildtypes/image/v1"
BUILDER_ID = "https://ascend-build.io/builder/cli"

ENVELOPE_LIMIT = 4 << 20  # a statement here is a few KB


def statement(name: str, digest: str, predicate_type: str, predicate: Dict[str, Any]) -> Dict[str, Any]:
    """An in-toto Statement v1 about the artifact ``name`` with ``digest`` (``sha256:<hex>``)."""
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64:
        raise ValueError(f"{digest!r} is not a sha256 digest")
    return {"_type": STATEMENT_V1, "subject": [{"name": name, "digest": {"sha256": hexdigest}}],
            "predicateType": predicate_type, "predicate": predicate}


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is signed, so the type cannot be swapped.

    Example:
        >>> pae("t", b"hi")
        b'DSSEv1 1 t 2 hi'
    """
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def sign(body: Dict[str, Any], key: PrivateKey) -> bytes:
    """The DSSE envelope (JSON bytes) of the statement ``body``, signed with ``key``."""
    payload = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    # deterministic (RFC 6979): the same statement signed again is the same envelope, so
    # attaching it again adds nothing (`attached.attach` skips a layer already there)
    signature = key.sign(pae(INTOTO_PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
    # the field order of cosign's envelopes (go-securesystemslib dsse.Envelope)
    envelope = {"payloadType": INTOTO_PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode(),
                "signatures": [{"keyid": KEYID, "sig": base64.b64encode(signature).decode()}]}
    return json.dumps(envelope, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Checked:
    """One envelope checked against a key and an image digest: ``ok``, or ``reason`` why not.
    ``statement`` is set only when the signature verified (never read an unverified one)."""

    ok: bool
    reason: str = ""
    predicate_type: str = ""
    statement: Optional[Dict[str, Any]] = None
    keyids: List[str] = field(default_factory=list)  # as the envelope writes them: unsigned, never used to decide

    @property
    def predicate(self) -> Dict[str, Any]:
        found = (self.statement or {}).get("predicate")
        return found if isinstance(found, dict) else {}


def _b64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise ValueError("not a string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))  # DSSE allows either alphabet


def _signed_by(key: PublicKey, message: bytes, signatures: List[Dict[str, Any]]) -> bool:
    for entry in signatures:
        try:
            key.verify(_b64(entry.get("sig")), message, ec.ECDSA(hashes.SHA256()))
            return True
        except (InvalidSignature, ValueError, binascii.Error):
            continue
    return False


def check(envelope: bytes, key: PublicKey, digest: str) -> Checked:
    """Whether ``envelope`` is a statement about ``digest`` signed by ``key``; if not, why."""
    try:
        data = documents.load_json(envelope, "a DSSE envelope")
    except ValueError:  # documents.Refused is one too
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("signatures"), list):
        return Checked(False, "not a DSSE envelope (no JSON object with signatures)")
    signatures = [s for s in data["signatures"] if isinstance(s, dict)]
    keyids = [str(s.get("keyid") or "") for s in signatures]
    if data.get("payloadType") != INTOTO_PAYLOAD_TYPE:
        return Checked(False, f"its payload type is {data.get('payloadType')!r}, not {INTOTO_PAYLOAD_TYPE}", keyids=keyids)
    if not signatures:
        return Checked(False, "it carries no signature")
    try:
        payload = _b64(data.get("payload"))
    except (ValueError, binascii.Error):
        return Checked(False, "its payload is not base64", keyids=keyids)
    if not _signed_by(key, pae(INTOTO_PAYLOAD_TYPE, payload), signatures):
        # Only the signature is evidence: a keyid is unsigned (anyone can write the team's), and a
        # signature that does not verify cannot tell "another key" from "edited after signing".
        return Checked(False, f"not signed by the trusted key (keyid {fingerprint(key)[:16]}): no signature verifies "
                              "over its payload with that key (signed by another key, or changed after signing)",
                       keyids=keyids)
    try:
        body = documents.load_json(payload, "a statement")
    except ValueError:
        body = None
    if not isinstance(body, dict) or body.get("_type") != STATEMENT_V1:
        return Checked(False, f"signed, but its payload is not an in-toto Statement v1 ({STATEMENT_V1})", keyids=keyids)
    predicate_type = str(body.get("predicateType", ""))
    subjects = body["subject"] if isinstance(body.get("subject"), list) else []
    named_digests = ["sha256:" + str(s["digest"].get("sha256")) for s in subjects
                     if isinstance(s, dict) and isinstance(s.get("digest"), dict)]
    if digest not in named_digests:
        return Checked(False, f"its subject is {', '.join(named_digests) or 'nothing'}, not this image ({digest}): "
                              "a statement about another image", predicate_type, keyids=keyids)
    return Checked(True, "", predicate_type, body, keyids)
