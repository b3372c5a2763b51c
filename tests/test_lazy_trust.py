"""One answer for a lazy variant, from every command, without the Docker Engine or ctr-remote.

Against the loopback docker-registry (htpasswd auth), with real P-256 signatures: a validated image
and its eStargz variant (`tests.support.lazy.fixture_pair`: the variant's layer is one ctr-remote
made, the validated image's the same files as a plain tar), the validated image's validation
statement signed with the team's key and the variant's binding signed by the code `image --lazy`
runs (`lazy.attest_variant`, which checks the files first).

- `verify`, `pull` and `run` of the variant agree: trusted, each saying "a lazy variant of X, whose
  validation statement verifies" with X the validated image; `mirror` and `index` say the same;
- a variant whose binding is missing, altered after signing, or names an image with no validation
  statement is refused by all three with the same reason, and by `verify` and `run` with the fix.

`pull` chooses without an engine (`builder.node.pull.pick` with the key, what `pull` runs before
the engine pulls the chosen digest); `run` is given an engine address where none answers, so it
stops at the engine once its verdict is said. tests/images/test_lazy_e2e.py runs the three
commands, the engine's pull included, on a variant ctr-remote converted.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest

from builder.cli.node import how_chosen
from builder.cli.trust_key import TrustKey
from builder.images import attest, lazy
from builder.node import pull as chooser
from builder.registry import Registry
from builder.trust import attached, policy, signing, statements, variant
from builder.vocabulary import CPU, tier_names
from tests.support import trust as ht
from tests.support.lazy import fixture_pair
from tests.support.trust import CELL_ID, CLI, TAG  # the fixtures (creds, keys) come from the plugin tests/conftest.py names

RUN = f"lazy-trust-{uuid.uuid4().hex[:8]}"
LAZY_TAG = TAG + "-estargz"
ARM_LAZY_TAG = CELL_ID[: -len("x86_64")] + "aarch64-cpu-estargz"  # another cell's variant tag
NO_ENGINE = "unix:///nonexistent/ascend-build-test/docker.sock"  # `run` stops there, after its verdict


def _bind(reg: Registry, repo: str, validated: str, lazy_digest: str, key_file: Path) -> None:
    validation = attest.validation_predicate(ht.report(), tier_names(), CELL_ID, CPU, ht.CONTENT_HASH)
    lazy.attest_variant(reg, repo, validated, reg.manifest(repo, lazy_digest), validation, {"files": 0},
                        signing.load_private(key_file))


def _pair(registry, keys, name: str, attest_validated: bool = True, bind: bool = True) -> Tuple[str, str, str]:
    """(repository, validated digest, variant digest): only the variant tagged (LAZY_TAG), the validated image
    beside it by digest, so `pull` has the variant alone to choose."""
    reg, repo = Registry(registry.host), f"{RUN}/{name}"
    validated, lazy_digest = fixture_pair(reg, repo, None, LAZY_TAG, ht.sealed_twin_labels())
    if attest_validated:
        ht.attest_as(registry, repo, TAG, validated, keys["team"][0])
    if bind:
        _bind(reg, repo, validated, lazy_digest, keys["team"][0])
    return repo, validated, lazy_digest


def cli(creds, *args: str, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    done = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **creds, **(env or {})})
    assert "Traceback" not in done.stderr, done.stderr
    return done


def verify(creds, keys, ref: str, *extra: str) -> subprocess.CompletedProcess:
    return cli(creds, "verify", ref, "--key", str(keys["team"][1]), *extra)


def run_print(creds, keys, ref: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return cli(creds, "run", "--print", "--root", str(tmp_path), "--trust-key", str(keys["team"][1]), ref, "--",
               "python", "train.py", env={"DOCKER_HOST": NO_ENGINE})


def pull_json(creds, keys, registry, repo: str, tmp_path: Path) -> subprocess.CompletedProcess:
    root = tmp_path / "node"  # an empty root: no NPU, this machine's arch
    root.mkdir(exist_ok=True)
    return cli(creds, "pull", "--registry", f"{registry.host}/{repo}", "--variant", "cpu", "--cann", "9.1.0",
               "--root", str(root), "--trust-key", str(keys["team"][1]), "--json", env={"DOCKER_HOST": NO_ENGINE})


def pick(registry, keys, repo: str):
    verdicts: dict = {}
    node = chooser.Node(arch="x86_64", chip=None, driver=None, firmware=None)
    best, rejected = chooser.pick(Registry(registry.host), repo, node, chooser.Wanted(cann="9.1.0", variant=CPU),
                                  signing.load_public(keys["team"][1]), verdicts=verdicts)
    return best, rejected, verdicts


@pytest.fixture(scope="module")
def bound(registry, creds, keys):
    return _pair(registry, keys, "bound")


def test_verify_pull_and_run_agree_on_a_variant_naming_its_validated_image(bound, registry, creds, keys, tmp_path):
    repo, validated, lazy_digest = bound
    validated_ref = f"{registry.host}/{repo}@{validated}"
    said = f"a lazy variant of {validated_ref}, whose validation statement verifies"
    ref = f"{registry.host}/{repo}:{LAZY_TAG}"

    verified = verify(creds, keys, ref)
    print(f"\n$ ascend-build verify {ref} --key team.pub\n{verified.stdout}{verified.stderr}")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"verified: {said}: its lazy-variant statement about this digest, signed by this key" in verified.stdout
    assert f"OK   {variant.LAZY_VARIANT_V1}" in verified.stdout
    assert f"a lazy variant (estargz) of the validated image {validated}" in verified.stdout
    assert "a statement of a type this tool does not read" not in verified.stdout
    as_json = json.loads(verify(creds, keys, ref, "--json").stdout)
    assert as_json["validated"] is True and as_json["lazy_variant_of"] == validated_ref and as_json["digest"] == lazy_digest

    best, rejected, verdicts = pick(registry, keys, repo)
    assert best is not None and best.digest == lazy_digest, rejected
    chosen = how_chosen(TrustKey(signing.load_public(keys["team"][1]), "team.pub"), "any", verdicts[best.digest])
    assert chosen == f"{said} with team.pub (--require any)"

    job = cli(creds, "k8s", "job", "--registry", f"{registry.host}/{repo}", "--cann", "9.1.0", "--variant", "cpu",
              "--trust-key", str(keys["team"][1]), "--", "python", "train.py")
    assert job.returncode == 0, job.stderr
    assert f"# {said} with {keys['team'][1]} (--require any)\n" in job.stdout
    assert f"image: {registry.host}/{repo}@{lazy_digest}\n" in job.stdout

    started = run_print(creds, keys, ref, tmp_path)
    print(f"$ ascend-build run --print --trust-key team.pub {ref} -- python train.py\n{started.stderr}")
    assert (f"verified: {registry.host}/{repo}@{lazy_digest}: {said} with {keys['team'][1]} (--require any); "
            "starting it by that digest") in started.stderr
    # it went on to start it: the engine was the next step (none answers at NO_ENGINE)
    assert started.returncode == 1 and "cannot reach the Docker Engine" in started.stderr


def test_mirror_and_index_say_the_same_of_a_variant(bound, registry, creds, keys, tmp_path):
    repo, validated, lazy_digest = bound
    # the variant alone is selected (only it is tagged): the layout has no validated image to vouch for it
    alone = cli(creds, "mirror", f"{registry.host}/{repo}", f"oci:{tmp_path / 'alone'}", "--trust-key",
                str(keys["team"][1]))
    assert alone.returncode == 1, alone.stdout
    assert f"it is a lazy variant of oci:{tmp_path / 'alone'}@{validated}, which is not there" in alone.stderr
    # with the validated image tagged too, it is copied first and the variant is trusted through it there,
    # even under a tag that sorts before the validated image's (tags are listed sorted)
    reg = Registry(registry.host)
    image = reg.manifest(repo, validated)
    reg.put_manifest(repo, TAG, image.body, image.media_type)
    variant_image = reg.manifest(repo, lazy_digest)
    reg.put_manifest(repo, "0-lazy", variant_image.body, variant_image.media_type)
    carry = tmp_path / "carry"
    mirrored = cli(creds, "mirror", f"{registry.host}/{repo}", f"oci:{carry}", "--trust-key", str(keys["team"][1]))
    print(f"\n$ ascend-build mirror {registry.host}/{repo} oci:carry --trust-key team.pub\n{mirrored.stdout}")
    assert mirrored.returncode == 0, mirrored.stderr
    assert (f"mirrored {LAZY_TAG}: {lazy_digest} (1 image(s), 1 with statements; a lazy variant of "
            f"oci:{carry}@{validated}, whose validation statement verifies)") in mirrored.stdout
    assert mirrored.stdout.index(f"mirrored {TAG}:") < mirrored.stdout.index("mirrored 0-lazy:")

    # index: the variant under the arch's tag (the shipped matrix declares this cell for x86_64 only)
    index_repo = repo + "-index"
    for digest in (validated, lazy_digest):
        _copy(reg, repo, index_repo, digest)
    reg.put_manifest(index_repo, TAG, variant_image.body, variant_image.media_type)
    family = CELL_ID[: -len("-x86_64")] + "-cpu"
    indexed = cli(creds, "index", f"{registry.host}/{index_repo}:{family}", "--trust-key", str(keys["team"][1]))
    assert indexed.returncode == 0, indexed.stdout + indexed.stderr
    assert (f"note: {TAG} ({lazy_digest}) is a lazy variant of {registry.host}/{index_repo}@{validated}, whose "
            f"validation statement verifies with {keys['team'][1]} (--require any)") in indexed.stderr


def _copy(reg: Registry, source: str, target: str, digest: str) -> None:
    """``source@digest`` with its blobs and its .att statements into ``target``, by digest."""
    for subject in (digest, attached.attestation_tag(digest)):
        manifest = reg.manifest(source, subject)
        for blob in [manifest.data["config"], *manifest.data["layers"]]:
            reg.put_blob(target, reg.blob(source, blob["digest"], limit=1 << 20))
        reg.put_manifest(target, subject, manifest.body, manifest.media_type)


def _alter_binding(reg: Registry, repo: str, lazy_digest: str) -> None:
    """The binding's payload edited (it names another validated image), its signature kept."""
    att = reg.manifest(repo, attached.attestation_tag(lazy_digest))
    [layer] = att.data["layers"]
    envelope = json.loads(reg.blob(repo, layer["digest"]))
    body = json.loads(base64.b64decode(envelope["payload"]))
    body["predicate"]["validatedImage"]["digest"] = "sha256:" + "0" * 64
    envelope["payload"] = base64.b64encode(json.dumps(body).encode()).decode()
    edited = json.dumps(envelope).encode()
    digest = reg.put_blob(repo, edited)
    manifest = dict(att.data, layers=[dict(layer, digest=digest, size=len(edited))])
    reg.put_manifest(repo, attached.attestation_tag(lazy_digest), json.dumps(manifest).encode(), att.media_type)


