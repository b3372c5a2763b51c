"""Claims of docs/trust.md that no test without a Docker Engine held: each test here quotes its claim
and fails when the code behind it breaks.

Against Debian's docker-registry on loopback (htpasswd auth, the ``registry`` fixture) with real
P-256 signatures (the ``keys`` fixture): an image is a config and one layer put by the registry
API, with the labels `image` gives the sealed twin of the shipped Debian 12 cell; a forgery is
another such image (another digest, the same labels the pipeline reads) under the genuine
image's tag. Where the engine is needed after the trust decision (`run`'s start), its stand-in on
loopback (tests/support/fake_engine.py) answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from builder.errors import UserError
from builder.images import attest
from builder.registry import OCI_MANIFEST, Registry
from builder.trust import attached, signing, statements
from builder.vocabulary import CPU, tier_names
from tests.support import trust as ht
from tests.support.trust import CELL_ID, CLI, TAG  # the fixtures (creds, keys) come from the plugin tests/conftest.py names

FAMILY = CELL_ID[: -len("-x86_64")] + "-" + CPU  # the index's tag: the cell's without its arch


def _repository() -> str:
    return f"claims/trust-{uuid.uuid4().hex[:8]}"


def _image(registry, repository: str, marker: str, tag: str = TAG) -> str:
    """A tiny image with the sealed twin's labels, and a layer of its own (``marker``: another
    digest), under ``tag``; its digest."""
    from tests.support import mirror as hm

    return hm.push_image(Registry(registry.host), repository, tag, ht.sealed_twin_labels(), marker.encode())


def _genuine(registry, keys, repository: str) -> str:
    """The genuine image under TAG, its validation statement signed with the team's key; its digest."""
    digest = _image(registry, repository, "genuine")
    ht.attest_as(registry, repository, TAG, digest, keys["team"][0])
    return digest


def _forge(kind: str, registry, keys, repository: str, genuine: str) -> str:
    """Forgery ``kind`` (tests/support/trust.FORGERIES) put under TAG by the registry API alone; its digest."""
    return ht.tamper(kind, registry, repository, genuine, _image(registry, repository, f"forged-{kind}"), keys)


def _cli(creds, *args: str, env=None) -> subprocess.CompletedProcess:
    done = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **creds, **(env or {})})
    assert "Traceback" not in done.stderr, done.stderr
    return done


# --- verify: "For each that does not verify, it says why" -----------------------------------


@pytest.mark.parametrize("kind", ht.FORGERIES)
def test_verify_refuses_each_forgery_naming_why(kind, registry, creds, keys):
    """trust.md, verify: "For each that does not verify, it says why, from what it verified only: no
    statement attached (an image pushed without one, e.g. a forgery with identical labels); not
    signed by the trusted key ...; a statement about another image (copied from another digest's
    `.att`)." An edited statement is one no signature verifies over. The genuine image, by its
    digest, still verifies; a stranger's statements verify with the stranger's key."""
    repository = _repository()
    genuine = _genuine(registry, keys, repository)
    ref = f"{registry.host}/{repository}:{TAG}"
    assert _cli(creds, "verify", ref, "--key", str(keys["team"][1])).returncode == 0
    forged = _forge(kind, registry, keys, repository, genuine)
    done = _cli(creds, "verify", ref, "--key", str(keys["team"][1]))
    said = done.stdout + done.stderr
    assert done.returncode == 1 and f"digest {forged}" in said, said
    assert ht.REFUSED_FOR[kind] in said, said
    if kind == "copied":
        assert f"its subject is {genuine}, not this image ({forged}): a statement about another image" in said
    if kind == "unsigned":
        assert attached.attestation_tag(forged) in said
    if kind == "stranger":
        assert _cli(creds, "verify", ref, "--key", str(keys["stranger"][1])).returncode == 0
    assert _cli(creds, "verify", f"{registry.host}/{repository}@{genuine}", "--key", str(keys["team"][1])).returncode == 0


