"""`ascend-build k8s job` end to end: the choice from a real loopback registry, the manifest on stdout.

Images carry exactly the labels the pipeline writes on a tiny base (a validated NPU image cannot
exist here, hence `fake_npu` in the names); the node pools are the fixture node lists in
MindCluster's label shapes (tests/fixtures/k8s). No Kubernetes control plane runs here: the
manifests are checked against Kubernetes' and Volcano's schemas, and their node affinity is
evaluated against the fixture nodes as the scheduler evaluates it (helpers_k8s.admitted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from tests.support.images import ROOT, cell_8_0_rc3, labelled_image, pipeline_labels
from tests.support.k8s import CLUSTER, POOL_910B, admitted, nodes, validate_ascendjob, validate_k8s, validate_volcano
from tests.support.node import SMI_910B3, make_node

from builder.k8s.pod import GUARD_PATH

CLI = [str(Path(sys.executable).with_name("ascend-build"))]
pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def repo(registry, engine, base_image, tmp_path_factory):
    """A repository with: an image needing driver 24.1.RC3, a newer torch_npu needing 25.0.RC1, an
    unvalidated candidate."""
    folder = tmp_path_factory.mktemp("k8s-images")
    repository = f"ascend-build-test/k8s-{uuid.uuid4().hex[:8]}"
    env = {"ASCEND_BUILD_REGISTRY_USER": registry.username, "ASCEND_BUILD_REGISTRY_PASSWORD": registry.password}
    fits = cell_8_0_rc3()
    images = {
        "fits": pipeline_labels(fits),
        "newer": pipeline_labels(cell_8_0_rc3(torch_npu="2.4.0.post2", driver="25.0.RC1", id="newer")),
        "candidate": pipeline_labels(fits, validated=False),
    }
    pushed, made = {}, []
    for tag, labels in images.items():
        image = labelled_image(engine, base_image, folder, labels)
        made.append(image)
        ref = f"{registry.host}/{repository}:{tag}"
        engine.tag(image, ref)
        pushed[tag] = engine.push(ref, username=registry.username, password=registry.password)
    yield f"{registry.host}/{repository}", env, pushed
    for tag in images:
        engine.untag(f"{registry.host}/{repository}:{tag}")
    for image in made:
        engine.remove(image, force=True)


def k8s_job(repo, *args):
    where, env, _ = repo
    return subprocess.run(CLI + ["k8s", "job", "--registry", where, "--cann", "8.0.RC3", *args],
                          capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT, timeout=300)


def pool_file(tmp_path, names) -> Path:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"kind": "List", "items": [n for n in nodes(CLUSTER) if n["metadata"]["name"] in names]}))
    return path


def test_a_mixed_driver_pool_gets_the_image_its_lowest_driver_runs_fake_npu(repo):
    where, _, pushed = repo
    done = k8s_job(repo, "--npus", "8", "--nodes", str(POOL_910B), "--", "torchrun", "--nproc_per_node", "8", "train.py")
    assert done.returncode == 0, done.stderr
    manifest = yaml.safe_load(done.stdout)
    validate_k8s(manifest)
    spec = manifest["spec"]["template"]["spec"]
    # npu-b's 24.1.RC3 rules out "newer" (25.0.RC1), though npu-a and npu-c could run it
    assert spec["containers"][0]["image"] == f"{where}@{pushed['fits']}"
    assert spec["containers"][0]["command"] == [GUARD_PATH, "torchrun", "--nproc_per_node", "8", "train.py"]
    assert admitted(spec, nodes(CLUSTER)) == ["npu-a", "npu-b", "npu-c"]
    assert done.stdout.startswith("# ascend-build k8s job: image tag fits, chosen for the pool (3 nodes, lowest driver "
                                  "on npu-b; arch x86_64, chip 910b, driver 24.1.RC3)\n")
    assert "note: firmware not checked: not every node carries a firmware label; the image needs 7.5.0.1.129" in done.stderr


def test_a_pool_of_newer_drivers_gets_the_newer_image_and_excludes_older_nodes_fake_npu(repo, tmp_path):
    where, _, pushed = repo
    done = k8s_job(repo, "--npus", "8", "--nodes", str(pool_file(tmp_path, {"npu-a", "npu-c"})), "--", "python", "t.py")
    assert done.returncode == 0, done.stderr
    spec = yaml.safe_load(done.stdout)["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == f"{where}@{pushed['newer']}"
    assert admitted(spec, nodes(CLUSTER)) == ["npu-a", "npu-c"]  # npu-b (24.1.RC3) is not admitted


def test_a_volcano_job_over_two_nodes_validates_against_volcanos_crd_fake_npu(repo):
    done = k8s_job(repo, "--npus", "8", "--nodes", str(POOL_910B), "--kind", "volcano", "--nodes-count", "2",
                   "--name", "llama", "--", "python", "train.py")
    assert done.returncode == 0, done.stderr
    manifest = yaml.safe_load(done.stdout)
    validate_volcano(manifest)
    assert manifest["spec"]["minAvailable"] == 2 and manifest["spec"]["tasks"][0]["replicas"] == 2
    assert admitted(manifest["spec"]["tasks"][0]["template"]["spec"], nodes(CLUSTER)) == ["npu-a", "npu-b", "npu-c"]


def test_more_pods_than_nodes_is_refused(repo):
    done = k8s_job(repo, "--npus", "8", "--nodes", str(POOL_910B), "--kind", "volcano", "--nodes-count", "4",
                   "--", "python", "train.py")
    assert done.returncode == 1 and done.stdout == ""
    assert "--nodes-count 4: the pool has 3 node(s) and each pod needs its own" in done.stderr


def test_npus_beyond_every_nodes_allocatable_is_refused_not_emitted_as_a_pending_pod(repo):
    done = k8s_job(repo, "--npus", "16", "--nodes", str(POOL_910B), "--", "python", "train.py")
    assert done.returncode == 1 and done.stdout == ""
    assert "--npus 16: no node of the pool can give a pod that many (allocatable NPUs: npu-a 8, npu-b 8, npu-c 8)" in done.stderr
    assert "fix: --npus 8 or fewer per pod" in done.stderr


def test_where_nothing_fits_the_pool_says_why_and_which_upgrade_fits_fake_npu(repo):
    where, _, _ = repo
    done = k8s_job(repo, "--npus", "8", "--nodes", str(CLUSTER), "--chip", "910b", "--", "python", "train.py")
    assert done.returncode == 1 and done.stdout == ""
    err = done.stderr
    assert "note: left out (--chip 910b): npu-d: chip 310p" in err
    assert (f"no image in {where} fits the pool (4 nodes, lowest driver on npu-e; arch x86_64, chip 910b, "
            "driver 23.0.RC3, firmware not checked):") in err
    assert "  fits: driver 23.0.RC3 < required 24.1.RC3" in err
    assert "  candidate: not validated" in err
    assert "  fix: upgrade every node's driver to 24.1.RC3 or newer" in err
    assert "Traceback" not in err


def test_a_pool_mixing_chips_is_refused_before_the_registry_is_asked(repo):
    done = k8s_job(repo, "--npus", "8", "--nodes", str(CLUSTER), "--", "python", "train.py")
    assert done.returncode == 1 and done.stdout == ""
    assert "error: " + str(CLUSTER) + ": the nodes have 2 chips (310p: npu-d; 910b: npu-a, npu-b, npu-c, npu-e)" in done.stderr
    assert "fix: pass --chip 310p (or another)" in done.stderr


def test_without_nodes_this_hosts_probe_decides_fake_npu(repo, tmp_path):
    where, _, pushed = repo
    node = make_node(tmp_path / "node", arch="x86_64", smi=SMI_910B3)  # driver 24.1.rc3, 910B3
    done = k8s_job(repo, "--npus", "2", "--root", str(node), "--", "python", "train.py")
    assert done.returncode == 0, done.stderr
    spec = yaml.safe_load(done.stdout)["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == f"{where}@{pushed['fits']}"
    assert admitted(spec, nodes(POOL_910B)) == ["npu-a", "npu-b"]  # npu-c's 910B4 is not this host's chip


@pytest.mark.parametrize("args, message", [
    (["--nodes", "/nonexistent/nodes.json"], "--nodes /nonexistent/nodes.json: cannot read it"),
    (["--kind", "deployment"], "--kind 'deployment' is none of job, volcano, ascendjob"),
    (["--nodes-count", "2"], "--nodes-count is for --kind volcano"),
    (["--name", "Bad_Name"], "--name 'Bad_Name' is not a Kubernetes name"),
])
def test_bad_options_are_clear_errors(repo, args, message):
    done = k8s_job(repo, "--npus", "8", *args, "--", "python", "train.py")
    assert done.returncode == 2 and done.stdout == ""
    assert message in done.stderr and "Traceback" not in done.stderr


def test_bad_json_is_a_clear_error(repo, tmp_path):
    bad = tmp_path / "nodes.json"
    bad.write_text("{\"kind\": \"List\", \"items\": [")
    done = k8s_job(repo, "--npus", "8", "--nodes", str(bad), "--", "python", "train.py")
    assert done.returncode == 2 and done.stdout == "" and f"error: {bad}: not JSON" in done.stderr


def test_with_a_trust_key_an_image_without_a_verifying_statement_is_refused_fake_npu(repo, tmp_path):
    # the images here carry no signed statement: labels alone would choose "fits" (tests above)
    from builder.trust import signing

    _, public = signing.generate(tmp_path, "team")
    done = k8s_job(repo, "--npus", "8", "--nodes", str(POOL_910B), "--trust-key", str(public), "--", "python", "t.py")
    assert done.returncode == 1 and done.stdout == ""
    assert "  fits: signed validation refused: " in done.stderr
    assert "Traceback" not in done.stderr


# --- the other kinds and the launcher, through the command line ---------------------------------


def test_an_ascendjob_over_two_nodes_validates_against_the_operators_crd_fake_npu(repo):
    where, _, pushed = repo
    done = k8s_job(repo, "--npus", "8", "--nodes", str(POOL_910B), "--kind", "ascendjob", "--nodes-count", "2",
                   "--name", "llama", "--", "torchrun", "--nproc_per_node", "8", "train.py")
    assert done.returncode == 0, done.stderr
    manifest = yaml.safe_load(done.stdout)
    validate_ascendjob(manifest)
    assert manifest["kind"] == "AscendJob" and manifest["metadata"]["labels"]["ring-controller.atlas"] == "ascend-910b"
    worker = manifest["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["containers"][0]["image"] == f"{where}@{pushed['fits']}"
    assert "--node-rank=$(RANK)" in worker["containers"][0]["command"]
    assert admitted(worker, nodes(CLUSTER)) == ["npu-a", "npu-b", "npu-c"]


def test_an_unknown_launcher_over_two_nodes_is_refused_before_the_registry_is_asked(repo):
    done = k8s_job(repo, "--npus", "8", "--nodes", str(POOL_910B), "--kind", "volcano", "--nodes-count", "2",
                   "--", "bash", "-c", "torchrun train.py")
    assert done.returncode == 2 and done.stdout == ""
    assert "--nodes-count 2: cannot tell 'bash' how the 2 pods find each other" in done.stderr
    assert "fix: start the command with torchrun" in done.stderr and "Traceback" not in done.stderr


def test_a_volcano_torchrun_job_gets_torchruns_rendezvous_fake_npu(repo):
    done = k8s_job(repo, "--npus", "8", "--nodes", str(POOL_910B), "--kind", "volcano", "--nodes-count", "2",
                   "--name", "llama", "--", "torchrun", "--nproc_per_node", "8", "train.py")
    assert done.returncode == 0, done.stderr
    container = yaml.safe_load(done.stdout)["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PET_NNODES"] == "2" and env["PET_MASTER_ADDR"] == "llama-worker-0.llama"
    assert "WORLD_SIZE" not in env and "RANK" not in env
    assert "--node-rank=$(VC_TASK_INDEX)" in container["command"]  # the env plugin's, which every Volcano from 1.0 sets
    assert "# needs Volcano 1.0 or newer" in done.stdout