@pytest.mark.parametrize("case", ["missing", "altered", "unvouched"])
def test_a_variant_whose_binding_is_missing_altered_or_unvouched_is_refused_alike(case, registry, creds, keys,
                                                                                 tmp_path):
    repo, validated, lazy_digest = _pair(registry, keys, case, attest_validated=case != "unvouched",
                                         bind=case != "missing")
    if case == "altered":
        _alter_binding(Registry(registry.host), repo, lazy_digest)
    expected = {
        "missing": ("it is an eStargz variant, trusted only through a lazy-variant statement that binds it to its "
                    "validated image, and none is attached: no statement is attached"),
        "altered": "it is a lazy variant whose lazy-variant statement does not verify: not signed by the trusted key",
        "unvouched": (f"it is a lazy variant of {registry.host}/{repo}@{validated}, whose validation statement is "
                      "refused: no statement is attached"),
    }[case]
    ref = f"{registry.host}/{repo}:{LAZY_TAG}"

    verified = verify(creds, keys, ref, "--json")
    result = json.loads(verified.stdout)
    assert verified.returncode == 1 and result["validated"] is False
    # a binding that verifies names the validated image, trusted or not
    assert result["lazy_variant_of"] == (f"{registry.host}/{repo}@{validated}" if case == "unvouched" else None)
    assert result["why_not"].startswith(expected), result["why_not"]
    assert result["fix"] and ("--lazy estargz" in result["fix"] or f"ascend-build verify {registry.host}/{repo}@"
                                                                    f"{validated}" in result["fix"])
    text = verify(creds, keys, ref)
    assert f"NOT verified: {result['why_not']}\n  fix: {result['fix']}" in text.stderr

    pulled = pull_json(creds, keys, registry, repo, tmp_path)  # refused before any engine is asked
    assert pulled.returncode == 1, pulled.stdout + pulled.stderr
    [reasons] = [r["reasons"] for r in json.loads(pulled.stdout)["rejected"] if r["tag"] == LAZY_TAG]
    assert reasons == [f"signed validation refused: {result['why_not']} (fix: {result['fix']})"]

    started = run_print(creds, keys, ref, tmp_path)
    assert started.returncode == 1 and "cannot reach the Docker Engine" not in started.stderr
    assert f"{ref}: signed validation refused: {result['why_not']}" in started.stderr
    assert result["fix"] in started.stderr


