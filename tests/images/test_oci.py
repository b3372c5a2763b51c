"""The OCI standard labels only the build knows (builder/images/oci.py): created, source,
revision, base.name; never a credential of the remote. The engine test that they reach the
image is test_pipeline_e2e's twin (`test_cpu_twin_carries_the_oci_build_labels`)."""

from __future__ import annotations

import doctest
import subprocess
from pathlib import Path

import pytest

from builder.images import oci
from builder.errors import UserError


def test_module_examples_hold():
    assert doctest.testmod(oci).failed == 0


@pytest.mark.parametrize("remote, url", [
    ("https://ci:s3cret@example.invalid/team/images.git", "https://example.invalid/team/images"),
    ("https://token@example.invalid:8443/team/images", "https://example.invalid:8443/team/images"),
    ("ssh://git@example.invalid/team/images.git", "https://example.invalid/team/images"),
    ("git@example.invalid:team/images.git", "https://example.invalid/team/images"),
    ("/srv/git/images.git", ""),
    ("file:///srv/git/images.git", ""),
    ("", ""),
])
def test_a_remote_becomes_a_public_url_without_credentials(remote, url):
    assert oci.public_url(remote) == url


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path) -> Path:
    folder = tmp_path / "team"
    folder.mkdir()
    git(folder, "init", "-q")
    git(folder, "remote", "add", "origin", "https://ci:s3cret@example.invalid/team/images.git")
    (folder / "matrix.yaml").write_text("cells: []\n")
    git(folder, "add", "matrix.yaml")
    git(folder, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "m")
    return folder


def test_labels_of_a_build_from_a_checkout_name_its_remote_and_commit(checkout):
    labels = oci.build_labels(str(checkout / "matrix.yaml"), "local/debian:12", env={"SOURCE_DATE_EPOCH": "0"})
    assert labels == {oci.CREATED: "1970-01-01T00:00:00Z", oci.SOURCE: "https://example.invalid/team/images",
                      oci.REVISION: git(checkout, "rev-parse", "HEAD"), oci.BASE_NAME: "docker.io/local/debian:12"}
    assert "s3cret" not in repr(labels)
    (checkout / "matrix.yaml").write_text("cells: [] # changed\n")
    assert oci.build_labels(str(checkout / "matrix.yaml"), "b", env={})[oci.REVISION].endswith("-dirty")


def test_github_actions_variables_win_over_git(checkout):
    env = {"GITHUB_SERVER_URL": "https://example.invalid", "GITHUB_REPOSITORY": "team/images", "GITHUB_SHA": "ab" * 20}
    labels = oci.build_labels(str(checkout / "matrix.yaml"), "b", env=env)
    assert (labels[oci.SOURCE], labels[oci.REVISION]) == ("https://example.invalid/team/images", "ab" * 20)


def test_outside_a_checkout_source_and_revision_are_left_out_not_guessed(tmp_path):
    (tmp_path / "m.yaml").write_text("cells: []\n")
    labels = oci.build_labels(str(tmp_path / "m.yaml"), "local/debian:12", env={})
    assert set(labels) == {oci.CREATED, oci.BASE_NAME}
    assert labels[oci.CREATED].endswith("Z") and len(labels[oci.CREATED]) == 20


@pytest.mark.parametrize("server", ["https://git.example.invalid:99999", "https://git.example.invalid:8x"])
def test_a_source_url_with_no_valid_port_is_left_out_not_a_traceback(server):
    """GITHUB_SERVER_URL (or a remote) is the environment's to set: a port past 65535 or not a
    number is no URL, and the source label is left out as the docstring promises, never guessed."""
    assert oci.public_url(f"{server}/team/images") == ""
    env = {"GITHUB_SERVER_URL": server, "GITHUB_REPOSITORY": "team/images", "GITHUB_SHA": "0" * 40}
    assert oci.SOURCE not in oci.build_labels("", "local/debian:12", env)


def test_a_source_date_epoch_past_any_date_is_a_clear_error_not_a_traceback():
    with pytest.raises(UserError) as refused:
        oci.created({"SOURCE_DATE_EPOCH": "99999999999999999999"})
    assert "SOURCE_DATE_EPOCH" in refused.value.message and "99999999999999999999" in refused.value.message


@pytest.mark.parametrize("given, written", [
    ("debian:12", "docker.io/library/debian:12"), ("local/debian:12", "docker.io/local/debian:12"),
    ("docker.io/library/debian:12", "docker.io/library/debian:12"), ("localhost/team/img:t", "localhost/team/img:t"),
    ("127.0.0.1:5000/team/img:t", "127.0.0.1:5000/team/img:t"), ("registry.example/img@sha256:" + "a" * 64,
                                                                  "registry.example/img@sha256:" + "a" * 64)])
def test_the_base_name_is_fully_qualified_and_its_digest_set_when_known(given, written):
    """org.opencontainers.image.base.name is a fully qualified reference (the image-spec's annotations.md),
    as Docker itself names the image; base.digest is the base's registry digest, left out when there is none."""
    labels = oci.build_labels("", given, env={}, base_digest="sha256:" + "b" * 64)
    assert labels[oci.BASE_NAME] == written and labels[oci.BASE_DIGEST] == "sha256:" + "b" * 64
    assert oci.BASE_DIGEST not in oci.build_labels("", given, env={})
