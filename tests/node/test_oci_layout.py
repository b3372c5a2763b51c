"""An OCI image layout written and read (no engine, no registry): under hostile states, links
planted in it are never written through, names from its index.json are checked against the
distribution grammar before use, and a planted file of the right size is no blob; a Docker image
or list is named through an OCI index, which skopeo reads, and reads back as itself."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import subprocess

import pytest

from builder.errors import UserError
from builder.node.oci_layout import INDEX_FILE, REF_NAME, WRAPS, Layout
from builder.registry import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX
from tests.support.promptly import refused_promptly

BODY = b"a layer's bytes"
DIGEST = "sha256:" + hashlib.sha256(BODY).hexdigest()


def _source(data: bytes = BODY):
    return lambda: contextlib.nullcontext(io.BytesIO(data))


def test_a_link_planted_under_a_partial_blobs_name_is_not_written_through(tmp_path):
    layout = Layout(tmp_path / "carry", create=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    partial = layout.path(DIGEST).with_name(".partial-" + DIGEST.split(":")[1])
    partial.symlink_to(victim)
    assert layout.put_blob(DIGEST, len(BODY), _source()) == len(BODY)
    assert victim.read_text() == "keep me"
    assert layout.path(DIGEST).read_bytes() == BODY and not layout.path(DIGEST).is_symlink()
    assert not partial.exists() and not partial.is_symlink()


def test_a_blobs_folder_that_is_a_link_is_refused(tmp_path):
    layout = Layout(tmp_path / "carry", create=True)
    elsewhere = tmp_path / "elsewhere"
    (layout.folder / "blobs" / "sha256").rename(elsewhere)
    (layout.folder / "blobs" / "sha256").symlink_to(elsewhere)
    with pytest.raises(UserError, match=r"blobs/sha256 is a link: a layout's blobs live in a folder of its own"):
        Layout(layout.folder)


def test_a_planted_file_of_the_right_size_and_other_bytes_is_no_blob(tmp_path):
    layout = Layout(tmp_path / "carry", create=True)
    layout.path(DIGEST).write_bytes(b"x" * len(BODY))
    assert not layout.has_blob(DIGEST, len(BODY))
    assert layout.put_blob(DIGEST, len(BODY), _source()) == len(BODY)  # written, not "already there"
    assert layout.path(DIGEST).read_bytes() == BODY
    assert layout.has_blob(DIGEST, len(BODY)) and layout.put_blob(DIGEST, len(BODY), _source()) == 0


@pytest.mark.parametrize("tag", ["../../v2/other/manifests/x", "v1?x=1", "v1#frag", "v1\r\nX-Injected: 1", ".hidden",
                                 "x" * 129])
def test_a_tag_in_index_json_outside_the_grammar_is_refused_before_use(tmp_path, tag):
    layout = Layout(tmp_path / "carry", create=True)
    digest = layout.put_manifest(b'{"schemaVersion": 2}', "application/vnd.oci.image.manifest.v1+json", tag="v1")
    index = json.loads((layout.folder / INDEX_FILE).read_text())
    index["manifests"].append({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest,
                               "size": 20, "annotations": {REF_NAME: tag}})
    (layout.folder / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(UserError) as caught:
        layout.tags()
    assert "which is no tag" in caught.value.message and repr(tag[:80]) in caught.value.message


# --- Docker-typed manifests: what `docker push` writes, named so that common layout readers find them ---

def put_docker_image(layout: Layout, arch: str = "amd64", tag: str = "v1") -> str:
    """A tiny Docker image (schema 2: a config and one gzip tar layer) written to ``layout`` under
    ``tag``, blobs first as `mirror` writes them; its manifest's digest."""
    import gzip
    import tarfile

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w"):
        pass
    layer = gzip.compress(raw.getvalue(), mtime=0)
    config = json.dumps({"architecture": arch, "os": "linux", "config": {"Labels": {"x": arch}},
                         "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()]}}
                        ).encode()
    described = []
    for media_type, body in (("application/vnd.docker.container.image.v1+json", config),
                             ("application/vnd.docker.image.rootfs.diff.tar.gzip", layer)):
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        layout.put_blob(digest, len(body), _source(body))
        described.append({"mediaType": media_type, "size": len(body), "digest": digest})
    manifest = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": described[0],
                           "layers": described[1:]}, indent=3).encode()
    return layout.put_manifest(manifest, DOCKER_MANIFEST, tag=tag)


