"""Signed statements on a real registry: attach after a push, `verify` from the command line, forgeries.

Against Debian's docker-registry on loopback (htpasswd auth, `registry` fixture) with tiny
images built through the real engine (FROM local/debian:12 with the labels the pipeline
writes for a sealed twin) and real P-256 signatures:

- round trip: push, then the pipeline's attest step (`image_run.attest_pushed`) attaches the
  validation statement and SLSA provenance in cosign's layout; `ascend-build verify` accepts it;
- forgeries, each refused by `verify` with its reason: an image with the same labels pushed
  under the same tag without a statement; the statements copied from the real image's .att to
  the forgery's; an edited predicate (signature kept); statements signed by another key;
- appending keeps what is there (a second key's statements beside the first's);
- `pull` leaves cosign's .att tags out of its candidates.

cosign itself cannot be installed here, so the layout is checked field by field against what
cosign's source writes (see builder/trust/attached.py for the file behind each spelling).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import List

import pytest

from tests.support import trust as ht
from builder.trust import attached, signing, statements
from builder.images import attest, image_run
from builder.images.prepare import Options
from builder.node.pull import listing
from builder.registry import OCI_MANIFEST, Registry
from builder.vocabulary import CPU, Label, tier_names
from tests.support.trust import CELL_ID, CLI, ROOT, TAG, report

REPO = f"ascend-build-test/trust-{uuid.uuid4().hex[:8]}"


def push(engine, registry, image: str, tag: str = TAG) -> str:
    return ht.push(engine, registry, image, REPO, tag)


def verify(ref: str, pub: Path, creds: dict, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "verify", ref, "--key", str(pub), *extra], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **creds})


@pytest.fixture(scope="module")
def attested(engine, registry, creds, keys, images):
    """The genuine image: pushed, then attested by the pipeline's own step; (ref, digest, seconds)."""
    digest = push(engine, registry, images("genuine"))
    ref = f"{registry.host}/{REPO}:{TAG}"
    options = Options(push=registry.host, sign_key=signing.load_private(keys["team"][0]))
    out = image_run.Outcome(CELL_ID, CPU, status="passed", digests={ref: digest})
    said: List[str] = []
    start = time.monotonic()
    out = image_run.attest_pushed(image_run.ImageRun(CELL_ID + "-cpu", f"{REPO}:{TAG}", out, options, engine, said.append,
                                                     content_hash="0123456789abcdef", tiers=tier_names(), report=report()))
    seconds = time.monotonic() - start
    assert out.status == "passed", out.message
    assert list(out.attested) == [ref] and "attested" in said[0]
    return ref, digest, seconds


