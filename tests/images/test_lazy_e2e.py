"""The eStargz variant end to end, without the Docker Engine: a small image of real files put in a
registry of the test's own (htpasswd auth, loopback), attested as a validated twin; then
`lazy.publish_variant` (what `image --push --lazy estargz` runs after the push) converts it with
ctr-remote under a containerd of its own, pushes the variant and signs the statement binding it;
the trust judge takes the variant only through that binding; the eStargz reader reads files by
Range requests, checks every chunk, and refuses a corrupted one.

Marked `engine`: it needs containerd, ctr-remote and docker-registry (each conversion ~5 s here).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path
from typing import Any, Dict

import pytest

from builder import estargz
from builder.errors import UserError
from builder.images import attest, lazy
from builder.node import pull as chooser
from builder.registry import Registry
from builder.trust import attached, policy, signing, statements, variant
from builder.vocabulary import CPU, tier_names
from tests.support import trust as ht
from tests.support.lazy import layer_tar, own_registry, put_image, need_tools

pytestmark = pytest.mark.engine

REPO = "lazy-test/pytorch"
UNBOUND = "lazy-test/unbound"  # the same image again, its variant pushed without a statement
BIG = os.urandom(5 << 20 | 12345)  # more than one 4 MiB chunk
FILES = {"usr/lib/python3/torch/__init__.py": b"import torch._C\n" * 50,
         "usr/lib/python3/torch/_C.so": os.urandom(300_000),
         "usr/lib/libbig.so": BIG,
         "usr/share/doc/unread.txt": b"never read\n" * 1000,
         "etc/conf": b"x=1\n"}
LINKS = {"usr/lib/libbig.so.1": "libbig.so"}
BASE = {"bin/sh": os.urandom(100_000), "etc/os-release": b"ID=debian\n"}
REPORT = {**ht.report(), "files_read": {"import": ["/usr/lib/python3/torch/__init__.py", "/usr/lib/python3/torch/_C.so",
                                                   "/usr/lib/libbig.so.1", "/usr/lib/libbig.so"],
                                        "device": [], "train": ["/etc/conf"]}}
PREFETCH = ["usr/lib/python3/torch/__init__.py", "usr/lib/python3/torch/_C.so", "usr/lib/libbig.so", "etc/conf"]


@pytest.fixture(scope="module")
def lazy_registry(tmp_path_factory):
    need_tools()
    user, password = "lazy", "pw-lazy"
    saved = {k: os.environ.get(k) for k in ("ASCEND_BUILD_REGISTRY_USER", "ASCEND_BUILD_REGISTRY_PASSWORD")}
    os.environ.update({"ASCEND_BUILD_REGISTRY_USER": user, "ASCEND_BUILD_REGISTRY_PASSWORD": password})
    try:
        with own_registry(tmp_path_factory.mktemp("lazy-registry"), user, password) as registry:
            yield registry
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def _validated(registry: Registry, repo: str, key_file: Path) -> str:
    digest = put_image(registry, repo, ht.TAG, (layer_tar(BASE), layer_tar(FILES, LINKS)), ht.sealed_twin_labels())
    ht.attest_as(registry, repo, ht.TAG, digest, key_file)
    return digest


def _validation() -> dict:
    return attest.validation_predicate(REPORT, tier_names(), ht.CELL_ID, CPU, ht.CONTENT_HASH)


@pytest.fixture(scope="module")
def published(lazy_registry, keys, tmp_path_factory):
    """{"validated", "variant", "unbound", "unbound_variant"}: digests in REPO and UNBOUND."""
    registry, state = lazy_registry, tmp_path_factory.mktemp("state")
    digests: Dict[str, Any] = {"validated": _validated(registry, REPO, keys["team"][0])}
    said: list = []
    started: list = []  # the command line of every ctr-remote run, as the process list shows it
    real_popen = subprocess.Popen

    def watched(args, *rest, **kwargs):
        if list(args)[:1] == [lazy.CTR_REMOTE]:
            started.append(list(args))
        return real_popen(args, *rest, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess, "Popen", watched)
        ref, digests["variant"] = lazy.publish_variant(f"{registry.name}/{REPO}:{ht.TAG}", digests["validated"], REPORT,
                                                       _validation(), "x86_64", state, "twin",
                                                       signing.load_private(keys["team"][0]), say=said.append)
    digests["command lines"] = started
    digests["state"] = state
    assert ref == f"{registry.name}/{REPO}:{ht.TAG}-estargz"
    assert any("bound to " + digests["validated"] in line for line in said), said
    digests["unbound"] = _validated(registry, UNBOUND, keys["team"][0])
    _, digests["unbound_variant"] = lazy.publish_variant(f"{registry.name}/{UNBOUND}:{ht.TAG}", digests["unbound"],
                                                         REPORT, _validation(), "x86_64", state, "unbound", None)
    # the conversion is deterministic: the same image gives the same variant, in either repository
    assert digests["unbound_variant"] == digests["variant"]
    return digests


def test_the_registry_password_is_typed_at_ctr_remotes_prompt_never_on_its_command_line(published):
    """The registry needs the password (htpasswd) for the pull and the push, which succeeded; no
    ctr-remote command line (readable by every user in the process list) held it."""
    steps = [argv for argv in published["command lines"] if "images" in argv]
    assert [argv[argv.index("images") + 1] for argv in steps] == ["pull", "convert", "push"]
    for argv in steps:
        assert not any("pw-lazy" in word for word in argv), argv
    assert [argv[argv.index("--user") + 1] for argv in steps if "--user" in argv] == ["lazy", "lazy"]


def _layers(registry: Registry, repo: str, digest: str):
    manifest = registry.manifest(repo, digest)
    return manifest, registry.config(repo, manifest)


def test_the_variant_is_another_digest_with_other_diff_ids_and_the_prefetch_files_first(published, lazy_registry):
    original, original_config = _layers(lazy_registry, REPO, published["validated"])
    lazy_manifest, lazy_config = _layers(lazy_registry, REPO, published["variant"])
    assert published["variant"] != published["validated"]
    # eStargz does not keep the diff IDs: each layer's tar gains a TOC and landmarks, its files reordered
    assert lazy_config["rootfs"]["diff_ids"] != original_config["rootfs"]["diff_ids"]
    assert all(estargz.TOC_DIGEST in layer["annotations"] for layer in lazy_manifest.data["layers"])
    assert lazy_config["config"]["Labels"] == original_config["config"]["Labels"]
    toc = estargz.from_registry(lazy_registry, REPO, lazy_manifest.data["layers"][1]).toc
    names = [e["name"] for e in toc["entries"] if e["type"] == "reg"]
    landmark = names.index(".prefetch.landmark")
    assert set(names[:landmark]) == set(PREFETCH)  # the smoke test's files, before the landmark
    assert "usr/share/doc/unread.txt" in names[landmark:]


def test_the_signed_statement_binds_the_variant_to_the_validated_image(published, lazy_registry, keys):
    checked = attached.verify(lazy_registry, REPO, published["variant"], signing.load_public(keys["team"][1]))
    [binding] = checked.verified(variant.LAZY_VARIANT_V1)
    predicate = binding.checked.predicate
    assert (binding.checked.statement or {})["subject"][0]["digest"]["sha256"] == published["variant"].split(":")[1]
    assert predicate["validatedImage"]["digest"] == published["validated"]
    assert (predicate["verdict"], predicate["cell"], predicate["variant"]) == ("passed", ht.CELL_ID, CPU)
    assert [layer["regularFiles"] for layer in predicate["layers"]] == [len(BASE), len(FILES)]
    assert [layer["links"] for layer in predicate["layers"]] == [0, 1]
    assert predicate["layers"][1]["original"]["diffID"] != predicate["layers"][1]["variant"]["diffID"]
    assert predicate["prefetch"]["files"] == 5 and predicate["prefetch"]["tiers"] == ["import", "device", "train"]
    assert not checked.verified(statements.VALIDATION_V1)  # the variant has no validation statement of its own


def test_the_trust_judge_takes_the_variant_through_its_binding_and_pull_chooses_it(published, lazy_registry, keys):
    key = signing.load_public(keys["team"][1])
    labels = ht.sealed_twin_labels()
    told = policy.decide(lazy_registry, REPO, published["variant"], labels, key)
    assert told.why_not == "" and told.lazy_of == f"{lazy_registry.name}/{REPO}@{published['validated']}"
    # another key: the binding does not verify, so nothing trusts the variant
    stranger = signing.load_public(keys["stranger"][1])
    assert "not signed by the trusted key" in policy.decide(lazy_registry, REPO, published["variant"], labels, stranger).why_not
    # both are offered and trusted: pull takes the validated image itself (the variant is for lazy pulling)
    node = chooser.Node(arch="x86_64", chip=None, driver=None, firmware=None)
    best, _ = chooser.pick(lazy_registry, REPO, node, chooser.Wanted(cann="9.1.0", variant=CPU), key)
    assert best is not None and best.digest == published["validated"]
    # only the variant under a tag (the validated image held by digest only): pull takes it, through its binding
    copy_image(lazy_registry, REPO, REPO + "-only", published["validated"])
    copy_image(lazy_registry, REPO, REPO + "-only", published["variant"])
    lazy_registry.put_manifest(REPO + "-only", ht.TAG + "-estargz", *_body(lazy_registry, REPO, published["variant"]))
    best, rejected = chooser.pick(lazy_registry, REPO + "-only", node, chooser.Wanted(cann="9.1.0", variant=CPU), key)
    assert best is not None and best.digest == published["variant"], rejected


def _body(registry: Registry, repo: str, digest: str):
    manifest = registry.manifest(repo, digest)
    return manifest.body, manifest.media_type


def copy_image(registry: Registry, source: str, target: str, digest: str) -> None:
    """``source@digest`` with its blobs and its .att statements into ``target``, by digest (no tag on the image)."""
    manifest = registry.manifest(source, digest)
    for blob in [manifest.data["config"], *manifest.data["layers"]]:
        registry.put_blob(target, registry.blob(source, blob["digest"], limit=64 << 20))
    registry.put_manifest(target, digest, manifest.body, manifest.media_type)
    att = registry.manifest(source, attached.attestation_tag(digest))
    for blob in [att.data["config"], *att.data["layers"]]:
        registry.put_blob(target, registry.blob(source, blob["digest"]))
    registry.put_manifest(target, attached.attestation_tag(digest), att.body, att.media_type)


def _pull_refusal(registry: Registry, repo: str, keys, tmp_path) -> str:
    root = tmp_path / "node"
    root.mkdir(exist_ok=True)
    done = subprocess.run([ht.CLI, "pull", "--registry", f"{registry.name}/{repo}", "--variant", "cpu", "--cann", "9.1.0",
                           "--root", str(root), "--trust-key", str(keys["team"][1]), "--json"],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stdout + done.stderr
    rejected = {r["tag"]: r["reasons"] for r in json.loads(done.stdout)["rejected"]}
    return " ".join(rejected[ht.TAG + "-estargz"])


def _bind_as(registry: Registry, repo: str, subject: str, validated: str, key_file: Path) -> None:
    """Sign a lazy-variant statement about ``subject`` naming ``validated`` (the genuine predicate otherwise)."""
    predicate = variant.bind(registry, REPO, _published_digest(registry), subject, _validation(), {})
    predicate["validatedImage"]["digest"] = validated
    private = signing.load_private(key_file)
    envelope = statements.sign(statements.statement(f"{registry.name}/{repo}", subject, variant.LAZY_VARIANT_V1,
                                                    predicate), private)
    attached.attach(registry, repo, registry.manifest(repo, subject), [(envelope, variant.LAZY_VARIANT_V1)],
                    private.public_key())


def _published_digest(registry: Registry) -> str:
    return registry.manifest(REPO, ht.TAG).digest


def test_a_variant_without_its_binding_or_bound_to_another_image_is_refused(published, lazy_registry, keys, tmp_path):
    # a variant with no statement at all (the validated image is not offered beside it)
    missing = "lazy-test/missing"
    copy_blobs_only(lazy_registry, REPO, missing, published["variant"])
    lazy_registry.put_manifest(missing, ht.TAG + "-estargz", *_body(lazy_registry, REPO, published["variant"]))
    assert "no statement is attached" in _pull_refusal(lazy_registry, missing, keys, tmp_path)

    # a binding that names another image: one with the same labels and no statement of its own
    other = "lazy-test/other"
    copy_blobs_only(lazy_registry, REPO, other, published["variant"])
    lazy_registry.put_manifest(other, ht.TAG + "-estargz", *_body(lazy_registry, REPO, published["variant"]))
    stranger_image = put_image(lazy_registry, other, "stranger", (layer_tar(BASE), layer_tar(FILES, LINKS)),
                               ht.sealed_twin_labels())
    _bind_as(lazy_registry, other, published["variant"], stranger_image, keys["team"][0])
    why = _pull_refusal(lazy_registry, other, keys, tmp_path)
    assert (f"it is a lazy variant of {lazy_registry.name}/{other}@{stranger_image}, whose validation statement is "
            "refused: no statement is attached") in why

    # a binding that names an image of another cell (its labels are not the variant's)
    cell = "lazy-test/cell"
    copy_blobs_only(lazy_registry, REPO, cell, published["variant"])
    lazy_registry.put_manifest(cell, ht.TAG + "-estargz", *_body(lazy_registry, REPO, published["variant"]))
    another = put_image(lazy_registry, cell, "another", (layer_tar(BASE),), {**ht.sealed_twin_labels(),
                                                                            "io.ascend-build.cell": "another-cell"})
    _bind_as(lazy_registry, cell, published["variant"], another, keys["team"][0])
    assert (f"it is bound to {lazy_registry.name}/{cell}@{another}, whose labels are not the variant's "
            "(io.ascend-build.cell") in _pull_refusal(lazy_registry, cell, keys, tmp_path)

    # the genuine statement of REPO's variant copied to another variant's .att tag: about another image
    copied = "lazy-test/copied"
    forged = put_image(lazy_registry, copied, ht.TAG + "-estargz", (layer_tar(BASE), layer_tar({**FILES, "x": b"y"})),
                       ht.sealed_twin_labels())
    att = lazy_registry.manifest(REPO, attached.attestation_tag(published["variant"]))
    for blob in [att.data["config"], *att.data["layers"]]:
        lazy_registry.put_blob(copied, lazy_registry.blob(REPO, blob["digest"]))
    lazy_registry.put_manifest(copied, attached.attestation_tag(forged), att.body, att.media_type)
    assert "a statement about another image" in _pull_refusal(lazy_registry, copied, keys, tmp_path)


def test_the_conversions_working_state_is_removed_after_the_push_and_after_a_failure(published, lazy_registry):
    """ctr-remote's containerd pulled, unpacked and converted each image under the state folder; after
    the push only its config, its log and the prefetch record are left there, a few KB, and the
    variants stay in the registry. A conversion that fails (a digest the registry does not hold)
    leaves no more."""
    state = published["state"]
    for name in ("twin", "unbound"):
        left = sorted(str(p.relative_to(state)) for p in (state / "lazy" / name).rglob("*"))
        assert left == [f"lazy/{name}/containerd", f"lazy/{name}/containerd/config.toml",
                        f"lazy/{name}/containerd/containerd.log", f"lazy/{name}/prefetch.record.json"], left
    assert sum(p.stat().st_size for p in state.rglob("*") if p.is_file()) < 64 << 10
    assert lazy_registry.manifest(REPO, published["variant"]).digest == published["variant"]  # the push is kept
    said: list = []
    with pytest.raises(UserError, match="ctr-remote images pull .* failed"):
        lazy.convert(state / "lazy" / "failing", lazy_registry.name, REPO, "sha256:" + "0" * 64, "failing-estargz",
                     [], user=("lazy", "pw-lazy"), say=said.append)
    assert not (state / "lazy" / "failing" / "containerd" / "root").exists()
    assert not (state / "lazy" / "failing" / "containerd" / "state").exists() and said == []
    # a root that is a link to elsewhere: containerd works through it, nothing there is removed, and it is said
    elsewhere = state.parent / (state.name + "-elsewhere")
    elsewhere.mkdir()
    (state / "lazy" / "linked" / "containerd").mkdir(parents=True)
    (state / "lazy" / "linked" / "containerd" / "root").symlink_to(elsewhere)
    with pytest.raises(UserError, match="ctr-remote images pull .* failed"):
        lazy.convert(state / "lazy" / "linked", lazy_registry.name, REPO, "sha256:" + "0" * 64, "linked-estargz",
                     [], user=("lazy", "pw-lazy"), say=said.append)
    assert any(elsewhere.iterdir())  # containerd's root was made there, and kept
    [note] = said
    assert note.startswith(f"note: the conversion's working state was not removed: "
                           f"{state / 'lazy' / 'linked' / 'containerd' / 'root'}: ") and note.endswith("; remove it by hand")


def test_verify_pull_and_run_agree_on_the_converted_variant(published, lazy_registry, keys, engine, tmp_path):
    """The three commands on the variant ctr-remote made, the validated image beside it by digest only, so
    that `pull` has the variant to choose: each trusts it through its binding and names the validated
    image; the engine pulls the variant (an ordinary gzip image to Docker) and `run` prints its line."""
    alone = REPO + "-alone"
    copy_image(lazy_registry, REPO, alone, published["validated"])
    copy_image(lazy_registry, REPO, alone, published["variant"])
    lazy_registry.put_manifest(alone, ht.TAG + "-estargz", *_body(lazy_registry, REPO, published["variant"]))
    said = (f"a lazy variant of {lazy_registry.name}/{alone}@{published['validated']}, whose validation statement "
            f"verifies with {keys['team'][1]} (--require any)")
    ref = f"{lazy_registry.name}/{alone}:{ht.TAG}-estargz"
    env = dict(os.environ)

    verified = subprocess.run([ht.CLI, "verify", ref, "--key", str(keys["team"][1])], capture_output=True, text=True,
                              timeout=300, env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"verified: {said.split(' with ')[0]}: its lazy-variant statement" in verified.stdout
    root = tmp_path / "node"
    root.mkdir()
    pulled = subprocess.run([ht.CLI, "pull", "--registry", f"{lazy_registry.name}/{alone}", "--variant", "cpu",
                             "--cann", "9.1.0", "--root", str(root), "--trust-key", str(keys["team"][1])],
                            capture_output=True, text=True, timeout=600, env=env)
    pulled_ref = f"{lazy_registry.name}/{alone}@{published['variant']}"
    try:
        assert pulled.returncode == 0, pulled.stdout + pulled.stderr
        assert f"pulled {pulled_ref}\n  tag {ht.TAG}-estargz\n  {said}\n" in pulled.stdout
        started = subprocess.run([ht.CLI, "run", "--print", "--root", str(root), "--trust-key", str(keys["team"][1]),
                                  ref, "--", "python", "train.py"], capture_output=True, text=True, timeout=300, env=env)
        assert started.returncode == 0, started.stderr
        assert f"verified: {pulled_ref}: {said}; starting it by that digest" in started.stderr
        assert started.stdout.rstrip().endswith(f"{pulled_ref} python train.py")
    finally:
        engine.remove(pulled_ref, force=True)


def copy_blobs_only(registry: Registry, source: str, target: str, digest: str) -> None:
    manifest = registry.manifest(source, digest)
    for blob in [manifest.data["config"], *manifest.data["layers"]]:
        registry.put_blob(target, registry.blob(source, blob["digest"], limit=64 << 20))


def test_the_reader_reads_only_the_chunks_a_file_list_needs_and_checks_each(published, lazy_registry):
    manifest = lazy_registry.manifest(REPO, published["variant"])
    descriptor = manifest.data["layers"][1]
    layer = estargz.from_registry(lazy_registry, REPO, descriptor)
    assert layer.counter.requests == 2  # the footer, then the TOC
    got = layer.read_files(["/usr/lib/python3/torch/__init__.py", "/usr/lib/python3/torch/_C.so", "/etc/conf"])
    assert got == {k: FILES[k] for k in ("usr/lib/python3/torch/__init__.py", "usr/lib/python3/torch/_C.so", "etc/conf")}
    assert layer.counter.bytes < descriptor["size"] / 5  # not the 5 MiB file
    big = layer.read_files(["usr/lib/libbig.so"])["usr/lib/libbig.so"]
    assert big == BIG and len(layer.chunks["usr/lib/libbig.so"]) == 2  # two chunks, each checked
    assert layer.read_files(["usr/lib/libbig.so.1", "no/such/file"]) == {}  # a link or a stranger is no regular file


def _corrupting(registry: Registry, digest: str, at: int, change):
    """A fetch of the variant layer whose bytes from ``at`` on are changed by ``change`` on the way."""
    def fetch(start: int, end: int) -> bytes:
        data = registry.blob_range(REPO, digest, start, end)
        if start <= at < end:
            data = data[:at - start] + change(data[at - start:])
        return data
    return fetch


def test_the_reader_refuses_a_corrupted_chunk_and_a_toc_the_manifest_does_not_name(published, lazy_registry):
    descriptor = lazy_registry.manifest(REPO, published["variant"]).data["layers"][1]
    toc_digest = descriptor["annotations"][estargz.TOC_DIGEST]
    honest = estargz.from_registry(lazy_registry, REPO, descriptor)
    [chunk] = honest.chunks["etc/conf"]
    # a flipped byte in the chunk's gzip member: its CRC fails
    flipped = _corrupting(lazy_registry, descriptor["digest"], chunk.offset + 12, lambda b: bytes([b[0] ^ 1]) + b[1:])
    with pytest.raises(estargz.Corrupt, match="etc/conf"):
        estargz.Layer.open(flipped, descriptor["size"], toc_digest).read_files(["etc/conf"])
    # the chunk replaced by valid gzip of other bytes (same length): only its chunkDigest tells
    other = gzip.compress(b"x=2\n", mtime=0)
    assert len(other) <= chunk.end - chunk.offset
    swapped = _corrupting(lazy_registry, descriptor["digest"], chunk.offset,
                          lambda b: other + b"\0" * (chunk.end - chunk.offset - len(other)) + b[chunk.end - chunk.offset:])
    with pytest.raises(estargz.Corrupt, match=r"etc/conf: the chunk at file offset 0 .* its chunkDigest is sha256:"):
        estargz.Layer.open(swapped, descriptor["size"], toc_digest).read_files(["etc/conf"])
    # a TOC digest other than the manifest's
    with pytest.raises(estargz.Corrupt, match="the layer is not the one the manifest names"):
        estargz.Layer.open(honest.fetch, descriptor["size"], "sha256:" + "0" * 64)
