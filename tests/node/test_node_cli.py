"""The cluster commands end to end: host, run --print, pull against the real loopback registry.

A node here is a fixture tree of the real Ascend file formats (see test_host.py)
with a fake npu-smi: tests that use one say `fake_npu`, since no NPU exists here.
Images for `pull` carry exactly the labels the pipeline writes (plan.labels plus
the seal's io.ascend-build.validated*), on a tiny base so that pushing is fast; a
validated NPU image cannot exist on this machine, hence `fake_npu` again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from builder.node.pull import Node, Wanted, choose, fetch, listing
from builder.registry import Registry
from tests.support.images import cell_8_0_rc3, labelled_image, pipeline_labels
from tests.support.node import SMI_910B3, make_node

CLI = [str(Path(sys.executable).with_name("ascend-build"))]
ROOT = Path(__file__).resolve().parents[2]


def cli(*args, env=None):
    return subprocess.run(CLI + list(args), capture_output=True, text=True, env={**os.environ, **(env or {})},
                          cwd=ROOT, timeout=300)


@pytest.fixture
def node(tmp_path):
    """An x86_64 910B3 node: driver 24.1.rc3, firmware 7.5.0.1.129, eight NPUs."""
    return make_node(tmp_path / "node", arch="x86_64", smi=SMI_910B3)


def test_host_json_on_a_fake_npu_node(node):
    done = cli("host", "--root", str(node), "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert (info["arch"], info["chip"], info["driver"], info["firmware"]) == ("x86_64", "910b", "24.1.rc3", "7.5.0.1.129")
    assert info["devices"] == list(range(8)) and info["compatibility"] == "OK"


def test_host_text_on_an_empty_root_reports_unknowns(tmp_path):
    done = cli("host", "--root", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "driver" in done.stdout and "unknown" in done.stdout


# --- images with the pipeline's labels -----------------------------------------------------


@pytest.fixture
def labelled(engine, base_image, tmp_path):
    made = []

    def build(labels):
        image = labelled_image(engine, base_image, tmp_path, labels)
        made.append(image)
        return image
    yield build
    for image in made:
        engine.remove(image, force=True)


@pytest.mark.engine
def test_run_print_for_two_devices_fake_npu(node, labelled, engine):
    image = labelled(pipeline_labels(cell_8_0_rc3()))
    ref = f"ascend-build-test/run:{uuid.uuid4().hex[:8]}"
    engine.tag(image, ref)
    try:
        done = cli("run", "--root", str(node), "--devices", "0,1", "--print", ref, "--", "python", "train.py")
    finally:
        engine.untag(ref)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "docker run \\\n"
        "    --rm \\\n"
        "    --ipc=host \\\n"
        "    --device /dev/davinci0 \\\n"
        "    --device /dev/davinci1 \\\n"
        "    --device /dev/davinci_manager \\\n"
        "    --device /dev/devmm_svm \\\n"
        "    --device /dev/hisi_hdc \\\n"
        "    -v /usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64:ro \\\n"
        "    -v /usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info:ro \\\n"
        "    -v /usr/local/Ascend/firmware/version.info:/usr/local/Ascend/firmware/version.info:ro \\\n"
        "    -v /etc/ascend_install.info:/etc/ascend_install.info:ro \\\n"
        "    -v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi:ro \\\n"
        f"    {ref} python train.py\n")


@pytest.mark.engine
def test_run_print_mounts_no_firmware_file_for_an_image_stating_no_firmware_minimum(node, labelled, engine):
    """The driver guard reads the firmware's version.info only for a stated minimum: `run` mounts it only then."""
    labels = {k: v for k, v in pipeline_labels(cell_8_0_rc3()).items() if k != "io.ascend-build.min-firmware"}
    ref = f"ascend-build-test/run:{uuid.uuid4().hex[:8]}"
    engine.tag(labelled(labels), ref)
    try:
        done = cli("run", "--root", str(node), "--devices", "0", "--print", ref, "--", "python", "train.py")
    finally:
        engine.untag(ref)
    assert done.returncode == 0, done.stderr
    assert "/usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info:ro" in done.stdout
    assert "firmware/version.info" not in done.stdout


@pytest.fixture
def tagged(labelled, engine):
    """A local ref to an image with the pipeline's labels (local/debian:12 underneath: x86_64)."""
    refs = []

    def tag(labels) -> str:
        ref = f"ascend-build-test/run:{uuid.uuid4().hex[:8]}"
        engine.tag(labelled(labels), ref)
        refs.append(ref)
        return ref
    yield tag
    for ref in refs:
        engine.untag(ref)