@pytest.mark.engine
def test_round_trip_attach_then_verify(attested, keys, creds, registry):
    ref, digest, attach_seconds = attested
    start = time.monotonic()
    done = verify(ref, keys["team"][1], creds)
    verify_seconds = time.monotonic() - start
    print(f"\nattach {attach_seconds:.3f} s, verify (CLI, a process) {verify_seconds:.3f} s\n{done.stdout}{done.stderr}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"digest {digest}" in done.stdout
    assert "OK   https://ascend-build.io/attestations/validation/v1" in done.stdout
    assert "tiers: versions passed, libraries passed, import passed, device passed, train passed, collective passed" \
        in done.stdout
    assert "verified: a validation statement about this digest, signed by this key, says passed" in done.stdout
    by_digest = verify(f"{registry.host}/{REPO}@{digest}", keys["team"][1], creds, "--json")
    result = json.loads(by_digest.stdout)
    assert by_digest.returncode == 0 and result["validated"] and result["digest"] == digest
    assert [s["predicateType"] for s in result["statements"]] == [statements.VALIDATION_V1]
    assert attach_seconds < 5 and verify_seconds < 10  # measured well under 1 s and ~1 s here; bounds for busy CI


@pytest.mark.engine
def test_the_att_tag_is_cosigns_layout_with_the_oci_subject(attested, creds, registry):
    _, digest, _ = attested
    reg = Registry(registry.host)
    image = reg.manifest(REPO, digest)
    att = reg.manifest(REPO, "sha256-" + digest.split(":")[1] + ".att")
    assert att.media_type == OCI_MANIFEST and att.data["schemaVersion"] == 2
    assert att.data["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert att.data["subject"] == {"mediaType": image.media_type, "size": len(image.body), "digest": digest}
    (layer,) = att.data["layers"]
    assert layer["mediaType"] == "application/vnd.dsse.envelope.v1+json"
    assert layer["annotations"] == {"dev.cosignproject.cosign/signature": "", "predicateType": statements.VALIDATION_V1}
    config = json.loads(reg.blob(REPO, att.data["config"]["digest"]))
    assert config["rootfs"] == {"type": "layers", "diff_ids": [layer["digest"]]} and config["os"] == ""
    envelope = json.loads(reg.blob(REPO, layer["digest"]))
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    body = json.loads(base64.b64decode(envelope["payload"]))
    assert body["subject"] == [{"name": f"{registry.host}/{REPO}", "digest": {"sha256": digest.split(":")[1]}}]


@pytest.mark.engine
def test_appending_keeps_the_statements_there(attested, keys, creds, registry, engine, images):
    """A second key (rotation) adds its statements beside the first key's; both verify."""
    digest = push(engine, registry, images("rotated"), tag="rotation")
    ref = f"{registry.host}/{REPO}:rotation"
    predicates = attest.statements_for(report(), tier_names(), CELL_ID, CPU, "0123456789abcdef", None)
    attest.attest(ref, digest, predicates, signing.load_private(keys["team"][0]))
    attest.attest(ref, digest, predicates, signing.load_private(keys["team"][0]))  # the same again: not duplicated
    attest.attest(ref, digest, predicates, signing.load_private(keys["team-2027"][0]))
    att = Registry(registry.host).manifest(REPO, attached.attestation_tag(digest))
    assert len(att.data["layers"]) == 2
    for name in ("team", "team-2027"):
        done = verify(ref, keys[name][1], creds, "--json")
        result = json.loads(done.stdout)
        assert done.returncode == 0 and [s["verified"] for s in result["statements"]].count(True) == 1, done.stdout


@pytest.mark.engine
def test_forgeries_are_refused_by_verify_naming_why(attested, keys, creds, registry, engine, images):
    genuine_ref, genuine, _ = attested
    reg = Registry(registry.host)
    pub = keys["team"][1]
    shown = []

    def refused(marker: str) -> str:
        result = verify(genuine_ref, pub, creds)
        shown.append(f"--- {marker}\n$ ascend-build verify {genuine_ref} --key team.pub\n{result.stdout}{result.stderr}")
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        return result.stdout + result.stderr

    # 1. same labels, same tag, no statement
    forged = ht.forge("unsigned", engine, registry, images, REPO, genuine, keys)
    info = reg.inspect(REPO, TAG, "x86_64")
    assert info and info.labels[Label.VALIDATED] == "true"  # the labels alone would pass
    out = refused("same labels, same tag, no statement")
    assert f"digest {forged}" in out and "no statement is attached" in out and attached.attestation_tag(forged) in out

    # 2. the genuine image's statements copied to the forgery
    forged = ht.forge("copied", engine, registry, images, REPO, genuine, keys)
    out = refused("statements copied from another digest")
    assert f"its subject is {genuine}, not this image ({forged}): a statement about another image" in out

    # 3. an edited predicate (the forger names its own digest and claims an NPU host; signature kept)
    ht.forge("edited", engine, registry, images, REPO, genuine, keys)
    out = refused("edited predicate, signature kept")
    assert "changed after signing" in out

    # 4. statements made properly, but signed by another key
    ht.forge("stranger", engine, registry, images, REPO, genuine, keys)
    out = refused("signed by another key")
    assert "signed by another key" in out
    # ... which verifies with the stranger's own key: the key is what is trusted, not the layout
    assert verify(genuine_ref, keys["stranger"][1], creds).returncode == 0

    # the genuine image, by digest, still verifies
    assert verify(f"{registry.host}/{REPO}@{genuine}", pub, creds).returncode == 0
    print("\n" + "\n".join(shown))


@pytest.mark.engine
def test_pull_leaves_the_att_tags_out(attested, creds, registry):
    tags = Registry(registry.host).tags(REPO)
    assert any(attached.is_attached_tag(t) for t in tags)
    assert not any(attached.is_attached_tag(i.tag) for i in listing(Registry(registry.host), REPO, "x86_64"))


def test_a_failed_attach_fails_the_outcome_and_says_what_is_published(tmp_path, monkeypatch):
    """Push and attach are one: a registry that cannot take the statements fails the image."""
    monkeypatch.delenv(signing.PASSPHRASE_ENV, raising=False)
    key = signing.load_private(signing.generate(tmp_path, "team")[0])
    ref, digest = f"127.0.0.1:9/{REPO}:{TAG}", "sha256:" + "ab" * 32  # nothing listens on port 9
    out = image_run.Outcome(CELL_ID, CPU, status="passed", digests={ref: digest})
    run = image_run.ImageRun(CELL_ID + "-cpu", f"{REPO}:{TAG}", out, Options(push="127.0.0.1:9", sign_key=key),
                             None, print, content_hash="h", tiers=tier_names(), report=report())  # type: ignore[arg-type]  # attaching asks no engine
    out = image_run.attest_pushed(run)
    assert out.status == "error" and not out.ok
    assert out.message.startswith(f"{ref} ({digest}) is published WITHOUT its signed statements")
    assert "`ascend-build verify` refuses it" in out.message


# --- the whole path: `image --push --sign-key`, then `verify` ----------------------------------

WHEELHOUSE = Path("/opt/wheels")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
TWIN_CELL = {"cann": "9.1.0", "chip": "910b", "arch": "x86_64", "os": "debian12", "env": "venv",
             "python": '"3.11"', "torch_npu": "2.13.0"}  # the shipped Debian 12 cell (matrix/default.yaml)
needs_twin = pytest.mark.skipif(
    os.uname().machine != "x86_64" or not any(WHEELHOUSE.glob("torch-2.13.0*cp311*x86_64.whl")),
    reason="needs an x86_64 host and the torch 2.13.0 cp311 wheel in /opt/wheels")


@pytest.mark.engine
@needs_twin
def test_image_push_sign_key_attests_the_twin_and_verify_accepts_it(registry, creds, keys, base_image, engine,
                                                                   tmp_path):
    repo = f"ascend-build-test/trust-twin-{uuid.uuid4().hex[:8]}"
    matrix_file = tmp_path / "matrix.yaml"
    matrix_file.write_text(f"image: {repo}\ncells:\n" + "".join(
        f"{'  - ' if i == 0 else '    '}{k}: {v}\n" for i, (k, v) in enumerate(TWIN_CELL.items())))
    args = ["image", "--matrix", str(matrix_file), "--out", str(ROOT / "dockerfiles"), "--cell", CELL_ID,
            "--base-image", base_image,
            "--wheelhouse", str(WHEELHOUSE), "--state-dir", str(tmp_path / "state"), "--json", "--quiet",
            "--push", registry.host, "--sign-key", str(keys["team"][0])]
    if CA_BUNDLE.is_file():
        args += ["--ca-bundle", str(CA_BUNDLE)]
    env = {**os.environ, **creds}
    env.pop(signing.PASSPHRASE_ENV, None)
    done = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=1800, env=env, cwd=ROOT)
    outcomes = json.loads(done.stdout) if done.stdout.strip().startswith("[") else pytest.fail(done.stderr[-3000:])
    (out,) = [o for o in outcomes if o["cell"] == CELL_ID]  # the matrix declares x86_64 only: its index follows
    pushed = f"{registry.host}/{repo}:{TAG}"
    try:
        assert done.returncode == 0 and out["status"] == "passed", out["message"] + done.stderr[-2000:]
        assert list(out["attested"]) == [pushed] and f"attested {pushed}@{out['digests'][pushed]}" in done.stderr
        checked = verify(pushed, keys["team"][1], creds, "--json")
        result = json.loads(checked.stdout)
        assert checked.returncode == 0 and result["validated"], checked.stdout + checked.stderr
        by_type = {s["predicateType"]: s for s in result["statements"]}
        assert set(by_type) == {statements.VALIDATION_V1, statements.SLSA_PROVENANCE_V1, statements.CYCLONEDX_BOM}
        bom = by_type[statements.CYCLONEDX_BOM]["predicate"]  # the SBOM, signed: the lock's distributions
        names = {c["name"] for c in bom["components"]}
        assert names >= {"torch", "numpy"} and "torch-npu" not in names
        # each distribution with the one file the image recorded installing (builder/images/installed.py)
        files = {c["name"]: ([h["content"] for h in c["hashes"]], {p["name"]: p["value"] for p in c["properties"]})
                 for c in bom["components"] if c["type"] == "library"}
        assert all(len(shas) == 1 and props["ascend-build:installed-file"].endswith(".whl")
                   for shas, props in files.values()), files
        assert json.loads(Path(out["sbom"]).read_text()) == bom  # the very SBOM kept beside the report
        assert all(s["verified"] for s in result["statements"])
        validation = by_type[statements.VALIDATION_V1]["predicate"]
        assert validation["cell"] == CELL_ID and validation["ranOn"]["kind"] == "cpu-twin"
        assert [t["name"] for t in validation["tiers"]] == list(tier_names())
        info = Registry(registry.host).inspect(repo, TAG, "x86_64")
        assert info
        labels = info.labels
        assert labels[Label.VALIDATED_TIERS] == ",".join(validation["passedTiers"])  # label and statement agree
        provenance = by_type[statements.SLSA_PROVENANCE_V1]["predicate"]
        assert provenance["buildDefinition"]["externalParameters"]["matrix"] == str(matrix_file)
        deps = {d["name"]: d for d in provenance["buildDefinition"]["resolvedDependencies"]}
        import hashlib
        assert deps["matrix"]["digest"]["sha256"] == hashlib.sha256(matrix_file.read_bytes()).hexdigest()
        lock = ROOT / "dockerfiles" / CELL_ID / "requirements.lock"
        assert deps["requirements.lock"]["digest"]["sha256"] == hashlib.sha256(lock.read_bytes()).hexdigest()
        shown = verify(pushed, keys["team"][1], creds).stdout
        assert f"SBOM (CycloneDX 1.5): {len(bom['components'])} components, {len(bom['components'])} Python " \
               "distributions of the lock, 0 CANN packages" in shown
        print("\n" + shown)
    finally:
        for ref in [f"{repo}:{TAG}", pushed]:
            engine.untag(ref)
        if out.get("image_id"):
            engine.remove_if_unnamed(out["image_id"])