# --- How they are stored -----------------------------------------------------------------------


def test_the_same_statements_signed_again_attach_nothing_new_and_another_keys_are_appended(registry, creds, keys):
    """trust.md, How they are stored: "Signatures are deterministic, so signing the same statement
    again attaches nothing new." and "Attaching appends: statements already there, of another
    predicate or key, stay." """
    repository = _repository()
    digest = _image(registry, repository, "appended")
    reg = Registry(registry.host)
    predicates = attest.statements_for(ht.report(), tier_names(), CELL_ID, CPU, ht.CONTENT_HASH, None)
    body = statements.statement(f"{registry.host}/{repository}", digest, *predicates[0])
    team = signing.load_private(keys["team"][0])
    assert statements.sign(body, team) == statements.sign(body, team)
    first = attest.attest(f"{registry.host}/{repository}:{TAG}", digest, predicates, team)
    again = attest.attest(f"{registry.host}/{repository}:{TAG}", digest, predicates, team)
    assert again == first  # the same .att manifest: nothing new attached
    attest.attest(f"{registry.host}/{repository}:{TAG}", digest, predicates, signing.load_private(keys["team-2027"][0]))
    att = reg.manifest(repository, attached.attestation_tag(digest))
    assert len(att.data["layers"]) == 2
    for name in ("team", "team-2027"):
        found = attached.verify(reg, repository, TAG, signing.load_public(keys[name][1]))
        assert len(found.verified(statements.VALIDATION_V1)) == 1


def test_pull_and_mirror_take_the_statement_tags_for_no_image(registry, creds, keys):
    """trust.md, How they are stored: the referrers index's tag `sha256-<hex>` (and cosign's `.att`
    tag): "`pull` and `mirror` list it as no image"."""
    from builder.node import mirror, pull

    repository = _repository()
    digest = _genuine(registry, keys, repository)
    reg = Registry(registry.host)
    tags = reg.tags(repository)
    assert attached.attestation_tag(digest) in tags and attached.referrers_tag(digest) in tags
    assert [info.tag for info in pull.listing(reg, repository, "x86_64")] == [TAG]
    source = mirror.place(f"{registry.host}/{repository}", repository, create=False)
    assert [unit.tag for unit in mirror.select(source, mirror.Selection())] == [TAG]


# --- pull, run and index with a key ------------------------------------------------------------


def _node(tmp_path: Path) -> Path:
    from tests.support.node import write

    write(tmp_path / "node" / "proc/sys/kernel/arch", "x86_64\n")
    return tmp_path / "node"


def test_pull_with_a_key_takes_the_verified_digest_and_names_a_refused_image_with_its_reason(registry, creds, keys,
                                                                                            tmp_path):
    """trust.md, pull, run and index with a key: "`pull --trust-key`: labels choose first. Each image
    that fits on its labels is then a candidate only if its statement is trusted. A refused image is
    named in pull's "why not" list as `TAG: signed validation refused: REASON`. What is pulled is
    the verified digest." (The choice; the pull itself is the engine's.)"""
    from builder.node import pull

    repository = _repository()
    genuine = _genuine(registry, keys, repository)
    team = signing.load_public(keys["team"][1])
    node = pull.Node(arch="x86_64", chip=None, driver=None, firmware=None)
    wanted = pull.Wanted(cann="9.1.0", torch=None, python=None, variant=CPU)
    best, _ = pull.pick(Registry(registry.host), repository, node, wanted, team, "any")
    assert best is not None and best.digest == genuine
    _forge("stranger", registry, keys, repository, genuine)
    done = _cli(creds, "pull", "--cann", "9.1.0", "--variant", "cpu", "--registry", f"{registry.host}/{repository}",
                "--root", str(_node(tmp_path)), "--trust-key", str(keys["team"][1]), env={"DOCKER_HOST": "tcp://127.0.0.1:9"})
    assert done.returncode == 1 and done.stdout == "", done.stdout
    assert f"{TAG}: signed validation refused: " in done.stderr and "signed by another key" in done.stderr, done.stderr