def test_a_docker_image_is_named_through_an_oci_index_and_read_back_as_itself(tmp_path):
    layout = Layout(tmp_path / "carry", create=True)
    digest = put_docker_image(layout)
    entries = json.loads((layout.folder / INDEX_FILE).read_text())["manifests"]
    assert [e["mediaType"] for e in entries] == [OCI_INDEX]  # every entry an OCI type
    wrapper = json.loads(layout.path(entries[0]["digest"]).read_bytes())
    assert wrapper["annotations"] == {WRAPS: digest}
    assert wrapper["manifests"] == [{"mediaType": DOCKER_MANIFEST, "digest": digest,
                                     "size": layout.path(digest).stat().st_size,
                                     "platform": {"architecture": "amd64", "os": "linux"}}]
    read = layout.manifest("", "v1")  # the tag reads as the very manifest the statements name
    assert (read.digest, read.media_type) == (digest, DOCKER_MANIFEST)
    # written again: the same bytes, index.json unchanged
    before = (layout.folder / INDEX_FILE).read_bytes()
    assert put_docker_image(layout) == digest and (layout.folder / INDEX_FILE).read_bytes() == before


def test_a_docker_list_is_named_through_an_oci_index_of_its_own_entries(tmp_path):
    layout = Layout(tmp_path / "carry", create=True)
    children = [put_docker_image(layout, arch, tag=f"t-{arch}") for arch in ("amd64", "arm64")]
    listed = [{"mediaType": DOCKER_MANIFEST, "digest": d, "size": layout.path(d).stat().st_size,
               "platform": {"architecture": arch, "os": "linux"}} for d, arch in zip(children, ("amd64", "arm64"))]
    body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_LIST, "manifests": listed}).encode()
    digest = layout.put_manifest(body, DOCKER_LIST, tag="both")
    entry = next(e for e in layout.entries() if e["annotations"][REF_NAME] == "both")
    assert entry["mediaType"] == OCI_INDEX
    assert json.loads(layout.path(entry["digest"]).read_bytes())["manifests"] == listed
    assert layout.manifest("", "both").digest == digest and layout.manifest("", "both").media_type == DOCKER_LIST


def test_a_wrapper_that_lists_other_images_than_it_wraps_is_refused(tmp_path):
    layout = Layout(tmp_path / "carry", create=True)
    genuine = put_docker_image(layout, "amd64", tag="v1")
    other = put_docker_image(layout, "arm64", tag="v2")
    index = json.loads((layout.folder / INDEX_FILE).read_text())
    entry = next(e for e in index["manifests"] if e["annotations"][REF_NAME] == "v1")
    wrapper = json.loads(layout.path(entry["digest"]).read_bytes())
    wrapper["manifests"][0]["digest"] = other  # skopeo would copy v2's image under v1's name
    body = json.dumps(wrapper).encode()
    entry["digest"] = layout.put_manifest(body, OCI_INDEX)
    entry["size"] = len(body)
    (layout.folder / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(UserError) as refused:
        layout.manifest("", "v1")
    assert f"the tag v1 names {genuine} through an index" in refused.value.message
    assert "lists other manifests" in refused.value.message


def skopeo(*args: str) -> subprocess.CompletedProcess:
    if not shutil.which("skopeo"):
        pytest.skip("skopeo missing: apt-get install skopeo")
    return subprocess.run(["skopeo", *args], capture_output=True, text=True, timeout=120)


def test_skopeo_finds_a_docker_image_in_the_layout_and_its_digest_is_the_signed_one(tmp_path):
    layout = Layout(tmp_path / "carry", create=True)
    digest = put_docker_image(layout)
    done = skopeo("inspect", f"oci:{layout.folder}:v1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["Architecture"] == "amd64"
    raw = json.loads(skopeo("inspect", "--raw", f"oci:{layout.folder}:v1").stdout)
    assert [m["digest"] for m in raw["manifests"]] == [digest]
    # why the wrapper: the same image named by a Docker-typed entry is not found by skopeo
    plain = Layout(tmp_path / "plain", create=True)
    put_docker_image(plain)
    index = json.loads((plain.folder / INDEX_FILE).read_text())
    index["manifests"] = [{"mediaType": DOCKER_MANIFEST, "digest": digest, "size": plain.path(digest).stat().st_size,
                           "annotations": {REF_NAME: "v1"}}]
    (plain.folder / INDEX_FILE).write_text(json.dumps(index))
    missed = skopeo("inspect", f"oci:{plain.folder}:v1")
    assert missed.returncode != 0 and "no descriptor found for reference" in missed.stderr


def test_a_blob_that_is_a_fifo_is_refused_never_waited_on(tmp_path):
    import os

    layout = Layout(tmp_path / "carry", create=True)
    path = layout.path(DIGEST)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)  # no writer: a plain open() waits for ever
    def open_it():
        with layout.open_blob(DIGEST, len(BODY)):
            pass
    assert "is not a regular file" in refused_promptly(open_it, path).message