def test_a_variant_under_another_cells_tag_is_refused_naming_both_cells(registry, creds, keys):
    repo, _, lazy_digest = _pair(registry, keys, "arm")
    reg = Registry(registry.host)
    image = reg.manifest(repo, lazy_digest)
    reg.put_manifest(repo, ARM_LAZY_TAG, image.body, image.media_type)
    done = verify(creds, keys, f"{registry.host}/{repo}:{ARM_LAZY_TAG}")
    arm = CELL_ID[: -len("x86_64")] + "aarch64"
    assert done.returncode == 1
    assert (f"the tag names cell {arm} (cpu), but its validation statement is about cell {CELL_ID} (cpu)"
            in done.stderr), done.stderr


def _resign(reg: Registry, repo: str, lazy_digest: str, key_file: Path, change) -> None:
    """The variant's binding replaced by one whose predicate ``change`` edited, signed with the key again."""
    [found] = attached.verify(reg, repo, lazy_digest, signing.load_public(Path(str(key_file)[:-4] + ".pub"))).found
    predicate = dict(found.checked.predicate)
    change(predicate)
    private = signing.load_private(key_file)
    envelope = statements.sign(statements.statement(f"{reg.name}/{repo}", lazy_digest, variant.LAZY_VARIANT_V1,
                                                    predicate), private)
    att = reg.manifest(repo, attached.attestation_tag(lazy_digest))
    digest = reg.put_blob(repo, envelope)
    layer = dict(att.data["layers"][0], digest=digest, size=len(envelope))
    reg.put_manifest(repo, attached.attestation_tag(lazy_digest), json.dumps(dict(att.data, layers=[layer])).encode(),
                     att.media_type)