def test_run_with_a_key_refuses_a_local_name_and_a_forgery_and_starts_the_verified_digest(registry, creds, keys,
                                                                                         tmp_path):
    """trust.md, pull, run and index with a key: "`run --trust-key`: IMAGE must name a registry ...
    A local name ... is refused. The tag is resolved for this node's arch, the digest's statement
    checked, and the container started **by that verified digest**. ... It is refused (exit 1, with
    the reason) when it does not verify. `--insecure` prints a warning naming the reason and starts
    IMAGE as given." (`run --print` shows the line it would start; the engine is a stand-in.)"""
    from tests.support.fake_engine import FakeEngine

    repository = _repository()
    genuine = _genuine(registry, keys, repository)
    ref = f"{registry.host}/{repository}:{TAG}"
    node = str(_node(tmp_path))
    pub = str(keys["team"][1])
    local = _cli(creds, "run", "--print", "--root", node, "--trust-key", pub, "ascend-build/pytorch:" + TAG)
    assert local.returncode == 1 and local.stderr.startswith(
        f"error: ascend-build/pytorch:{TAG}: signed validation refused: it names no registry"), local.stderr
    fake = FakeEngine(labels=ht.sealed_twin_labels())
    try:
        started = _cli(creds, "run", "--print", "--root", node, "--trust-key", pub, ref, env={"DOCKER_HOST": fake.url})
        assert started.returncode == 0, started.stderr
        assert f"{registry.host}/{repository}@{genuine}" in started.stdout and f":{TAG}" not in started.stdout
        forged = _forge("unsigned", registry, keys, repository, genuine)
        refused = _cli(creds, "run", "--print", "--root", node, "--trust-key", pub, ref, env={"DOCKER_HOST": fake.url})
        assert refused.returncode == 1 and refused.stdout == "", refused.stdout
        assert refused.stderr.startswith(f"error: {ref}: signed validation refused: "), refused.stderr
        assert "no statement is attached" in refused.stderr and attached.attestation_tag(forged) in refused.stderr
        insecure = _cli(creds, "run", "--print", "--insecure", "--root", node, "--trust-key", pub, ref,
                        env={"DOCKER_HOST": fake.url})
        assert insecure.returncode == 0, insecure.stderr
        assert "WARNING" in insecure.stderr and "no statement is attached" in insecure.stderr
        assert ref in insecure.stdout and "@sha256:" not in insecure.stdout  # IMAGE as given
    finally:
        fake.stop()


def test_index_with_a_key_names_an_arch_whose_statement_is_refused_and_writes_no_index(registry, creds, keys):
    """trust.md, pull, run and index with a key: "`index --trust-key`: each arch's image must pass the
    label checks and have its statement trusted. One that does not is named with the reason, and no
    index is written." The shipped Debian 12 cell declares x86_64 alone: its twin is the one arch."""
    repository = _repository()
    genuine = _genuine(registry, keys, repository)
    where, pub = f"{registry.host}/{repository}:{FAMILY}", str(keys["team"][1])
    forged = _forge("stranger", registry, keys, repository, genuine)
    refused = _cli(creds, "index", where, "--trust-key", pub)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert TAG in refused.stderr and "signed by another key" in refused.stderr, refused.stderr
    assert FAMILY not in Registry(registry.host).tags(repository)
    reg = Registry(registry.host)
    reg.put_manifest(repository, TAG, reg.manifest(repository, genuine).body, OCI_MANIFEST)  # the genuine one back
    done = _cli(creds, "index", where, "--trust-key", pub)
    assert done.returncode == 0, done.stderr
    index = reg.manifest(repository, FAMILY)
    assert [m["digest"] for m in index.data["manifests"]] == [genuine] and forged not in done.stdout


