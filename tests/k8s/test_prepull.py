"""`ascend-build k8s prepull` and `k8s job --prepull`: the choice `k8s job` makes, from a real
loopback registry (images pushed through the registry API with the pipeline's labels, no engine),
as a DaemonSet valid against Kubernetes' schemas whose node affinity admits exactly the nodes the
Job's does (evaluated as the scheduler evaluates it), or an OpenKruise ImagePullJob valid against
OpenKruise's CRD (tests/fixtures/openkruise) naming the pool's nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from builder.k8s import prepull
from builder.k8s.pod import PodSpec
from builder.registry import Registry
from builder.vocabulary import CPU
from tests.support import mirror as hm
from tests.support.images import ROOT, cell_8_0_rc3, pipeline_labels
from tests.support.k8s import CLUSTER, POOL_910B, admitted, nodes, validate_k8s, validate_openkruise

CLI = [str(Path(sys.executable).with_name("ascend-build"))]
REPO = "team/pytorch"


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A registry (no auth) holding: "fits" (driver 24.1.RC3), "newer" (25.0.RC1), an unvalidated
    "candidate", and "twin": the CPU twin of "fits"."""
    if not Path(hm.REGISTRY_BIN).exists():
        pytest.skip("docker-registry missing")
    served = hm.serve(tmp_path_factory.mktemp("prepull") / "registry")
    reg = Registry(served.host)
    fits = cell_8_0_rc3()
    pushed = {tag: hm.push_image(reg, REPO, tag, labels, tag.encode()) for tag, labels in {
        "fits": pipeline_labels(fits),
        "newer": pipeline_labels(cell_8_0_rc3(torch_npu="2.4.0.post2", driver="25.0.RC1", id="newer")),
        "candidate": pipeline_labels(fits, validated=False),
        f"{fits.id}-cpu": pipeline_labels(fits, variant=CPU)}.items()}
    pushed["twin"] = pushed.pop(f"{fits.id}-cpu")
    yield f"{served.host}/{REPO}", pushed
    served.stop()


def cli(where, command, *args):
    done = subprocess.run(CLI + ["k8s", command, "--registry", where, "--cann", "8.0.RC3", *args],
                          capture_output=True, text=True, env=dict(os.environ), cwd=ROOT, timeout=300)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def pool_file(tmp_path, names) -> Path:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"kind": "List", "items": [n for n in nodes(CLUSTER) if n["metadata"]["name"] in names]}))
    return path


def test_the_daemonset_pulls_the_jobs_digest_on_exactly_the_nodes_the_job_admits(source, tmp_path):
    where, pushed = source
    for pool, image, expected in ((POOL_910B, "fits", ["npu-a", "npu-b", "npu-c"]),
                                  (pool_file(tmp_path, {"npu-a", "npu-c"}), "newer", ["npu-a", "npu-c"])):
        done = cli(where, "prepull", "--nodes", str(pool), "--name", "llama")
        assert done.returncode == 0, done.stderr
        ds = yaml.safe_load(done.stdout)
        validate_k8s(ds)
        assert (ds["apiVersion"], ds["kind"], ds["metadata"]["name"]) == ("apps/v1", "DaemonSet", "llama-prepull")
        pod = ds["spec"]["template"]["spec"]
        container, = pod["containers"]
        assert container["image"] == f"{where}@{pushed[image]}"
        assert container["command"] == ["sleep", "infinity"]  # not the entrypoint: nothing of the image runs
        assert not any(k.startswith("huawei.com/") for k in container["resources"]["requests"])  # takes no NPU
        assert admitted(pod, nodes(CLUSTER)) == expected
        job = cli(where, "job", "--nodes", str(pool), "--npus", "8", "--", "python", "t.py")
        assert job.returncode == 0, job.stderr
        assert yaml.safe_load(job.stdout)["spec"]["template"]["spec"]["affinity"] == pod["affinity"]
        assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
        assert "# ready per node: kubectl rollout status daemonset/llama-prepull" in done.stdout


def test_openkruise_image_pull_job_validates_against_its_crd_and_names_the_pool(source):
    where, pushed = source
    done = cli(where, "prepull", "--nodes", str(POOL_910B), "--kind", "openkruise")
    assert done.returncode == 0, done.stderr
    doc = yaml.safe_load(done.stdout)
    validate_openkruise(doc)
    assert doc["spec"]["image"] == f"{where}@{pushed['fits']}"
    assert doc["spec"]["selector"] == {"names": ["npu-a", "npu-b", "npu-c"]}
    # each named node is one the Job's affinity admits
    job = yaml.safe_load(cli(where, "job", "--nodes", str(POOL_910B), "--npus", "8", "--", "t").stdout)
    assert set(doc["spec"]["selector"]["names"]) <= set(admitted(job["spec"]["template"]["spec"], nodes(CLUSTER)))


def test_the_openkruise_schema_check_catches_a_misspelt_field():
    doc = prepull.image_pull_job("t", "r/p@sha256:" + "0" * 64, ["n"], {})
    validate_openkruise(doc)
    doc["spec"]["selecter"] = doc["spec"].pop("selector")
    with pytest.raises(jsonschema.ValidationError):
        validate_openkruise(doc)