def test_a_signed_binding_that_does_not_fit_the_variant_or_names_itself_is_refused(registry, creds, keys):
    """The decision every command makes (`policy.decide`), on bindings signed with the team's key that say
    what is not so: other layers than the variant's manifest holds; the variant itself as its validated image."""
    reg, key = Registry(registry.host), signing.load_public(keys["team"][1])
    repo, validated, lazy_digest = _pair(registry, keys, "misbound")
    bound = f"{registry.host}/{repo}@{validated}"

    def other_layers(predicate):
        predicate["layers"] = [dict(layer, variant=dict(layer["variant"], tocDigest="sha256:" + "1" * 64))
                               for layer in predicate["layers"]]
    _resign(reg, repo, lazy_digest, keys["team"][0], other_layers)
    told = policy.decide(reg, repo, lazy_digest, ht.sealed_twin_labels(), key)
    assert told.why_not == (f"it is bound to {bound}, but its lazy-variant statement lists other layers than the "
                            "variant's manifest holds")
    assert told.lazy_of == bound and "--lazy estargz" in told.fix

    def itself(predicate):
        predicate["validatedImage"] = dict(predicate["validatedImage"], digest=lazy_digest)
    _resign(reg, repo, lazy_digest, keys["team"][0], itself)
    told = policy.decide(reg, repo, lazy_digest, ht.sealed_twin_labels(), key)
    assert told.why_not == "its lazy-variant statement names no other image as its validated image"
    assert told.line == f"{told.why_not} (fix: {told.fix})" and "--lazy estargz" in told.fix
