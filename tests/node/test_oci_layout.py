"""An OCI image layout written and read under hostile states (no engine, no registry): links
planted in it are never written through, names from its index.json are checked against the
distribution grammar before use, and a planted file of the right size is no blob."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json

import pytest

from builder.errors import UserError
from builder.node.oci_layout import INDEX_FILE, REF_NAME, Layout

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