@pytest.mark.engine
def test_run_refuses_an_x86_64_image_on_an_aarch64_node_fake_npu(tmp_path, tagged):
    ref = tagged(pipeline_labels(cell_8_0_rc3()))
    arm = make_node(tmp_path / "arm", arch="aarch64", smi=SMI_910B3)
    done = cli("run", "--root", str(arm), "--print", ref)
    assert done.returncode == 1, done.stdout
    assert f"{ref} cannot start on this node: image x86_64, host aarch64" in done.stderr
    assert "Use the image built for aarch64" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.engine
def test_run_refuses_a_tag_that_does_not_exist(node):
    ref = f"ascend-build-test/run:absent-{uuid.uuid4().hex[:8]}"
    done = cli("run", "--root", str(node), "--print", ref)
    assert done.returncode == 1 and done.stdout == ""
    assert f"{ref} cannot start on this node: {ref}: no such image in the Docker Engine" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.engine
def test_run_refuses_a_driver_without_lib64_as_doctor_fails_it_fake_npu(tmp_path, tagged):
    ref = tagged(pipeline_labels(cell_8_0_rc3()))
    bare = make_node(tmp_path / "bare", arch="x86_64", smi=SMI_910B3, lib64=False)
    ran = cli("run", "--root", str(bare), "--print", ref)
    doctor = cli("doctor", "--root", str(bare), "--json")
    assert ran.returncode == 1 and ran.stdout == ""
    assert "the driver files a container needs are missing: /usr/local/Ascend/driver/lib64" in ran.stderr
    assert doctor.returncode == 1
    [mounts] = [c for c in json.loads(doctor.stdout) if c["name"] == "driver mounts"]
    assert mounts["status"] == "FAIL" and "/usr/local/Ascend/driver/lib64" in mounts["detail"]


@pytest.mark.engine
def test_run_refuses_an_image_needing_a_newer_driver_fake_npu(node, labelled, engine):
    image = labelled(pipeline_labels(cell_8_0_rc3(driver="25.0.RC1")))
    ref = f"ascend-build-test/run:{uuid.uuid4().hex[:8]}"
    engine.tag(image, ref)
    try:
        refused = cli("run", "--root", str(node), "--print", ref)
        forced = cli("run", "--root", str(node), "--print", "--force", ref)
    finally:
        engine.untag(ref)
    assert refused.returncode == 1
    assert f"{ref} needs NPU driver 25.0.RC1 or newer; this node has 24.1.rc3" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert forced.returncode == 0 and forced.stdout.startswith("docker run")
    # --force reaches the image's driver guard by its one override, in the line shown
    assert "    -e ASCEND_DRIVER_GUARD=off-unsafe \\\n" in forced.stdout


# --- pull ------------------------------------------------------------------------------


@pytest.fixture
def repo(registry, engine, labelled):
    """A registry repository with: a fitting image, a newer one needing a newer driver,
    an unvalidated candidate and a CPU twin."""
    repository = f"ascend-build-test/pull-{uuid.uuid4().hex[:8]}"
    env = {"ASCEND_BUILD_REGISTRY_USER": registry.username, "ASCEND_BUILD_REGISTRY_PASSWORD": registry.password}
    fits = cell_8_0_rc3()
    images = {
        "fits": pipeline_labels(fits),
        "newer-torch": pipeline_labels(cell_8_0_rc3(torch_npu="2.4.0.post2", torch="2.4.0", driver="25.0.RC1",
                                                    id="newer")),
        "candidate": pipeline_labels(fits, validated=False),
        "twin": pipeline_labels(fits, variant="cpu"),
    }
    pushed = {}
    for tag, labels in images.items():
        ref = f"{registry.host}/{repository}:{tag}"
        engine.tag(labelled(labels), ref)
        pushed[tag] = engine.push(ref, username=registry.username, password=registry.password)
    yield repository, env, pushed
    for tag in images:
        engine.untag(f"{registry.host}/{repository}:{tag}")