def test_job_prepull_prints_the_job_then_the_daemonset_in_one_stream(source):
    where, pushed = source
    done = cli(where, "job", "--nodes", str(POOL_910B), "--npus", "8", "--prepull", "--name", "llama",
               "--", "python", "train.py")
    assert done.returncode == 0, done.stderr
    job, ds = list(yaml.safe_load_all(done.stdout))
    validate_k8s(job)
    validate_k8s(ds)
    assert (job["kind"], ds["kind"]) == ("Job", "DaemonSet")
    image = f"{where}@{pushed['fits']}"
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == ds["spec"]["template"]["spec"]["containers"][0]["image"] == image
    assert job["spec"]["template"]["spec"]["affinity"] == ds["spec"]["template"]["spec"]["affinity"]


def test_a_pool_where_nothing_fits_is_refused_as_k8s_job_refuses_it(source):
    where, _ = source
    args = ("--nodes", str(CLUSTER), "--chip", "910b")
    refused = cli(where, "prepull", *args)
    job = cli(where, "job", *args, "--npus", "8", "--", "python", "t.py")
    assert refused.returncode == job.returncode == 1 and refused.stdout == job.stdout == ""
    assert "  fits: driver 23.0.RC3 < required 24.1.RC3" in refused.stderr
    assert refused.stderr.replace("k8s prepull", "k8s job") == job.stderr


@pytest.mark.parametrize("args, message", [
    (["--kind", "openkruise"], "--kind openkruise names the nodes to pull on, and without --nodes there are none"),
    (["--kind", "deployment", "--nodes", str(POOL_910B)], "--kind 'deployment' is none of daemonset, openkruise"),
    (["--name", "Bad_Name", "--nodes", str(POOL_910B)], "--name 'Bad_Name' is not a Kubernetes name"),
])
def test_bad_options_are_clear_errors(source, args, message):
    done = cli(source[0], "prepull", *args)
    assert done.returncode == 2 and done.stdout == "" and message in done.stderr and "fix:" in done.stderr


def test_an_image_pull_job_lists_each_node_once_and_needs_one():
    doc = prepull.image_pull_job("t", "r@sha256:" + "0" * 64, ["a", "b", "a"], {})
    assert doc["spec"]["selector"]["names"] == ["a", "b"] and doc["spec"]["parallelism"] == 2
    from builder.errors import UserError
    with pytest.raises(UserError):
        prepull.image_pull_job("t", "r@sha256:" + "0" * 64, [], {})


def test_the_daemonset_takes_the_affinity_not_the_jobs_volumes_or_env():
    spec = PodSpec(image="r/p@sha256:" + "0" * 64, chip="910b", arch="aarch64", npus=8, command=("x",),
                   min_driver="24.1.RC3", chip_values=("910B3",), drivers=("24.1.RC3",))
    pod = prepull.daemonset("t", spec, {})["spec"]["template"]["spec"]
    assert set(pod) == {"affinity", "automountServiceAccountToken", "terminationGracePeriodSeconds", "containers"}
    assert pod["containers"][0]["securityContext"]["runAsNonRoot"] is True


def test_without_nodes_this_hosts_probe_decides_as_for_k8s_job(source, tmp_path):
    from tests.support.node import SMI_910B3, make_node

    where, pushed = source
    node = make_node(tmp_path / "node", arch="x86_64", smi=SMI_910B3)  # driver 24.1.rc3, 910B3
    done = cli(where, "prepull", "--root", str(node))
    job = cli(where, "job", "--root", str(node), "--npus", "2", "--", "python", "t.py")
    assert done.returncode == job.returncode == 0, done.stderr + job.stderr
    pod = yaml.safe_load(done.stdout)["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == f"{where}@{pushed['fits']}"
    assert pod["affinity"] == yaml.safe_load(job.stdout)["spec"]["template"]["spec"]["affinity"]
    assert admitted(pod, nodes(POOL_910B)) == ["npu-a", "npu-b"]  # npu-c's 910B4 is not this host's chip


def test_prepull_variant_cpu_pulls_the_twin_as_k8s_job_variant_cpu_prepull_does(source):
    """The same words choose the same image: `k8s prepull --variant cpu` prints the very DaemonSet
    `k8s job --variant cpu --prepull` prints after its Job, the twin's digest on any node of the arch."""
    where, pushed = source
    args = ("--nodes", str(POOL_910B), "--name", "llama", "--variant", "cpu")
    alone = cli(where, "prepull", *args)
    with_job = cli(where, "job", *args, "--prepull", "--", "python", "train.py")
    assert alone.returncode == with_job.returncode == 0, alone.stderr + with_job.stderr
    ds = yaml.safe_load(alone.stdout)
    job, job_ds = list(yaml.safe_load_all(with_job.stdout))
    assert ds == job_ds
    validate_k8s(ds)
    twin = f"{where}@{pushed['twin']}"
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == job["spec"]["template"]["spec"]["containers"][0]["image"] == twin
    pod = ds["spec"]["template"]["spec"]
    assert pod["affinity"] == job["spec"]["template"]["spec"]["affinity"]
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]
    assert "# the CPU twin (--variant cpu)" in alone.stdout
    npu = yaml.safe_load(cli(where, "prepull", "--nodes", str(POOL_910B), "--name", "llama").stdout)
    assert npu["spec"]["template"]["spec"]["containers"][0]["image"] == f"{where}@{pushed['fits']}" != twin


def test_prepull_refuses_a_variant_it_does_not_build(source):
    done = cli(source[0], "prepull", "--nodes", str(POOL_910B), "--variant", "gpu")
    assert done.returncode == 2 and done.stdout == ""
    assert "--variant 'gpu' is none of npu, cpu" in done.stderr and "fix: --variant npu" in done.stderr
