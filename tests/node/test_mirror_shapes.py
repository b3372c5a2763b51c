"""`mirror` on sources of odd shapes, from an OCI layout (no registry, no engine): each is refused
with a clear error before any tag is written, never copied as a tag without its images (the wrong
successes of a held-back probe: a size written as text skipped its blob, an index of an index
copied no inner image) and never a traceback (an index naming a manifest the source lacks, a
manifest naming a blob the source lacks)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json

import pytest

from builder.errors import UserError
from builder.node import mirror
from builder.node.oci_layout import INDEX_FILE, Layout
from builder.registry import OCI_INDEX, OCI_MANIFEST

CONFIG = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {}},
                     "rootfs": {"type": "layers", "diff_ids": []}}).encode()
LAYER = b"not really a tar, but a blob all the same"


def _digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _blob(layout: Layout, body: bytes) -> dict:
    layout.put_blob(_digest(body), len(body), lambda: contextlib.nullcontext(io.BytesIO(body)))
    return {"size": len(body), "digest": _digest(body)}


def _image(layout: Layout, size=None, write_layer: bool = True) -> bytes:
    config = {"mediaType": "application/vnd.oci.image.config.v1+json", **_blob(layout, CONFIG)}
    layer = {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "size": len(LAYER), "digest": _digest(LAYER)}
    if write_layer:
        _blob(layout, LAYER)
    if size is not None:
        layer["size"] = size
    return json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": [layer]}).encode()


def _index(*children: bytes, media_type: str = OCI_MANIFEST) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": media_type, "size": len(c), "digest": _digest(c)} for c in children]}).encode()


def _run(source, tmp_path):
    destination = mirror.place(f"oci:{tmp_path / 'far'}", "r", create=True)
    with pytest.raises(UserError) as refused:
        mirror.mirror(mirror.LayoutPlace(source), destination, mirror.Selection())
    index = tmp_path / "far" / INDEX_FILE
    tags = json.loads(index.read_text())["manifests"] if index.exists() else []
    assert tags == [], tags  # no tag written
    return refused.value


@pytest.mark.parametrize("size", ["41", -1, 41.0, True, None])
def test_a_blob_whose_size_is_not_a_number_of_bytes_is_refused_not_skipped(tmp_path, size):
    source = Layout(tmp_path / "near", create=True)
    manifest = _image(source, size="__absent__" if size is None else size)
    if size is None:
        data = json.loads(manifest)
        del data["layers"][0]["size"]
        manifest = json.dumps(data).encode()
    source.put_manifest(manifest, OCI_MANIFEST, tag="v1")
    refused = _run(source, tmp_path)
    assert "the manifest is malformed" in refused.message and "not a number of bytes" in refused.message


def test_a_blob_named_by_no_sha256_digest_is_refused(tmp_path):
    source = Layout(tmp_path / "near", create=True)
    data = json.loads(_image(source))
    data["layers"][0]["digest"] = "md5:abc"
    source.put_manifest(json.dumps(data).encode(), OCI_MANIFEST, tag="v1")
    assert "names a blob by 'md5:abc', not a sha256 digest" in _run(source, tmp_path).message


def test_an_index_of_an_index_is_refused_not_copied_without_its_images(tmp_path):
    source = Layout(tmp_path / "near", create=True)
    image = _image(source)
    source.put_manifest(image, OCI_MANIFEST)
    inner = _index(image)
    source.put_manifest(inner, OCI_INDEX)
    source.put_manifest(_index(inner, media_type=OCI_INDEX), OCI_INDEX, tag="nested")
    refused = _run(source, tmp_path)
    assert f"is an index naming another index ({_digest(inner)})" in refused.message


def test_an_index_naming_a_manifest_the_source_lacks_is_refused(tmp_path):
    source = Layout(tmp_path / "near", create=True)
    missing = _image(source)  # its blobs are there, the manifest itself is not
    source.put_manifest(_index(missing), OCI_INDEX, tag="v1")
    assert f"naming {_digest(missing)}, which the source does not hold" in _run(source, tmp_path).message


def test_a_manifest_naming_a_blob_the_source_lacks_is_refused(tmp_path):
    source = Layout(tmp_path / "near", create=True)
    source.put_manifest(_image(source, write_layer=False), OCI_MANIFEST, tag="v1")
    refused = _run(source, tmp_path)
    assert f"lacks the blob {_digest(LAYER)} that v1" in refused.message and "no tag was put" in refused.message


def test_the_same_image_well_formed_is_copied(tmp_path):
    source = Layout(tmp_path / "near", create=True)
    source.put_manifest(_image(source), OCI_MANIFEST, tag="v1")
    destination = mirror.place(f"oci:{tmp_path / 'far'}", "r", create=True)
    units, figures = mirror.mirror(mirror.LayoutPlace(source), destination, mirror.Selection())
    assert figures.tags_put == ["v1"] and figures.blobs_sent == 2