@pytest.mark.engine
def test_pull_chooses_the_fitting_validated_image_by_digest_fake_npu(node, repo, registry, engine):
    repository, env, pushed = repo
    done = cli("pull", "--cann", "8.0.RC3", "--registry", f"{registry.host}/{repository}", "--root", str(node),
               "--json", env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["tag"] == "fits" and result["digest"] == pushed["fits"]
    assert result["ref"] == f"{registry.host}/{repository}@{pushed['fits']}"
    assert engine.labels(result["ref"])["io.ascend-build.validated"] == "true"


@pytest.mark.engine
def test_pull_refuses_with_a_reason_per_candidate_fake_npu(node, repo, registry):
    repository, env, _ = repo
    done = cli("pull", "--cann", "8.5.0", "--registry", f"{registry.host}/{repository}", "--root", str(node), env=env)
    assert done.returncode == 1
    err = done.stderr
    assert "no image in" in err and "driver 24.1.rc3" in err
    assert "  newer-torch: CANN 8.0.RC3, not 8.5.0; driver 24.1.rc3 < required 25.0.RC1" in err
    assert "  candidate: not validated" in err
    assert "  twin: CPU twin, not an NPU image; CANN 8.0.RC3, not 8.5.0" in err  # its name says 8.0.rc3
    # the retry carries the run's --registry and --root
    assert (f"fix: another CANN fits this node: 8.0.RC3 (ascend-build pull --registry {registry.host}/{repository} "
            f"--root {node} --cann 8.0.RC3)") in err
    assert "Traceback" not in err


@pytest.mark.engine
def test_pull_json_when_nothing_fits_gives_the_reasons_per_image_fake_npu(node, repo, registry):
    repository, env, pushed = repo
    done = cli("pull", "--cann", "8.5.0", "--registry", f"{registry.host}/{repository}", "--root", str(node),
               "--json", env=env)
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["ref"] is None and result["registry"] == f"{registry.host}/{repository}"
    assert result["node"] == {"arch": "x86_64", "chip": "910b", "driver": "24.1.rc3", "firmware": "7.5.0.1.129",
                              "unchecked": []}
    reasons = {r["tag"]: r["reasons"] for r in result["rejected"]}
    assert reasons["twin"] == ["CPU twin, not an NPU image", "CANN 8.0.RC3, not 8.5.0"]
    assert reasons["fits"] == ["CANN 8.0.RC3, not 8.5.0"]
    assert {r["tag"]: r["digest"] for r in result["rejected"]}["fits"] == pushed["fits"]
    assert result["fixes"] == [f"another CANN fits this node: 8.0.RC3 (ascend-build pull --registry "
                               f"{registry.host}/{repository} --root {node} --cann 8.0.RC3)"]
    assert "no image in" in done.stderr


def test_pull_json_on_bad_input_prints_the_error_as_json(tmp_path):
    done = cli("pull", "--registry", "127.0.0.1:9", "--variant", "gpu", "--root", str(tmp_path), "--json")
    assert done.returncode == 2
    assert json.loads(done.stdout) == {"ref": None, "error": "--variant 'gpu' is none of npu, cpu",
                                       "fix": "--variant npu (the NPU image) or --variant cpu (its CPU twin)"}
    assert "error: --variant 'gpu'" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.engine
def test_pull_with_refused_credentials_is_a_clear_error(node, repo, registry):
    repository, env, _ = repo
    bad = dict(env, ASCEND_BUILD_REGISTRY_PASSWORD="wrong")
    done = cli("pull", "--cann", "8.0.RC3", "--registry", f"{registry.host}/{repository}", "--root", str(node), env=bad)
    assert done.returncode == 1
    assert f"registry {registry.host}: refused the credentials given for /v2/" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.engine
def test_a_tag_moved_between_listing_and_pull_still_pulls_what_was_checked_fake_npu(repo, registry, engine, labelled):
    repository, env, pushed = repo
    reg = Registry(registry.host, registry.username, registry.password)
    node = Node(arch="x86_64", chip="910b", driver="24.1.rc3", firmware="7.5.0.1.129")
    best, _ = choose(listing(reg, repository, node.arch), node, Wanted(cann="8.0.RC3"))
    assert best and best.tag == "fits"
    # Someone re-pushes the tag with another image between the choice and the pull.
    other = labelled(dict(pipeline_labels(cell_8_0_rc3()), **{"io.ascend-build.content-hash": "0" * 16}))
    moved_ref = f"{registry.host}/{repository}:fits"
    engine.tag(other, moved_ref)
    new_digest = engine.push(moved_ref, username=registry.username, password=registry.password)
    os.environ.update(env)
    try:
        ref, moved = fetch(engine, reg, repository, best, node.arch)
    finally:
        for key in env:
            os.environ.pop(key, None)
    assert ref.endswith("@" + pushed["fits"])
    assert moved == new_digest != pushed["fits"]
    assert engine.labels(ref)["io.ascend-build.content-hash"] == best.labels["io.ascend-build.content-hash"]


@pytest.mark.engine
def test_run_looks_a_registry_reference_up_in_its_registry_fake_npu(node, repo, registry, engine):
    """Not in the Docker Engine: `docker run` would pull it, so it exists when its registry has it."""
    repository, env, _ = repo
    there, absent = f"{registry.host}/{repository}:fits", f"{registry.host}/{repository}:nope"
    engine.untag(there)
    found = cli("run", "--root", str(node), "--print", there, env=env)
    missing = cli("run", "--root", str(node), "--print", absent, env=env)
    assert found.returncode == 0, found.stderr
    assert found.stdout.rstrip().endswith(there)
    assert missing.returncode == 1 and missing.stdout == ""
    assert f"{absent}: no such image in the Docker Engine nor in its registry" in missing.stderr
