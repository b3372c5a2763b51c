"""`k8s job --kind ascendjob` and the launcher's refusal through the command line (images as in test_k8s_cli)."""

from __future__ import annotations

import pytest
import yaml
from tests.k8s.test_k8s_cli import k8s_job, repo  # noqa: F401  (the module's registry fixture)
from tests.support.k8s import CLUSTER, POOL_910B, admitted, nodes, validate_ascendjob

pytestmark = pytest.mark.engine


def test_an_ascendjob_over_two_nodes_validates_against_the_operators_crd_fake_npu(repo):  # noqa: F811
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


def test_an_unknown_launcher_over_two_nodes_is_refused_before_the_registry_is_asked(repo):  # noqa: F811
    done = k8s_job(repo, "--npus", "8", "--nodes", str(POOL_910B), "--kind", "volcano", "--nodes-count", "2",
                   "--", "bash", "-c", "torchrun train.py")
    assert done.returncode == 2 and done.stdout == ""
    assert "--nodes-count 2: cannot tell 'bash' how the 2 pods find each other" in done.stderr
    assert "fix: start the command with torchrun" in done.stderr and "Traceback" not in done.stderr


def test_a_volcano_torchrun_job_gets_torchruns_rendezvous_fake_npu(repo):  # noqa: F811
    done = k8s_job(repo, "--npus", "8", "--nodes", str(POOL_910B), "--kind", "volcano", "--nodes-count", "2",
                   "--name", "llama", "--", "torchrun", "--nproc_per_node", "8", "train.py")
    assert done.returncode == 0, done.stderr
    env = {e["name"]: e.get("value") for e in
           yaml.safe_load(done.stdout)["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]}
    assert env["PET_NNODES"] == "2" and env["PET_MASTER_ADDR"] == "llama-worker-0.llama"
    assert "WORLD_SIZE" not in env and "RANK" not in env
