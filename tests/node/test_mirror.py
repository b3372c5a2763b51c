"""`ascend-build mirror`, end to end against real docker-registry processes on loopback.

The source is the session's htpasswd registry; destinations are registries of this module's own
(no auth; one read-only), an OCI image layout on disk, and another repository of the source.
The images are real (tests/support/mirror.py pushes them through the registry API: a gzip tar
layer, a config with a sealed twin's labels) and their statements are signed with real keys
(tests/support/trust.py). What is checked:

- registry -> registry: `verify` and the choice `pull --trust-key` makes pass on the destination
  as on the source; an index comes with both arches and their statements;
- registry -> layout -> registry: the same, and the layout is the OCI image-layout spec's;
- Docker-typed images in a layout: skopeo finds each tag, and copies an image with its statements
  out of it into a registry, where `verify` and pull's choice pass;
- a run again of the unchanged selection moves 0 blob bytes; into another repository of the same
  registry, blobs are mounted, not sent;
- a statement dropped or altered on the way is refused on the destination and no tag is put;
- a source image whose statement does not verify is refused before any byte is copied;
- a read-only destination and a full layout disk: a clear error naming the image, no tag, no traceback;
- an interrupted copy: a run again completes, sending only what was missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from builder.errors import UserError
from builder.node import mirror, pull as chooser
from builder.node.oci_layout import INDEX_FILE, LAYOUT_FILE, REF_NAME, Layout
from builder.registry import DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, Registry
from builder.trust import attached, signing
from builder.trust import policy
from tests.support import mirror as hm
from tests.support import trust as ht
from tests.support.trust import CELL_ID, CLI, TAG  # the fixtures (creds, keys) come from the plugin tests/conftest.py names

REPO = f"ascend-build-test/mirror-{uuid.uuid4().hex[:8]}"
FAMILY = CELL_ID[: -len("-x86_64")]
ARM_CELL = FAMILY + "-aarch64"
ARM_TAG = ARM_CELL + "-cpu"
INDEX_TAG = FAMILY + "-cpu"
BAD_TAG = CELL_ID + "-cpu-stranger"


def cli(env, *args) -> subprocess.CompletedProcess:
    done = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture(scope="module")
def source(registry, creds, keys):
    """REPO on the session registry: the x86_64 and aarch64 twins under their arch tags and an
    index of both, each arch signed with the team's key; {"x86_64": digest, "aarch64": digest, "index": digest}."""
    reg = Registry(registry.host)
    x86 = hm.push_image(reg, REPO, TAG, ht.sealed_twin_labels(), b"x86 payload " * 4000)
    arm = hm.push_image(reg, REPO, ARM_TAG, ht.sealed_twin_labels("aarch64"), b"arm payload " * 4000, arch="aarch64")
    ht.attest_as(registry, REPO, TAG, x86, keys["team"][0])
    ht.attest_as(registry, REPO, ARM_TAG, arm, keys["team"][0], ARM_CELL)
    index = hm.push_index(reg, REPO, INDEX_TAG, {"x86_64": x86, "aarch64": arm})
    return {"x86_64": x86, "aarch64": arm, "index": index}


@pytest.fixture(scope="module")
def far(tmp_path_factory):
    """A second registry (no auth) on loopback: the mirror."""
    served = hm.serve(tmp_path_factory.mktemp("far"))
    yield served
    served.stop()


def run_mirror(creds, src: str, dst: str, *extra) -> subprocess.CompletedProcess:
    return cli(creds, "mirror", src, dst, *extra)