# --- A Kyverno policy for the cluster ---------------------------------------------------------


@pytest.mark.parametrize("require", ["any", "npu-host"])
def test_the_kyverno_policy_verifies_and_pins_the_digest_without_a_transparency_log(require, keys):
    """trust.md, A Kyverno policy for the cluster: "`failureAction: Enforce`, `required`,
    `verifyDigest` and `mutateDigest`; one attestation of type
    `https://ascend-build.io/attestations/validation/v1`, whose attestor is the public key, with
    `rekor.ignoreTlog` and `ctlog.ignoreSCT` ... No top-level attestor is set." """
    from builder.k8s import kyverno

    pem = keys["team"][1].read_text()
    [rule] = kyverno.kyverno(pem, ["r/ascend-build/*"], require)["spec"]["rules"]
    [verify] = rule["verifyImages"]
    assert (verify["failureAction"], verify["required"], verify["verifyDigest"], verify["mutateDigest"]) == \
        ("Enforce", True, True, True)
    assert "attestors" not in verify
    [attestation] = verify["attestations"]
    [entry] = attestation["attestors"][0]["entries"]
    assert attestation["type"] == statements.VALIDATION_V1 and entry["keys"]["publicKeys"] == pem
    assert entry["keys"]["rekor"] == {"ignoreTlog": True} and entry["keys"]["ctlog"] == {"ignoreSCT": True}


# --- The key a command trusts: "the first of" ---------------------------------------------------


def test_the_first_source_of_a_key_decides_and_the_later_ones_are_not_read(tmp_path, monkeypatch):
    """trust.md, pull, run and index with a key: "The key is decided in one place
    (`builder/cli/trust_key.py`) ..., the first of: 1. `--trust-key FILE`; 2. `ASCEND_BUILD_TRUST_KEY`;
    3. `trust_key:` in the node's config ...; 4. the node's default key file". Each source, when
    given, wins over every later one, even one that is broken (a later one is not read)."""
    from builder.cli.trust_key import trust_key
    from builder.trust.policy import TRUST_KEY_ENV

    monkeypatch.delenv(signing.PASSPHRASE_ENV, raising=False)
    pubs = {name: signing.generate(tmp_path / name, "team")[1] for name in ("option", "variable", "config", "default")}
    good_config, broken_config = tmp_path / "node.yaml", tmp_path / "broken.yaml"
    good_config.write_text(f"trust_key: {pubs['config']}\n")
    broken_config.write_text("trust-key: misspelt\n")  # refused whenever it is read
    default = pubs["default"]

    def decided(option, environ, config) -> str:
        return trust_key(option, environ=environ, node_default=default, node_config=config).path

    env = {TRUST_KEY_ENV: str(pubs["variable"])}
    assert decided(str(pubs["option"]), env, broken_config) == str(pubs["option"])
    assert decided(None, env, good_config) == str(pubs["variable"])
    assert decided(None, env, broken_config) == str(pubs["variable"])
    assert decided(None, {}, good_config) == str(pubs["config"])
    assert decided(None, {}, tmp_path / "no-config.yaml") == str(default)
    with pytest.raises(UserError, match="holds 'trust-key'"):
        decided(None, {}, broken_config)


# --- The statements ----------------------------------------------------------------------------


def _report(device: str, **extra) -> dict:
    """A passed smoke report of ``device``, as the smoke program writes one (on an NPU host: its driver,
    firmware, chip and NPU count)."""
    npu = device == "npu"
    tiers = [{"name": t, "status": "passed", "summary": f"{t} ok",
              "details": {"device_name": "Ascend910B3", "device_count": 8} if t == "device" and npu else {}}
             for t in tier_names()]
    return {**ht.report(), "device": device, "tiers": tiers,
            "host": {"driver": "24.1.rc3", "firmware": "7.5.0.1.129"} if npu else {}, **extra}


