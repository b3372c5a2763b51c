"""`k8s prepull`'s DaemonSet pod run for real: an image with the pipeline's labels on the local base
(Debian: its own `sleep`) pushed to the loopback registry, the DaemonSet printed by the CLI, its pod
template played by `podman kube play` (no Kubernetes here, and podman 4.3 plays no DaemonSet: the
template becomes a Pod, as the Job's is in tests/node/test_driver_guard_e2e.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from builder.k8s.manifest_yaml import render
from tests.support.images import ROOT, cell_8_0_rc3, labelled_image, pipeline_labels
from tests.support.k8s import POOL_910B

CLI = [str(Path(sys.executable).with_name("ascend-build"))]
pytestmark = pytest.mark.engine


@pytest.fixture
def pushed(registry, engine, base_image, tmp_path):
    """(registry/repository, digest) of a validated-labelled image on the loopback registry."""
    repository = f"ascend-build-test/prepull-{uuid.uuid4().hex[:8]}"
    image = labelled_image(engine, base_image, tmp_path, pipeline_labels(cell_8_0_rc3()))
    ref = f"{registry.host}/{repository}:fits"
    engine.tag(image, ref)
    try:
        digest = engine.push(ref, username=registry.username, password=registry.password)
    finally:
        engine.untag(ref)
    yield f"{registry.host}/{repository}", digest
    engine.remove(image, force=True)


def test_the_daemonsets_pod_pulls_the_digest_and_becomes_ready_running_nothing_of_the_image(
        pushed, registry, podman, tmp_path):
    where, digest = pushed
    env = {**os.environ, "ASCEND_BUILD_REGISTRY_USER": registry.username,
           "ASCEND_BUILD_REGISTRY_PASSWORD": registry.password}
    done = subprocess.run(CLI + ["k8s", "prepull", "--registry", where, "--cann", "8.0.RC3", "--nodes", str(POOL_910B),
                                 "--name", "llama"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    ds = yaml.safe_load(done.stdout)
    template = ds["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "llama-prepull", **template["metadata"]},
           "spec": template["spec"]}
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(render(pod))
    image = f"{where}@{digest}"
    assert podman("image", "exists", image).returncode == 1  # not on this "node" before
    played = podman("kube", "play", "--tls-verify=false", "--creds", f"{registry.username}:{registry.password}",
                    str(manifest), timeout=600)
    assert played.returncode == 0, played.stdout + played.stderr
    try:
        container = "llama-prepull-prepull"
        state = podman("container", "inspect", "--format",
                       "{{.State.Status}} {{.State.Running}} {{.ImageName}} {{.Config.User}} {{.RestartCount}}", container)
        # Ready: the container runs (a pod with no readinessProbe is Ready once its containers run)
        assert state.stdout.split() == ["running", "true", image, "65534", "0"], state.stdout + state.stderr
        assert podman("image", "exists", image).returncode == 0  # the node holds the digest
        top = podman("top", container, "args")
        assert [line.strip() for line in top.stdout.splitlines()[1:]] == ["sleep infinity"], top.stdout  # nothing else runs
        logs = podman("logs", container)
        assert (logs.stdout, logs.stderr) == ("", "")  # the driver guard did not run: it writes to stderr
    finally:
        podman("kube", "down", str(manifest))
