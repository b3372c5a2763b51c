"""The index's rules without a registry: which tags form a family, which images may enter, the exact bytes."""

import pytest

from builder.images.publish import ArchImage, family_of, index_body, why_not
from builder.registry import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST
from builder.vocabulary import TIERS

FAMILY = "cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1"


def image(arch="aarch64", media_type=DOCKER_MANIFEST, **labels):
    base = {"io.ascend-build.cell": f"{FAMILY}-{arch}", "io.ascend-build.variant": "npu",
            "io.ascend-build.arch": arch, "io.ascend-build.validated": "true", "io.ascend-build.torch": "2.1.0",
            "io.ascend-build.validated-tiers": ",".join(TIERS)}
    base.update(labels)
    return ArchImage(arch, f"{FAMILY}-{arch}", "sha256:" + ("a" if arch == "aarch64" else "b") * 64, media_type, 428,
                     {k: v for k, v in base.items() if v is not None})


@pytest.mark.parametrize("tag, expected", [
    (f"{FAMILY}-aarch64", (FAMILY, "npu")),
    (f"{FAMILY}-x86_64-cpu", (FAMILY, "cpu")),
    (f"{FAMILY}-aarch64-cpu-on-debian11", None),  # a stand-in is never the cell's own image
    (f"{FAMILY}-aarch64-candidate", None),
    ("my-cell", None),
])
def test_family_of(tag, expected):
    assert family_of(tag) == expected


def test_a_validated_image_of_its_arch_may_enter():
    assert why_not(image(), FAMILY, "npu", "arm64") == []


@pytest.mark.parametrize("labels, architecture, reason", [
    ({"io.ascend-build.validated": None}, "arm64", "it did not pass every tier (not validated)"),
    ({"io.ascend-build.validated-tiers": "versions,libraries"}, "arm64",
     "it did not pass every tier (not validated: import, device, train, collective missing)"),
    ({}, "amd64", "it is labelled aarch64 and its config says amd64, not aarch64"),
    ({"io.ascend-build.variant": "cpu"}, "arm64", "it is a cpu image, not npu"),
    ({"io.ascend-build.stand-in": "debian11 stands in for ubuntu22.04"}, "arm64",
     "it is a stand-in (debian11 stands in for ubuntu22.04), not the cell's own image"),
    ({"io.ascend-build.cell": "other-aarch64"}, "arm64", f"its cell label is other-aarch64, not {FAMILY}-aarch64"),
])
def test_each_reason_to_keep_an_image_out_is_named(labels, architecture, reason):
    assert why_not(image(**labels), FAMILY, "npu", architecture) == [reason]


@pytest.mark.parametrize("variant, tiers, reason", [
    ("npu", "versions,libraries", None),
    ("npu", "versions", "it did not pass every tier (not validated: libraries missing)"),
    ("cpu", "versions", None),
    ("cpu", "", "it did not pass every tier (not validated: versions missing)"),
])
def test_a_cann_only_image_owes_only_the_tiers_it_can_run(variant, tiers, reason):
    """No torch label: CANN-only. Its NPU image owes the static tiers, its twin the versions tier."""
    cann_only = image(**{"io.ascend-build.torch": "", "io.ascend-build.variant": variant,
                         "io.ascend-build.validated-tiers": tiers})
    assert why_not(cann_only, FAMILY, variant, "arm64") == ([reason] if reason else [])


def test_index_bytes_are_a_docker_list_over_docker_manifests_sorted_by_arch():
    body, media_type = index_body([image("x86_64"), image("aarch64")])
    assert media_type == DOCKER_LIST
    assert body.decode() == (
        '{\n'
        '  "manifests": [\n'
        '    {\n'
        f'      "digest": "sha256:{"a" * 64}",\n'
        f'      "mediaType": "{DOCKER_MANIFEST}",\n'
        '      "platform": {\n'
        '        "architecture": "arm64",\n'
        '        "os": "linux"\n'
        '      },\n'
        '      "size": 428\n'
        '    },\n'
        '    {\n'
        f'      "digest": "sha256:{"b" * 64}",\n'
        f'      "mediaType": "{DOCKER_MANIFEST}",\n'
        '      "platform": {\n'
        '        "architecture": "amd64",\n'
        '        "os": "linux"\n'
        '      },\n'
        '      "size": 428\n'
        '    }\n'
        '  ],\n'
        f'  "mediaType": "{DOCKER_LIST}",\n'
        '  "schemaVersion": 2\n'
        '}\n')


def test_an_oci_manifest_among_them_makes_an_oci_index():
    assert index_body([image("x86_64"), image("aarch64", OCI_MANIFEST)])[1] == OCI_INDEX


def test_a_tier_skipped_with_a_reason_keeps_no_image_out():
    """The seal names a skipped tier apart (io.ascend-build.skipped-tiers); it did not fail."""
    skipped = image(**{"io.ascend-build.validated-tiers": ",".join(t for t in TIERS if t != "collective"),
                       "io.ascend-build.skipped-tiers": "collective"})
    assert why_not(skipped, FAMILY, "npu", "arm64") == []