@pytest.mark.parametrize("extra, kind", [({}, "npu-host"), ({"emulated": "qemu-user: aarch64 on an x86_64 host"}, "emulated")])
def test_an_npu_images_statement_says_where_it_ran(extra, kind):
    """trust.md, The statements: the validation statement says "where it ran (`ranOn.kind`:
    `npu-host`, `emulated`, `stand-in` or `cpu-twin`; on an NPU host its driver, firmware, chip and
    NPU count)": an NPU image tested under emulation did not run on an NPU host. (The CPU twin's
    kinds: tests/test_attestation.py.)"""
    ran = attest.validation_predicate(_report("npu", **extra), tier_names(), CELL_ID, "npu", "h")["ranOn"]
    assert ran["kind"] == kind
    if kind == "npu-host":
        assert ran["npuHost"] == {"driver": "24.1.rc3", "firmware": "7.5.0.1.129", "chip": "Ascend910B3", "npus": 8}


def test_the_provenance_names_the_builder_with_its_version_and_git_commit(tmp_path):
    """trust.md, The statements: the provenance's "`builder`: the CLI with its version and git commit"."""
    from builder import __version__
    from builder.images.attest import Evidence
    from tests.support.matrix import REPO

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    proof = Evidence(CELL_ID, CPU, "x86_64", "", "", "", "ok", (), "local/debian:12")
    builder = attest.provenance_predicate(proof, ht.report())["runDetails"]["builder"]
    assert builder["id"] == statements.BUILDER_ID
    assert builder["version"]["ascend-build"] == __version__
    assert builder["version"]["git-commit"] in (head.stdout.strip(), head.stdout.strip() + "-dirty")


# --- Keys: "`image` and `promote` read the key before building" ----------------------------------


@pytest.mark.parametrize("command", ["image", "promote"])
def test_image_and_promote_read_the_signing_key_before_building(command, tmp_path, monkeypatch):
    """trust.md, Keys: "`image` and `promote` read the key before building, so a wrong passphrase fails
    in a second." Encrypted with one passphrase, given another: the command stops on the key (exit
    2) before it asks the engine anything (none answers here)."""
    import time

    monkeypatch.setenv(signing.PASSPHRASE_ENV, "right horse battery")
    key, _ = signing.generate(tmp_path / "keys", "team")
    args = (["image", "--cell", CELL_ID, "--variant", "cpu", "--state-dir", str(tmp_path / "state")] if command == "image"
            else ["promote", f"127.0.0.1:9/team/pytorch:{CELL_ID}-candidate"])
    start = time.monotonic()
    done = _cli({}, *args, "--push", "127.0.0.1:9", "--sign-key", str(key),
                env={signing.PASSPHRASE_ENV: "wrong", "DOCKER_HOST": "tcp://127.0.0.1:9"})
    assert done.returncode == 2, done.stderr
    assert f"{key} cannot be read as a PEM private key (the passphrase in {signing.PASSPHRASE_ENV} is wrong" in done.stderr
    assert "Docker Engine" not in done.stderr and time.monotonic() - start < 20


# --- "`image` also writes each image's SBOM into the state folder (`<state>/sbom/`), signing or not" -


@pytest.fixture
def fake_engine():
    """(the engine's stand-in on loopback, an Engine connected to it), stopped at the test's end."""
    import docker

    from builder.engine import Engine
    from tests.support.fake_engine import FakeEngine

    fake = FakeEngine()
    yield fake, Engine(docker.DockerClient(base_url=fake.url, timeout=300), fake.url)
    fake.stop()


