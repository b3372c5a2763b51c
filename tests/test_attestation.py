"""Keys, statements and DSSE envelopes, without a registry: made by our code, checked by others'.

- Keys: `keys generate` writes a P-256 pair (0600, encrypted with ASCEND_BUILD_KEY_PASSPHRASE when
  set), never overwrites; a missing file, a wrong or missing passphrase, a .pub given as the
  private key are refused with a message, no traceback.
- Envelopes: verified by **securesystemslib** (an independent DSSE implementation), not by ours;
  our PAE is byte for byte securesystemslib's.
- Statements: the validation and provenance statements of a real job and a real-shaped report
  validate against the in-toto Statement v1 and SLSA provenance v1 schemas in
  tests/fixtures/attestation (written from the spec text: no official JSON schema exists).
- `check` refuses another key, an edited payload, another image's statement, naming why.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from builder.trust import attached, signing, statements
from builder.images import attest, matrix
from builder.images.prepare import Options, prepare
from builder.errors import UserError
from builder.vocabulary import CPU, NPU, tier_names

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = Path(__file__).resolve().parent / "fixtures" / "attestation"
CLI = str(Path(sys.executable).with_name("ascend-build"))
DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
CELL_ID = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"


@pytest.fixture
def no_passphrase(monkeypatch):
    monkeypatch.delenv(signing.PASSPHRASE_ENV, raising=False)


@pytest.fixture
def pair(tmp_path, no_passphrase):
    key_path, pub_path = signing.generate(tmp_path / "keys", "team")
    return signing.load_private(key_path), signing.load_public(pub_path)


def cli(*args, **env):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120,
                          env={**{k: v for k, v in os.environ.items() if k != signing.PASSPHRASE_ENV}, **env})


# --- keys ----------------------------------------------------------------------------------


def test_keys_generate_writes_a_p256_pair_the_private_one_0600(tmp_path, no_passphrase):
    done = cli("keys", "generate", str(tmp_path / "k"), "--name", "team")
    assert done.returncode == 0, done.stderr
    key_file, pub_file = tmp_path / "k" / "team.key", tmp_path / "k" / "team.pub"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key_file.read_text().startswith("-----BEGIN PRIVATE KEY-----")       # PKCS#8, unencrypted
    assert pub_file.read_text().startswith("-----BEGIN PUBLIC KEY-----")        # SubjectPublicKeyInfo
    public = serialization.load_pem_public_key(pub_file.read_bytes())
    assert isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name == "secp256r1"
    assert "NOT encrypted" in done.stdout and signing.fingerprint(public) in done.stdout


def test_keys_generate_refuses_to_overwrite_either_file(tmp_path, no_passphrase):
    (tmp_path / "team.pub").write_text("someone's key\n")
    done = cli("keys", "generate", str(tmp_path), "--name", "team")
    assert done.returncode == 1 and "never overwritten" in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "team.pub").read_text() == "someone's key\n" and not (tmp_path / "team.key").exists()


def test_keys_generate_on_a_full_disk_leaves_neither_file_and_a_retry_works(no_passphrase):
    """A pair is made whole or not at all: a 0-byte .key, or a .key without its .pub, would make
    every retry refuse ("never overwritten") until someone deleted it by hand."""
    from tests.support.faults import CannotMount, fill, small_fs

    try:
        with small_fs("64k") as point:
            (point / "k").mkdir()
            filler = fill(point)
            done = cli("keys", "generate", str(point / "k"), "--name", "team")
            assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
            assert "no space left on the file system of" in done.stderr and "no key was written (neither file)" in done.stderr
            assert list((point / "k").iterdir()) == []  # no 0-byte .key, no staged file
            filler.unlink()
            again = cli("keys", "generate", str(point / "k"), "--name", "team")
            assert again.returncode == 0, again.stderr
            assert sorted(p.name for p in (point / "k").iterdir()) == ["team.key", "team.pub"]
    except CannotMount as why:
        pytest.skip(f"no tmpfs here: {why}")


def test_keys_generate_in_a_git_checkout_warns_unless_gitignore_covers_the_key(tmp_path, no_passphrase):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    done = cli("keys", "generate", str(tmp_path / "keys"), "--name", "team")
    assert done.returncode == 0, done.stderr
    assert (f"warning: {tmp_path / 'keys' / 'team.key'} is inside the git checkout {tmp_path} and no .gitignore "
            f"covers it: add '*.key' to {tmp_path}/.gitignore") in done.stderr
    (tmp_path / ".gitignore").write_text("*.key\n")
    covered = cli("keys", "generate", str(tmp_path / "keys"), "--name", "team-2")
    assert covered.returncode == 0 and "warning" not in covered.stderr, covered.stderr
    outside = cli("keys", "generate", str(tmp_path.parent / f"{tmp_path.name}-plain"), "--name", "team")
    assert outside.returncode == 0 and "warning" not in outside.stderr, outside.stderr


def test_an_encrypted_key_needs_its_passphrase(tmp_path, monkeypatch):
    monkeypatch.setenv(signing.PASSPHRASE_ENV, "correct horse")
    key_path, _ = signing.generate(tmp_path, "team")
    assert key_path.read_text().startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert isinstance(signing.load_private(key_path), ec.EllipticCurvePrivateKey)
    monkeypatch.setenv(signing.PASSPHRASE_ENV, "wrong")
    with pytest.raises(UserError, match="passphrase .* is wrong"):
        signing.load_private(key_path)
    monkeypatch.delenv(signing.PASSPHRASE_ENV)
    with pytest.raises(UserError, match="is encrypted and ASCEND_BUILD_KEY_PASSPHRASE is not set"):
        signing.load_private(key_path)


def test_bad_key_files_are_refused_without_a_traceback(tmp_path, no_passphrase):
    key_path, pub_path = signing.generate(tmp_path, "team")
    with pytest.raises(UserError, match="cannot read the private key"):
        signing.load_private(tmp_path / "absent.key")
    with pytest.raises(UserError, match="cannot be read as a PEM private key"):
        signing.load_private(pub_path)
    with pytest.raises(UserError, match="not a PEM public key"):
        signing.load_public(key_path)
    done = cli("verify", "127.0.0.1:1/x:y", "--key", str(tmp_path / "absent.pub"))
    assert done.returncode == 2 and "cannot read the public key" in done.stderr and "Traceback" not in done.stderr
    done = cli("image", "--cell", CELL_ID, "--sign-key", str(key_path), "--push", "127.0.0.1:1",
               **{signing.PASSPHRASE_ENV: "set for a plain key"})
    assert done.returncode == 2 and "is not encrypted" in done.stderr and "Traceback" not in done.stderr
    done = cli("image", "--cell", CELL_ID, "--sign-key", str(key_path))
    assert done.returncode == 2 and "nothing is pushed" in done.stderr


# --- envelopes, checked by securesystemslib --------------------------------------------------


def _sslib_key(public, keyid: str):
    from securesystemslib.signer import SSlibKey

    pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return SSlibKey(keyid, "ecdsa", "ecdsa-sha2-nistp256", {"public": pem})


def test_securesystemslib_verifies_our_envelope_and_refuses_an_edited_one(pair):
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError

    key, public = pair
    body = statements.statement("reg.example/team/img", DIGEST, statements.VALIDATION_V1, {"verdict": "passed"})
    envelope = json.loads(statements.sign(body, key))
    assert list(envelope) == ["payloadType", "payload", "signatures"]          # cosign's field order
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    keyid = envelope["signatures"][0]["keyid"]
    # none: go-securesystemslib (behind sigstore's adapters) skips a set keyid that is not the key's
    # SSH SHA256 fingerprint; Python's securesystemslib matches exactly, so its key's id is ""
    assert keyid == ""

    theirs = Envelope.from_dict(json.loads(json.dumps(envelope)))
    assert theirs.pae() == statements.pae(envelope["payloadType"], base64.b64decode(envelope["payload"]))
    accepted = theirs.verify([_sslib_key(public, keyid)], 1)
    assert list(accepted) == [keyid]
    assert json.loads(theirs.payload) == body

    edited = dict(envelope, payload=base64.b64encode(json.dumps(
        dict(body, predicate={"verdict": "passed", "forged": True})).encode()).decode())
    with pytest.raises(VerificationError):
        Envelope.from_dict(json.loads(json.dumps(edited))).verify([_sslib_key(public, keyid)], 1)
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    with pytest.raises(VerificationError):
        Envelope.from_dict(json.loads(json.dumps(envelope))).verify([_sslib_key(other, keyid)], 1)


def test_a_strangers_envelope_carrying_the_team_keyid_is_not_signed_by_the_trusted_key(pair):
    """The keyid is unsigned: a stranger writes the team's, and the refusal must not take it at its word
    ("changed after signing" would say the team's key signed something); only the signature is read."""
    key, public = pair
    body = statements.statement("reg.example/team/img", DIGEST, statements.VALIDATION_V1, {"verdict": "passed"})
    data = json.loads(statements.sign(body, ec.generate_private_key(ec.SECP256R1())))
    reasons = set()
    for keyid in (signing.fingerprint(public), "", "someone-else"):  # the team's, none, another's
        data["signatures"][0]["keyid"] = keyid
        reason = statements.check(json.dumps(data).encode(), public, DIGEST).reason
        assert reason.startswith(f"not signed by the trusted key (keyid {signing.fingerprint(public)[:16]})"), reason
        reasons.add(reason)
    assert len(reasons) == 1  # the keyid written changes nothing said


def test_check_names_why_an_envelope_does_not_verify(pair):
    key, public = pair
    body = statements.statement("reg.example/team/img", DIGEST, statements.VALIDATION_V1, {"verdict": "passed"})
    envelope = statements.sign(body, key)
    assert statements.check(envelope, public, DIGEST).ok

    assert "a statement about another image" in statements.check(envelope, public, OTHER).reason
    stranger = ec.generate_private_key(ec.SECP256R1())
    assert "signed by another key" in statements.check(statements.sign(body, stranger), public, DIGEST).reason
    data = json.loads(envelope)
    data["payload"] = base64.b64encode(json.dumps(dict(body, predicate={"verdict": "passed", "x": 1})).encode()).decode()
    edited = statements.check(json.dumps(data).encode(), public, DIGEST)
    assert not edited.ok and "changed after signing" in edited.reason and edited.statement is None
    data = json.loads(envelope)
    data["signatures"][0]["keyid"] = ""
    data["payload"] = base64.b64encode(b"{}").decode()
    assert "not signed by the trusted key" in statements.check(json.dumps(data).encode(), public, DIGEST).reason
    assert "not a DSSE envelope" in statements.check(b"[]", public, DIGEST).reason
    assert "payload type" in statements.check(json.dumps(dict(json.loads(envelope), payloadType="text/plain")).encode(),
                                               public, DIGEST).reason


# --- the statements a pushed image gets, against the schemas ---------------------------------


def schema_validator():
    import jsonschema
    from referencing import Registry, Resource

    schemas = {p.name: json.loads(p.read_text()) for p in SCHEMAS.glob("*.schema.json")}
    registry = Registry().with_resources((name, Resource.from_contents(s)) for name, s in schemas.items())

    def validate(instance, name):
        jsonschema.Draft202012Validator(schemas[name], registry=registry).validate(instance)
    return validate


def smoke_report(device=CPU, skipped=(), **extra):
    return {"schema": 1, "passed": True, "exit_code": 0, "device": device, "python": "3.11.2",
            "started": "2026-12-01T10:00:00.123456+00:00", "content_hash": "0123456789abcdef", "lock": "ok",
            "host": {"driver": "24.1.rc3" if device == NPU else None, "firmware": "7.5.0.1.129" if device == NPU else None},
            "tiers": [{"name": t, "status": "skipped" if t in skipped else "passed",
                       "summary": "skipped: 1 NPU visible, hccl all-reduce needs >= 2" if t in skipped else f"{t} ok",
                       "details": {"device_name": "Ascend910B3", "device_count": 1} if t == "device" and device == NPU else {}}
                      for t in tier_names()],
            "base_image": {"ref": "local/debian:12", "id": "sha256:" + "11" * 32, "digests": []}, **extra}


MISSION_CELL = "cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-aarch64"  # its installers' sha256 are known


@pytest.fixture
def job():
    cell = next(c for c in matrix.load(ROOT / "matrix").cells if c.id == MISSION_CELL)
    # its lock's conda part is incomplete here (no conda channel answers): allowed, as a build here must
    return prepare(cell, NPU, Options(locks_dir=ROOT / "dockerfiles", allow_incomplete_lock=True))


def test_the_statements_validate_against_the_in_toto_and_slsa_schemas(job, pair):
    import jsonschema

    validate = schema_validator()
    key, public = pair
    proof = attest.evidence(job)
    report = smoke_report(NPU, skipped=("collective",))
    made = attest.statements_for(report, tier_names(), MISSION_CELL, NPU, "0123456789abcdef", proof)
    assert [kind for kind, _ in made] == [statements.VALIDATION_V1, statements.SLSA_PROVENANCE_V1]
    bodies = [statements.statement("127.0.0.1:5000/team/img", DIGEST, kind, predicate) for kind, predicate in made]
    for body in bodies:
        validate(body, "in-toto-statement-v1.schema.json")
        checked = statements.check(statements.sign(body, key), public, DIGEST)
        assert checked.ok and checked.statement == body
    validate(bodies[1], "slsa-provenance-v1.schema.json")
    with pytest.raises(jsonschema.ValidationError):  # the schema can fail: version must be a map
        broken = json.loads(json.dumps(bodies[1]))
        broken["predicate"]["runDetails"]["builder"]["version"] = "0.1.0"
        validate(broken, "slsa-provenance-v1.schema.json")

    validation = bodies[0]["predicate"]
    assert validation["passedTiers"] == [t for t in tier_names() if t != "collective"]
    assert validation["skippedTiers"] == [{"name": "collective", "reason": "skipped: 1 NPU visible, hccl all-reduce needs >= 2"}]
    assert validation["ranOn"]["kind"] == "npu-host"
    assert validation["ranOn"]["npuHost"] == {"driver": "24.1.rc3", "firmware": "7.5.0.1.129", "chip": "Ascend910B3", "npus": 1}

    provenance = bodies[1]["predicate"]
    external = provenance["buildDefinition"]["externalParameters"]
    assert external["cell"] == MISSION_CELL and external["matrix"].endswith("matrix/default.yaml")
    deps = {d["name"]: d for d in provenance["buildDefinition"]["resolvedDependencies"]}
    lock_bytes = (ROOT / "dockerfiles" / MISSION_CELL / "requirements.lock").read_bytes()
    import hashlib
    assert deps["requirements.lock"]["digest"]["sha256"] == hashlib.sha256(lock_bytes).hexdigest()
    assert deps["base-image"]["digest"] == {"sha256": "11" * 32}                 # local base: its image ID, said so
    assert "image ID" in deps["base-image"]["annotations"]["digestOf"]
    installers = [i for i in job.image.installers if i.sha256]
    assert installers and all(deps[i.filename]["digest"]["sha256"] == i.sha256 for i in installers)
    assert provenance["runDetails"]["builder"]["version"]["ascend-build"]



def test_the_provenance_reads_with_in_toto_attestations_own_bindings_times_in_utc_and_uris_real(pair):
    """in-toto-attestation (the framework's Python bindings) parses the statement and the SLSA predicate
    strictly; startedOn is RFC 3339 UTC with Z (in-toto's timestamp rule), whatever offset the smoke
    report had; each resolved dependency's uri is a URI with a scheme: the base image a docker purl
    (packageurl-python reads it back), the matrix a file: URI."""
    import urllib.parse

    import google.protobuf.json_format as pb_json
    from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
    from in_toto_attestation.v1.statement import Statement
    from packageurl import PackageURL

    job = prepare(next(c for c in matrix.load(ROOT / "matrix").cells if c.id == MISSION_CELL), NPU,
                  Options(locks_dir=ROOT / "dockerfiles", allow_incomplete_lock=True))
    report = smoke_report(NPU, started="2026-12-01T11:00:00.5+01:00")
    (_, predicate) = attest.statements_for(report, tier_names(), MISSION_CELL, NPU, "h", attest.evidence(job))[1]
    body = statements.statement("127.0.0.1:5000/team/img", DIGEST, statements.SLSA_PROVENANCE_V1, predicate)
    from in_toto_attestation.v1 import statement_pb2

    Statement.copy_from_pb(pb_json.ParseDict(body, statement_pb2.Statement())).validate()
    parsed = pb_json.ParseDict(predicate, provenance_pb2.Provenance())
    assert predicate["runDetails"]["metadata"]["startedOn"] == "2026-12-01T10:00:00.500000Z"
    assert parsed.run_details.metadata.started_on.ToJsonString() == "2026-12-01T10:00:00.500Z"
    for dependency in parsed.build_definition.resolved_dependencies:
        ResourceDescriptor.copy_from_pb(dependency).validate()
        if dependency.uri:
            assert urllib.parse.urlsplit(dependency.uri).scheme, dependency.uri
    deps = {d["name"]: d for d in predicate["buildDefinition"]["resolvedDependencies"]}
    base = PackageURL.from_string(deps["base-image"]["uri"])
    assert (base.type, base.namespace, base.name, base.version) == ("docker", "local", "debian", "12")
    commit, state = attest.evidence(job).matrix_git
    if state == "committed":  # this checkout holds the matrix as it is: the commit names it
        assert deps["matrix"]["uri"].startswith("git+") and deps["matrix"]["uri"].endswith(
            f"@{commit}#matrix/default.yaml")
    else:
        assert deps["matrix"]["uri"] == (ROOT / "matrix" / "default.yaml").as_uri()


@pytest.mark.parametrize("report, kind", [
    (smoke_report(CPU), "cpu-twin"),
    (smoke_report(CPU, stand_in="debian11 stands in for ubuntu22.04"), "stand-in"),
    (smoke_report(CPU, emulated="qemu-user: aarch64 on an x86_64 host"), "emulated"),
])
def test_the_validation_statement_says_where_it_ran(report, kind):
    predicate = attest.validation_predicate(report, tier_names(), CELL_ID, CPU, "h")
    assert predicate["ranOn"]["kind"] == kind and predicate["ranOn"]["npuHost"] is None


# --- cosign's layout ------------------------------------------------------------------------


def test_the_att_config_is_cosigns_shape():
    """go-containerregistry's empty image grown by mutate.Append, as `cosign attest` writes it."""
    config = json.loads(attached._config(None, ["sha256:" + "aa" * 32]))
    assert config == {"architecture": "", "created": "0001-01-01T00:00:00Z",
                      "history": [{"created": "0001-01-01T00:00:00Z"}], "os": "",
                      "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "aa" * 32]}, "config": {}}
    grown = json.loads(attached._config(config, ["sha256:" + "bb" * 32]))
    assert grown["rootfs"]["diff_ids"] == ["sha256:" + "aa" * 32, "sha256:" + "bb" * 32] and len(grown["history"]) == 2
    assert attached.attestation_tag(DIGEST) == "sha256-" + "ab" * 32 + ".att"


# --- the provenance says whether the commit it names holds the matrix file (issue 32) -----------


def _git(folder, *args):
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"})


def _matrix_dependency(job, path: Path) -> dict:
    """The matrix's resolved dependency in the provenance of ``job`` built from the matrix at ``path``,
    checked with in-toto-attestation's ResourceDescriptor; its uri a URI with a scheme."""
    import urllib.parse

    import google.protobuf.json_format as pb_json
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
    from in_toto_attestation.v1 import resource_descriptor_pb2

    from builder.images import oci

    proof = dataclasses.replace(attest.evidence(job), matrix_file=str(path), matrix_git=oci.file_in_git(path),
                                matrix_repository=oci.repository_of(path))
    provenance = attest.provenance_predicate(proof, smoke_report(NPU))
    (found,) = [d for d in provenance["buildDefinition"]["resolvedDependencies"] if d["name"] == "matrix"]
    ResourceDescriptor.copy_from_pb(pb_json.ParseDict(found, resource_descriptor_pb2.ResourceDescriptor())).validate()
    assert urllib.parse.urlsplit(found["uri"]).scheme in ("git+file", "git+https", "file"), found["uri"]
    return found


def test_the_provenance_says_whether_the_matrix_file_is_in_the_commit_it_names(tmp_path, job):
    from builder.images import oci

    repo = tmp_path / "team"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "matrix.yaml").write_text("cells: []\n")
    (repo / "other.yaml").write_text("x\n")
    _git(repo, "add", "other.yaml")
    _git(repo, "commit", "-qm", "first")
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert oci.file_in_git(repo / "matrix.yaml") == (commit, "untracked")
    _git(repo, "add", "matrix.yaml")
    assert oci.file_in_git(repo / "matrix.yaml") == (commit, "added")
    _git(repo, "commit", "-qm", "matrix")
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert oci.file_in_git(repo / "matrix.yaml") == (commit, "committed")
    assert oci.repository_of(repo / "matrix.yaml") == (repo.resolve().as_uri(), "matrix.yaml")  # no remote
    committed = _matrix_dependency(job, repo / "matrix.yaml")
    assert committed["uri"] == f"git+{repo.resolve().as_uri()}@{commit}#matrix.yaml"
    _git(repo, "remote", "add", "origin", "https://someone:secret@git.example.invalid/team/repo.git")
    committed = _matrix_dependency(job, repo / "matrix.yaml")
    assert committed["uri"] == f"git+https://git.example.invalid/team/repo@{commit}#matrix.yaml"  # no credentials
    (repo / "matrix.yaml").write_text("cells: [] # changed\n")
    assert oci.file_in_git(repo / "matrix.yaml") == (commit, "modified")
    assert oci.file_in_git(tmp_path / "loose.yaml") == ("", "outside-git")
    assert oci.repository_of(tmp_path / "loose.yaml") == ("", "")
    assert _matrix_dependency(job, repo / "matrix.yaml")["uri"] == (repo / "matrix.yaml").resolve().as_uri()

    proof = dataclasses.replace(attest.evidence(job), matrix_file=str(repo / "matrix.yaml"),
                                matrix_git=oci.file_in_git(repo / "matrix.yaml"))
    provenance = attest.provenance_predicate(proof, smoke_report(NPU))
    deps = {d["name"]: d for d in provenance["buildDefinition"]["resolvedDependencies"]}
    assert deps["matrix"]["annotations"] == {"git": "modified", "gitCommit": commit, "inCommit": False}
    schema_validator()(statements.statement("127.0.0.1:5000/team/img", DIGEST, statements.SLSA_PROVENANCE_V1, provenance),
                       "slsa-provenance-v1.schema.json")


def test_the_shipped_matrix_evidence_carries_its_git_state(job):
    from builder.images import oci

    if not oci.git_head(ROOT)[0]:
        pytest.skip("this copy of the project is no git checkout")
    commit, state = attest.evidence(job).matrix_git
    assert state in ("committed", "modified") and len(commit) == 40  # this checkout tracks matrix/default.yaml