def figures(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def chosen(host: str, repo: str, key) -> str:
    """The digest `pull --trust-key --variant cpu` chooses there for an x86_64 node without NPUs."""
    node = chooser.Node(arch="x86_64", chip=None, driver=None, firmware=None)
    best, rejected = chooser.pick(Registry(host), repo, node, chooser.Wanted(cann="9.1.0", variant="cpu"), key)
    assert best is not None, rejected
    return best.digest


def test_registry_to_registry_round_trip_verifies_on_the_mirror_and_a_rerun_moves_no_blob_byte(
        registry, creds, keys, source, far):
    key_file = str(keys["team"][1])
    first = figures(run_mirror(creds, f"{registry.host}/{REPO}", f"{far.host}/{REPO}", "--trust-key", key_file, "--json"))
    print(f"\nfirst copy: {first['blobs_sent']} blobs, {first['bytes_sent']} bytes; tags {first['tags']}")
    assert sorted(first["tags"]) == sorted([TAG, ARM_TAG, INDEX_TAG]) and first["verified"] is True
    assert first["bytes_sent"] > 2 * 4000 * 11 // 20 and first["blobs_sent"] >= 4  # two configs, two layers, envelopes
    dst = Registry(far.host)
    assert dst.manifest(REPO, INDEX_TAG).digest == source["index"]
    for arch in ("x86_64", "aarch64"):  # both arches of the index, each with its .att manifest
        assert dst.manifest(REPO, attached.attestation_tag(source[arch])).digest == \
            Registry(registry.host).manifest(REPO, attached.attestation_tag(source[arch])).digest
    # `verify` on the mirror, through the CLI, as on the source
    for host in (registry.host, far.host):
        done = cli(creds, "verify", f"{host}/{REPO}:{TAG}", "--key", key_file)
        assert done.returncode == 0 and "verified: a validation statement about this digest" in done.stdout, done.stderr
    # the choice pull --trust-key makes is the same on both
    key = signing.load_public(Path(key_file))
    assert chosen(far.host, REPO, key) == chosen(registry.host, REPO, key) == source["x86_64"]
    # a run again of the same selection: no blob byte moves, no tag is put again
    again = figures(run_mirror(creds, f"{registry.host}/{REPO}", f"{far.host}/{REPO}", "--trust-key", key_file, "--json"))
    print(f"re-run: {again['blobs_sent']} blobs, {again['bytes_sent']} bytes sent; {again['blobs_there']} there")
    assert (again["bytes_sent"], again["blobs_sent"], again["tags_put"], again["manifests_put"]) == (0, 0, [], 0)
    assert again["blobs_there"] == first["blobs_sent"] + first["blobs_there"]
    text = run_mirror(creds, f"{registry.host}/{REPO}", f"{far.host}/{REPO}", "--trust-key", key_file)
    assert "blobs: 0 copied (0 bytes)" in text.stdout and "statements verified at the source and on the destination" \
        in text.stdout
    unchecked = run_mirror(creds, f"{registry.host}/{REPO}", f"{far.host}/{REPO}")
    assert "no --trust-key: the 2 statement manifest(s) were not checked" in unchecked.stdout, unchecked.stdout


def test_registry_to_layout_to_registry_round_trip(registry, creds, keys, source, far, tmp_path):
    key_file = str(keys["team"][1])
    folder = tmp_path / "carry"
    out = figures(run_mirror(creds, f"{registry.host}/{REPO}", f"oci:{folder}", "--trust-key", key_file,
                             "--cell", CELL_ID, "--json"))
    assert out["tags"] == [INDEX_TAG, TAG] and out["bytes_sent"] > 0  # --cell: the x86_64 tag, the index with it...
    out = figures(run_mirror(creds, f"{registry.host}/{REPO}", f"oci:{folder}", "--trust-key", key_file, "--json"))
    assert sorted(out["tags"]) == sorted([TAG, ARM_TAG, INDEX_TAG])  # ... then the arm64 tag too, the rest skipped
    assert out["blobs_there"] >= 2
    # the OCI image-layout spec's folder
    assert json.loads((folder / LAYOUT_FILE).read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((folder / INDEX_FILE).read_text())
    names = {m["annotations"][REF_NAME]: m["digest"] for m in index["manifests"]}
    assert names[INDEX_TAG] == source["index"] and names[TAG] == source["x86_64"]
    assert names[attached.attestation_tag(source["x86_64"])]  # the statements travel with the images
    assert (folder / "blobs" / "sha256" / source["x86_64"].split(":")[1]).is_file()
    key = signing.load_public(Path(key_file))
    layout = Layout(folder)
    assert policy.decide(layout, "", source["x86_64"], ht.sealed_twin_labels(), key).why_not == ""
    # ... and from the layout into a registry
    back = REPO + "-from-layout"
    done = figures(run_mirror(creds, f"oci:{folder}", f"{far.host}/{back}", "--trust-key", key_file, "--json"))
    assert sorted(done["tags"]) == sorted([TAG, ARM_TAG, INDEX_TAG])
    assert chosen(far.host, back, key) == source["x86_64"]
    verified = cli(creds, "verify", f"{far.host}/{back}:{ARM_TAG}", "--key", key_file)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    again = figures(run_mirror(creds, f"oci:{folder}", f"{far.host}/{back}", "--trust-key", key_file, "--json"))
    assert again["bytes_sent"] == 0 and again["tags_put"] == []


def skopeo_raw(host: str, reference: str) -> bytes:
    """A manifest on the (no-auth) mirror as skopeo reads it: an independent registry client."""
    if not shutil.which("skopeo"):
        pytest.skip("skopeo missing: apt-get install skopeo")
    done = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{host}/{reference}"],
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def skopeo(*args: str) -> subprocess.CompletedProcess:
    if not shutil.which("skopeo"):
        pytest.skip("skopeo missing: apt-get install skopeo")
    return subprocess.run(["skopeo", *args], capture_output=True, text=True, timeout=120)


def test_skopeo_reads_a_mirrored_folder_of_docker_images_and_what_it_copies_out_verifies(
        registry, creds, keys, far, tmp_path):
    """What `docker push` and `ascend-build index` write (Docker schema 2 images under a Docker
    manifest list), mirrored into an OCI image layout: skopeo, an independent reader of layouts, finds
    every tag, and copies an image and its statements out of the folder into a registry byte for
    byte, so `verify` and pull's choice pass there."""
    reg = Registry(registry.host)
    repo = REPO + "-docker"
    x86 = hm.push_image(reg, repo, TAG, ht.sealed_twin_labels(), b"x86 docker payload " * 4000, docker=True)
    arm = hm.push_image(reg, repo, ARM_TAG, ht.sealed_twin_labels("aarch64"), b"arm docker payload " * 4000,
                        arch="aarch64", docker=True)
    ht.attest_as(registry, repo, TAG, x86, keys["team"][0])
    ht.attest_as(registry, repo, ARM_TAG, arm, keys["team"][0], ARM_CELL)
    hm.push_index(reg, repo, INDEX_TAG, {"x86_64": x86, "aarch64": arm}, docker=True)
    key_file = str(keys["team"][1])
    folder = tmp_path / "carry"
    figures(run_mirror(creds, f"{registry.host}/{repo}", f"oci:{folder}", "--trust-key", key_file, "--json"))
    entries = json.loads((folder / INDEX_FILE).read_text())["manifests"]
    assert {e["mediaType"] for e in entries} == {OCI_INDEX, OCI_MANIFEST}  # no entry a reader passes over
    for tag, arch, digest in ((TAG, "amd64", x86), (ARM_TAG, "arm64", arm), (INDEX_TAG, "amd64", x86)):
        seen = skopeo("--override-arch", arch, "inspect", f"oci:{folder}:{tag}")
        assert seen.returncode == 0, seen.stderr
        assert json.loads(seen.stdout)["Architecture"] == arch
        raw = skopeo("inspect", "--raw", f"oci:{folder}:{tag}").stdout
        assert digest in [m["digest"] for m in json.loads(raw)["manifests"]]  # the signed digest, inside
        assert json.loads(seen.stdout)["Digest"] == "sha256:" + hashlib.sha256(raw.encode()).hexdigest()  # the index's
    print(f"\nskopeo inspect oci:{folder.name}:<tag> found {TAG}, {ARM_TAG} and {INDEX_TAG}")
    # out of the folder with skopeo: the image, and its statements by their tag
    dst, statements = REPO + "-skopeo", attached.attestation_tag(x86)
    for tag in (TAG, statements):
        copied = skopeo("copy", "--dest-tls-verify=false", f"oci:{folder}:{tag}", f"docker://{far.host}/{dst}:{tag}")
        assert copied.returncode == 0, copied.stderr
    there = Registry(far.host)
    assert there.manifest(dst, TAG).digest == x86 and there.manifest(dst, TAG).media_type == DOCKER_MANIFEST
    assert there.manifest(dst, statements).digest == reg.manifest(repo, statements).digest
    verified = cli(creds, "verify", f"{far.host}/{dst}:{TAG}", "--key", key_file)
    assert verified.returncode == 0 and "verified: a validation statement about this digest" in verified.stdout, \
        verified.stdout + verified.stderr
    assert chosen(far.host, dst, signing.load_public(Path(key_file))) == x86
    # with --all skopeo copies the index itself: another digest than the list's, the images in it keep theirs
    copied = skopeo("copy", "--all", "--dest-tls-verify=false", f"oci:{folder}:{INDEX_TAG}",
                    f"docker://{far.host}/{dst}:{INDEX_TAG}")
    assert copied.returncode == 0, copied.stderr
    index = there.manifest(dst, INDEX_TAG)
    assert index.digest != reg.manifest(repo, INDEX_TAG).digest and index.media_type == OCI_INDEX
    assert [m["digest"] for m in index.data["manifests"]] == [x86, arm]
    # and `mirror` reads the folder back as it wrote it: the Docker manifests, by their digests
    back = REPO + "-docker-back"
    figures(run_mirror(creds, f"oci:{folder}", f"{far.host}/{back}", "--trust-key", key_file, "--json"))
    assert [there.manifest(back, t).digest for t in (TAG, ARM_TAG, INDEX_TAG)] == \
        [x86, arm, reg.manifest(repo, INDEX_TAG).digest]


def found_by_a_referrers_client(reader, repo: str, digest: str, key) -> dict:
    """{artifactType: [predicate types]} of ``digest``'s referrers at ``reader``, found as the OCI
    distribution spec tells a client without the referrers API: the fallback index under
    ``sha256-<hex>``; each bundle parsed with sigstore's models and its envelope verified with the key
    by securesystemslib (independent of `builder.trust`)."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey
    from sigstore_models.bundle.v1 import Bundle
    from cryptography.hazmat.primitives import serialization

    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    sslib = SSlibKey("", "ecdsa", "ecdsa-sha2-nistp256", {"public": pem})
    index = reader.manifest(repo, "sha256-" + digest.split(":")[1]).data
    found: dict = {}
    for entry in index["manifests"]:
        manifest = reader.manifest(repo, entry["digest"]).data
        assert manifest["subject"]["digest"] == digest
        kind = manifest.get("artifactType") or manifest["config"]["mediaType"]
        if kind == attached.BUNDLE_MEDIA_TYPE:
            text = reader.blob(repo, manifest["layers"][0]["digest"])
            assert Bundle.from_json(text).dsse_envelope is not None
            envelope = Envelope.from_dict(json.loads(text)["dsseEnvelope"])
            assert list(envelope.verify([sslib], 1)) == [""]
            found.setdefault(kind, []).append(json.loads(envelope.payload)["predicateType"])
        else:
            found.setdefault(kind, []).append(len(manifest["layers"]))
    return found


def test_the_referrers_come_along_so_a_referrers_client_finds_the_bundles_on_the_mirror(
        registry, creds, keys, source, far, tmp_path):
    key_file = str(keys["team"][1])
    key = signing.load_public(Path(key_file))
    src, repo = Registry(registry.host), REPO + "-referrers"
    dst = Registry(far.host)
    figures(run_mirror(creds, f"{registry.host}/{REPO}", f"{far.host}/{repo}", "--trust-key", key_file, "--json"))
    for arch in ("x86_64", "aarch64"):
        digest = source[arch]
        assert dst.referrers(repo, digest) is None  # docker-registry 2.8: no referrers API, the fallback is needed
        index = json.loads(skopeo_raw(far.host, f"{repo}:{attached.referrers_tag(digest)}"))
        print(f"\n{arch}: the mirror's referrers index lists {[m['artifactType'] for m in index['manifests']]}")
        assert index["manifests"] == src.manifest(REPO, attached.referrers_tag(digest)).data["manifests"]
        found = found_by_a_referrers_client(dst, repo, digest, key)
        assert found == found_by_a_referrers_client(src, REPO, digest, key)
        assert found[attached.BUNDLE_MEDIA_TYPE] == ["https://ascend-build.io/attestations/validation/v1"]
        assert found["application/vnd.oci.image.config.v1+json"] == [1]  # the .att manifest, one envelope
    # through an OCI image layout and back into a registry: the layout keeps the fallback index too
    folder = tmp_path / "carry"
    figures(run_mirror(creds, f"{registry.host}/{REPO}", f"oci:{folder}", "--trust-key", key_file, "--json"))
    layout = Layout(folder)
    assert found_by_a_referrers_client(layout, "", source["x86_64"], key)[attached.BUNDLE_MEDIA_TYPE]
    back = REPO + "-referrers-back"
    figures(run_mirror(creds, f"oci:{folder}", f"{far.host}/{back}", "--trust-key", key_file, "--json"))
    assert found_by_a_referrers_client(dst, back, source["aarch64"], key) == \
        found_by_a_referrers_client(src, REPO, source["aarch64"], key)
    again = figures(run_mirror(creds, f"oci:{folder}", f"{far.host}/{back}", "--trust-key", key_file, "--json"))
    assert again["manifests_put"] == 0  # the index lists them already: not put again


def test_within_one_registry_blobs_are_mounted_not_sent(registry, creds, keys, source):
    out = figures(run_mirror(creds, f"{registry.host}/{REPO}", f"{registry.host}/{REPO}-copy",
                             "--trust-key", str(keys["team"][1]), "--json"))
    print(f"\nmount: {out['blobs_mounted']} blobs ({out['bytes_mounted']} bytes) mounted, {out['bytes_sent']} sent")
    assert out["bytes_sent"] == 0 and out["blobs_mounted"] >= 4
    assert chosen(registry.host, REPO + "-copy", signing.load_public(keys["team"][1])) == source["x86_64"]


def test_a_source_statement_that_does_not_verify_is_refused_before_any_copy(registry, creds, keys, source, far):
    reg = Registry(registry.host)
    repo = REPO + "-stranger"
    labels = ht.sealed_twin_labels()
    digest = hm.push_image(reg, repo, TAG, labels, b"stranger payload")
    ht.attest_as(registry, repo, TAG, digest, keys["stranger"][0])
    done = run_mirror(creds, f"{registry.host}/{repo}", f"{far.host}/{repo}", "--trust-key", str(keys["team"][1]))
    assert done.returncode == 1
    assert f"{TAG} ({digest}): not signed by the trusted key" in done.stderr and "nothing was copied" in done.stderr
    config = reg.manifest(repo, TAG).data["config"]["digest"]
    assert not Registry(far.host).has_blob(repo, config) and Registry(far.host).tags(repo) == []


class AlteredOnTheWay(Registry):
    """A registry reached through something that rewrites the ``.att`` manifests uploaded to it,
    after the client hashed them (a proxy, a gateway): the registry stores other bytes than were sent."""

    def _send(self, method, path_or_url, scope, **kwargs):
        if method == "PUT" and "/manifests/sha256-" in path_or_url and path_or_url.endswith(".att"):
            kwargs["data"] = kwargs["data"].replace(b'"predicateType"', b'"predicateTypo"')
        return super()._send(method, path_or_url, scope, **kwargs)


def test_a_statement_altered_on_the_way_to_the_registry_is_said_to_be_altered_and_no_tag_is_put(
        registry, creds, keys, source, far):
    repo = f"{REPO}-rewritten"
    src = mirror.RegistryPlace(Registry(registry.host), REPO)
    with pytest.raises(UserError) as failed:
        mirror.mirror(src, mirror.RegistryPlace(AlteredOnTheWay(far.host), repo), mirror.Selection(cells=(CELL_ID,)),
                      signing.load_public(keys["team"][1]))
    print(f"\n{failed.value.message}\n  fix: {failed.value.fix}")
    genuine = Registry(registry.host).manifest(REPO, attached.attestation_tag(source["x86_64"])).digest
    assert f"the signed statements of {source['x86_64']} arrived altered on {far.host}/{repo}" in failed.value.message
    assert f"not the source's {genuine}" in failed.value.message
    assert "something on the way changed them (a proxy or gateway that rewrites uploads)" in failed.value.fix
    assert "check the registry address" not in failed.value.fix
    assert [t for t in Registry(far.host).tags(repo) if not attached.is_attached_tag(t)] == []  # no image tag


class Tampering(mirror.RegistryPlace):
    """A destination on whose way the statements are dropped, or replaced by another envelope."""

    def __init__(self, registry, repository, mode, substitute=None):
        super().__init__(registry, repository)
        self.mode, self.substitute = mode, substitute

    def put_manifest(self, reference, manifest):
        if attached.is_attached_tag(reference):
            if self.mode == "drop":
                return
            manifest = self.substitute
        super().put_manifest(reference, manifest)


@pytest.mark.parametrize("mode", ["drop", "alter"])
def test_a_statement_dropped_or_altered_in_transit_is_refused_on_the_destination_and_no_tag_is_put(
        registry, creds, keys, source, far, mode):
    key = signing.load_public(keys["team"][1])
    src = mirror.RegistryPlace(Registry(registry.host), REPO)
    repo = f"{REPO}-{mode}"
    substitute = None
    if mode == "alter":  # a statement signed by another key, in the genuine .att manifest's place
        scratch = f"{REPO}-scratch"
        forged = hm.push_image(Registry(registry.host), scratch, TAG, ht.sealed_twin_labels(), b"x86 payload " * 4000)
        assert forged == source["x86_64"]  # the same bytes: the same digest, another statement about it
        ht.attest_as(registry, scratch, TAG, forged, keys["stranger"][0])
        substitute = Registry(registry.host).manifest(scratch, attached.attestation_tag(forged))
        hm_reg = Registry(far.host)  # its blobs are on the destination, as a tamperer would put them
        for layer in [substitute.data["config"], *substitute.data["layers"]]:
            hm_reg.put_blob(repo, Registry(registry.host).blob(scratch, layer["digest"]))
    dst = Tampering(Registry(far.host), repo, mode, substitute)
    with pytest.raises(UserError) as failed:
        mirror.mirror(src, dst, mirror.Selection(cells=(CELL_ID,)), key)
    message = failed.value.message
    print(f"\n{mode}: {message}")
    assert f"stopped at {INDEX_TAG} ({source['index']})" in message and "no tag was put for it" in message
    said = "did not arrive" if mode == "drop" else "arrived altered"
    assert f"the signed statements of {source['x86_64']} {said} on {far.host}/{repo}" in message
    assert "something on the way changed them" in failed.value.fix
    assert [t for t in Registry(far.host).tags(repo) if not attached.is_attached_tag(t)] == []  # no image tag
    # and had the digests matched, the one trust decision refuses the altered statement there too
    if mode == "alter":
        why = policy.decide(Registry(far.host), repo, source["x86_64"], ht.sealed_twin_labels(), key).why_not
        assert "signed by another key" in why


def test_a_read_only_destination_gives_a_clear_error_and_no_tag(registry, creds, keys, source, tmp_path):
    readonly = hm.serve(tmp_path / "ro", storage_extra=", maintenance: {readonly: {enabled: true}}")
    try:
        done = run_mirror(creds, f"{registry.host}/{REPO}", f"{readonly.host}/{REPO}", "--cell", CELL_ID,
                          "--trust-key", str(keys["team"][1]))
        print("\n" + done.stderr)
        assert done.returncode == 1
        assert f"stopped at {INDEX_TAG} ({source['index']})" in done.stderr and "HTTP 405" in done.stderr
        assert "check that it accepts pushes (not read-only" in done.stderr
        assert "0 of " in done.stderr and "no tag was put for it" in done.stderr
        assert "run the same command again" in done.stderr
        assert Registry(readonly.host).tags(REPO) == []
    finally:
        readonly.stop()


def test_a_layout_on_a_full_disk_gives_a_clear_error_and_keeps_no_partial_blob(registry, creds, keys, source, tmp_path):
    disk = tmp_path / "small"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        done = run_mirror(creds, f"{registry.host}/{REPO}", f"oci:{disk / 'carry'}", "--cell", CELL_ID)
        print("\n" + done.stderr)
        assert done.returncode == 1 and "no space left on the file system of" in done.stderr
        assert f"stopped at {INDEX_TAG}" in done.stderr and "no tag was put for it" in done.stderr
        index = json.loads((disk / "carry" / INDEX_FILE).read_text())
        assert index["manifests"] == []
        assert not [p for p in (disk / "carry" / "blobs" / "sha256").iterdir() if p.name.startswith(".partial-")]
    finally:
        subprocess.run(["umount", str(disk)], check=True)


class Interrupted(mirror.RegistryPlace):
    """A destination whose connection breaks after ``after`` blobs were sent."""

    def __init__(self, registry, repository, after):
        super().__init__(registry, repository)
        self.left = after

    def put_blob(self, digest, size, source, origin):
        if self.left == 0:
            raise UserError("the connection broke (simulated)", fix="check the network")
        self.left -= 1
        return super().put_blob(digest, size, source, origin)


def test_an_interrupted_copy_names_what_was_copied_and_a_rerun_completes(registry, creds, keys, source, far):
    key = signing.load_public(keys["team"][1])
    repo = REPO + "-interrupted"
    src = mirror.RegistryPlace(Registry(registry.host), REPO)
    with pytest.raises(UserError) as failed:
        mirror.mirror(src, Interrupted(Registry(far.host), repo, 2), mirror.Selection(cells=(CELL_ID,)), key)
    assert "2 of " in failed.value.message and "no tag was put for it" in failed.value.message
    assert Registry(far.host).tags(repo) == []
    units, figures = mirror.mirror(src, mirror.RegistryPlace(Registry(far.host), repo),
                                   mirror.Selection(cells=(CELL_ID,)), key)
    # the index's 2 arches: 2 configs and 2 layers; 2 .att configs and 2 envelopes; 2 bundles and the empty config
    assert (figures.blobs_there, figures.blobs_sent) == (2, 9)
    assert figures.tags_put == [INDEX_TAG, TAG]


class CtrlC(mirror.RegistryPlace):
    def put_manifest(self, reference, manifest):
        raise KeyboardInterrupt()


def test_ctrl_c_says_what_was_copied_and_no_tag_is_put(registry, creds, keys, source, far):
    repo = REPO + "-ctrl-c"
    with pytest.raises(KeyboardInterrupt) as stopped:
        mirror.mirror(mirror.RegistryPlace(Registry(registry.host), REPO), CtrlC(Registry(far.host), repo),
                      mirror.Selection(cells=(CELL_ID,)))
    said = str(stopped.value)
    assert f"stopped at {INDEX_TAG} ({source['index']}): interrupted" in said
    # 3 image manifests, 2 .att manifests, 2 bundle manifests; their 11 blobs
    assert "11 of 11 blobs and 0 of 7 manifests were copied, no tag was put for it" in said
    assert Registry(far.host).tags(repo) == []


def test_bad_places_are_refused_with_a_fix(creds, tmp_path):
    not_layout = tmp_path / "plain"
    not_layout.mkdir()
    (not_layout / "file").write_text("x")
    done = cli(creds, "mirror", f"oci:{not_layout}", "127.0.0.1:9/x")
    assert done.returncode == 2 and "is not an OCI image layout" in done.stderr
    done = cli(creds, "mirror", "127.0.0.1:9/x", f"oci:{not_layout}")
    assert done.returncode == 2 and "neither empty nor an OCI image layout" in done.stderr
    done = cli(creds, "mirror", "/", f"oci:{tmp_path / 'new'}")
    assert done.returncode == 2 and "names no registry host" in done.stderr
    done = cli(creds, "mirror", "127.0.0.1:9/x", "oci:")
    assert done.returncode == 2 and "names no folder" in done.stderr


@pytest.mark.engine
def test_pull_trust_key_on_the_mirror_works_as_on_the_source(engine, registry, creds, keys, source, far, tmp_path):
    """`ascend-build pull --trust-key` through the CLI (Docker Engine pulls the layers) from the source
    and from its mirror: the same digest chosen, verified, and pulled; the mirror's unsigned twin refused."""
    key_file = str(keys["team"][1])
    figures(run_mirror(creds, f"{registry.host}/{REPO}", f"{far.host}/{REPO}", "--trust-key", key_file, "--json"))
    root = tmp_path / "node"  # an empty root: no NPU, this machine's arch
    root.mkdir()
    pulled = []
    try:
        for host in (registry.host, far.host):
            done = cli(creds, "pull", "--registry", f"{host}/{REPO}", "--variant", "cpu", "--cann", "9.1.0",
                       "--root", str(root), "--trust-key", key_file, "--json")
            assert done.returncode == 0, done.stdout + done.stderr
            result = json.loads(done.stdout)
            pulled.append(result["ref"])
            assert result["digest"] == source["x86_64"] and result["verified"] is True
            assert result["ref"] == f"{host}/{REPO}@{source['x86_64']}"
        # an image mirrored without its statements (pushed there directly) is refused on the mirror
        bare = REPO + "-bare"
        hm.push_image(Registry(far.host), bare, TAG, ht.sealed_twin_labels(), b"x86 payload " * 4000)
        refused = cli(creds, "pull", "--registry", f"{far.host}/{bare}", "--variant", "cpu", "--cann", "9.1.0",
                      "--root", str(root), "--trust-key", key_file)
        assert refused.returncode == 1 and "no statement is attached" in refused.stderr
    finally:
        for ref in pulled:
            engine.remove(ref, force=True)


def test_a_blob_larger_than_the_clients_read_limit_streams_through_and_a_wrong_one_is_refused(registry, creds, far,
                                                                                           tmp_path):
    """A layer over CONFIG_LIMIT (what `Registry.blob` would refuse to hold) goes registry -> layout ->
    registry by streaming; a layer whose bytes do not match its digest is refused, nothing kept."""
    from builder.registry import CONFIG_LIMIT

    reg = Registry(registry.host)
    repo = REPO + "-big"
    big = hm.layer(os.urandom(CONFIG_LIMIT + (1 << 20)), "big.bin")
    digest = hm.push_image(reg, repo, TAG, {}, b"top", base=[big])
    layer = reg.manifest(repo, digest).data["layers"][0]
    assert layer["size"] > CONFIG_LIMIT
    folder = tmp_path / "big"
    out = figures(run_mirror(creds, f"{registry.host}/{repo}", f"oci:{folder}", "--json"))
    assert out["bytes_sent"] > CONFIG_LIMIT and out["verified"] is False and out["statements"] == 0
    said = run_mirror(creds, f"{registry.host}/{repo}", f"oci:{folder}").stdout
    assert "no --trust-key, and no statement is attached to these images" in said and "copied unchecked" not in said
    back = figures(run_mirror(creds, f"oci:{folder}", f"{far.host}/{repo}", "--json"))
    assert back["bytes_sent"] == out["bytes_sent"] and Registry(far.host).has_blob(repo, layer["digest"])
    # the layout's copy of the layer damaged (same size, other bytes): refused, and nothing kept there
    path = folder / "blobs" / "sha256" / layer["digest"].split(":")[1]
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    damaged = run_mirror(creds, f"oci:{folder}", f"{far.host}/{repo}-damaged")
    assert damaged.returncode == 1 and "does not hash to its digest" in damaged.stderr
    assert not Registry(far.host).has_blob(repo + "-damaged", layer["digest"])
    assert Registry(far.host).tags(repo + "-damaged") == []