def test_image_keeps_each_images_sbom_in_the_state_folder_signing_or_not(fake_engine, monkeypatch, tmp_path):
    """trust.md, The statements: "`image` also writes each image's SBOM into the state folder
    (`<state>/sbom/`), signing or not." No key, and an image that fails its smoke test (the engine's
    stand-in runs no smoke program; the build is a stand-in too): its CycloneDX SBOM is there."""
    from builder.engine import Engine
    from builder.images import matrix, pipeline
    from builder.images.prepare import Options
    from tests.support.matrix import SHIPPED_DOCKERFILES, SHIPPED_MATRIX

    monkeypatch.setattr(Engine, "build", lambda self, *args, **kwargs: "sha256:" + "c" * 64)
    cell = next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == CELL_ID)
    _, engine = fake_engine
    out = pipeline.build_one(cell, CPU, Options(state_dir=tmp_path / "state", locks_dir=SHIPPED_DOCKERFILES),
                             engine, lambda line: None)
    kept = tmp_path / "state" / "sbom" / f"{CELL_ID}-{CPU}.cdx.json"
    assert out.status == "failed" and out.sbom == str(kept)
    bom = json.loads(kept.read_text())
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.5" and bom["components"]


def test_an_unverified_distribution_is_marked_so_with_the_sha256_pip_reported(tmp_path):
    """trust.md, The statements: "pip's unverified step writes pip's installation report ...; an
    unverified distribution then gets the sha256 pip reports (which no lock checked) beside its
    `ascend-build:unverified` property." The shipped x86_64 CANN 7.0.RC1 cell's lock has no sha256
    for torch 2.1.0+cpu (its index was not reached where the lock was made)."""
    from builder.images import matrix, sbom
    from builder.images.installed import Installed
    from builder.images.prepare import Options, prepare
    from tests.support.matrix import SHIPPED_DOCKERFILES, SHIPPED_MATRIX

    cell = next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id.startswith("cann7.0.rc1") and c.arch == "x86_64")
    job = prepare(cell, CPU, Options(locks_dir=SHIPPED_DOCKERFILES, allow_incomplete_lock=True))
    assert job.plan.lock is not None
    assert [e.name for e in job.plan.lock.entries if not e.hashes] == ["torch"]

    def torch(installed) -> dict:
        return next(c for c in sbom.of(job, installed)["components"] if c.get("name") == "torch")
    said = {p["name"]: p["value"] for p in torch(None)["properties"]}
    assert "ascend-build:unverified" in said and "hashes" not in torch(None)
    reported = Installed("torch-2.1.0+cpu-cp39-cp39-linux_x86_64.whl", "ab" * 32, "pip report")
    component = torch({"torch": reported})
    assert component["hashes"] == [{"alg": "SHA-256", "content": "ab" * 32}]
    assert {p["name"]: p["value"] for p in component["properties"]} == {
        "ascend-build:unverified": said["ascend-build:unverified"], "ascend-build:installed-file": reported.file}


def test_each_statements_subject_is_the_repository_and_the_images_digest(registry, creds, keys):
    """trust.md, How they are stored: "Each is an in-toto Statement v1 whose `subject` is the
    repository and the image's sha256." """
    repository = _repository()
    digest = _genuine(registry, keys, repository)
    found = attached.verify(Registry(registry.host), repository, TAG, signing.load_public(keys["team"][1]))
    [validation] = found.verified(statements.VALIDATION_V1)
    statement = validation.checked.statement
    assert statement is not None and statement["_type"] == statements.STATEMENT_V1
    assert statement["subject"] == [{"name": f"{registry.host}/{repository}", "digest": {"sha256": digest.split(":")[1]}}]


def test_verify_prints_what_each_verified_statement_says_tier_by_tier(registry, creds, keys):
    """trust.md, verify: "It prints which statements verify and what they say, the tiers one by one." """
    repository = _repository()
    _genuine(registry, keys, repository)
    done = _cli(creds, "verify", f"{registry.host}/{repository}:{TAG}", "--key", str(keys["team"][1]))
    assert done.returncode == 0, done.stderr
    assert "tiers: " + ", ".join(f"{tier} passed" for tier in tier_names()) in done.stdout, done.stdout
