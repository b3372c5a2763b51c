"""The index's rules without a registry: which tags form a family, which images may enter, the exact bytes."""

import json

import pytest
from tests.support.matrix import REPO

from builder.images import matrix, publish
from builder.images.publish import ArchImage, family_of, index_body, why_not
from builder.registry import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST
from builder.vocabulary import tier_names

FAMILY = "cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1"


def image(arch="aarch64", media_type=DOCKER_MANIFEST, **labels):
    base = {"io.ascend-build.cell": f"{FAMILY}-{arch}", "io.ascend-build.variant": "npu",
            "io.ascend-build.arch": arch, "io.ascend-build.validated": "true", "io.ascend-build.torch": "2.1.0",
            "io.ascend-build.validated-tiers": ",".join(tier_names())}
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
    skipped = image(**{"io.ascend-build.validated-tiers": ",".join(t for t in tier_names() if t != "collective"),
                       "io.ascend-build.skipped-tiers": "collective"})
    assert why_not(skipped, FAMILY, "npu", "arm64") == []


# --- the index covers the arches the matrix declares (issue 32) ------------------------------


class _Registry:
    """A registry holding the tags given; it records the index written."""

    def __init__(self, name: str, tags):
        self.name, self._tags = name, list(tags)
        self.written: list = []

    def tags(self, repository):
        return self._tags

    def put_manifest(self, repository, tag, body, media_type):
        self.written.append((tag, json.loads(body)))
        return "sha256:" + "f" * 64


ARM_ONLY = "cann9.0.0-910b-openeuler24.03-py3.11-torch_npu2.9.0.post2"


def _arm_only_run(monkeypatch, declared):
    from builder.images import pipeline

    reg = _Registry("127.0.0.1:5000", [f"{ARM_ONLY}-aarch64-cpu"])
    monkeypatch.setattr(pipeline, "Registry", lambda host: reg)
    arm = publish.ArchImage("aarch64", f"{ARM_ONLY}-aarch64-cpu", "sha256:" + "a" * 64, DOCKER_MANIFEST, 10, {})
    monkeypatch.setattr(publish, "read_arch", lambda registry, repository, fam, variant, arch:
                        (arm, []) if arch == "aarch64" else (None, [f"{fam}-{arch}-cpu is not there"]))
    pushed = pipeline.Outcome(f"{ARM_ONLY}-aarch64", "cpu", status="passed",
                              digests={f"127.0.0.1:5000/team/pytorch:{ARM_ONLY}-aarch64-cpu": "sha256:" + "a" * 64})
    said: list = []
    return pipeline.indexes([pushed], pipeline.Options(push="127.0.0.1:5000", declared=declared), said.append), said, reg


def test_an_arm64_only_cell_gets_its_index_of_its_one_arch(monkeypatch):
    declared = publish.declared_arches(c for c in matrix.load(REPO / "matrix").cells if c.id.startswith(ARM_ONLY))
    assert declared == {ARM_ONLY: ("aarch64",)}
    made, said, reg = _arm_only_run(monkeypatch, declared)
    assert [o.status for o in made] == ["passed"] and made[0].arches == {"aarch64": "sha256:" + "a" * 64}
    assert "(the matrix declares aarch64 only for this cell)" in made[0].message
    assert [p["platform"]["architecture"] for p in reg.written[0][1]["manifests"]] == ["arm64"]
    assert any("of aarch64 (the matrix declares aarch64 only for this cell)" in line for line in said)


def test_a_cell_the_matrix_does_not_declare_waits_for_every_arch(monkeypatch):
    made, said, reg = _arm_only_run(monkeypatch, {})
    assert made == [] and reg.written == []
    assert said == [f"[{ARM_ONLY}] no index yet: x86_64 not in 127.0.0.1:5000/team/pytorch "
                    "(the cell is not in the matrix: every arch)"]


def test_the_index_command_says_which_arches_and_why(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from builder import cli, registry

    reg = _Registry("127.0.0.1:5000", [])
    monkeypatch.setattr(registry, "Registry", lambda host: reg)
    arm = publish.ArchImage("aarch64", f"{ARM_ONLY}-aarch64-cpu", "sha256:" + "a" * 64, DOCKER_MANIFEST, 10, {})
    monkeypatch.setattr(publish, "read_arch", lambda registry, repository, fam, variant, arch:
                        (arm, []) if arch == "aarch64" else (None, [f"{fam}-{arch}-cpu is not there"]))
    result = CliRunner().invoke(cli.app, ["index", f"127.0.0.1:5000/team/pytorch:{ARM_ONLY}-cpu"])
    assert result.exit_code == 0, result.output
    assert f"127.0.0.1:5000/team/pytorch:{ARM_ONLY}-cpu: index of aarch64 sha256:{'a' * 64} (" in result.stderr
    assert "matrix declares aarch64 only for this cell)\n" in result.stderr  # the shipped matrix, by its path
    # another matrix that lacks the cell: every arch, and x86_64 is missing
    other = tmp_path / "team.yaml"
    other.write_text("cells: []\n")
    refused = CliRunner().invoke(cli.app, ["index", "--matrix", str(other), f"127.0.0.1:5000/team/pytorch:{ARM_ONLY}-cpu"])
    assert refused.exit_code == 1 and f"{ARM_ONLY}-x86_64-cpu is not there" in refused.stderr
