"""The driver guard for real: a twin built and sealed by `ascend-build image` (its smoke test runs
behind the guard, with no driver), then started through the real engine with a fixture node's
``driver/version.info`` bind-mounted where the device plugin and `ascend-build run` mount it:
below the image's minimum (refused, with the cause and fix), at it (the command runs).

The twin is the CANN-only cell's (Python and its locked closure, no torch: the cheapest image
the pipeline seals); it states its NPU image's minimum driver, 25.2.RC1 for CANN 9.1.0.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from tests.support.cann import installers_91
from tests.support.matrix import run_cli
from tests.support.node import DRIVER_INFO, make_node

WHEELHOUSE = Path("/opt/wheels")
CELL = {"cann": "9.1.0", "chip": "910b", "os": "debian12", "env": "venv", "arch": "x86_64", "python": "3.11"}
CELL_ID = "cann9.1.0-910b-debian12-py3.11-x86_64"
MINIMUM = "25.2.RC1"  # knowledge: CANN 9.1.0's minimum driver
VERSION_INFO = "/usr/local/Ascend/driver/version.info"
COMMAND = ["python", "-c", "import sys; print('the command ran', sys.argv[1:])", "x"]


@pytest.fixture(scope="module")
def twin(engine, base_image, tmp_path_factory):
    """The sealed twin's tag; removed afterwards."""
    tmp = tmp_path_factory.mktemp("guard")
    installers = tmp / "installers"
    sha = installers_91(installers)
    image = f"ascend-build-test/guard-{uuid.uuid4().hex[:8]}"
    (tmp / "m.yaml").write_text(yaml.safe_dump({"image": image, "cells": [
        dict(CELL, cann_source={"local": str(installers)}, sha256=sha)]}))
    common = ["-m", tmp / "m.yaml", "-o", tmp / "out"]
    locked = run_cli("lock", *common, "--wheelhouse", WHEELHOUSE, timeout=600)
    assert locked.returncode == 0, locked.stdout + locked.stderr
    tag = f"{image}:{CELL_ID}-cpu"
    try:
        built = run_cli("image", *common, "--variant", "cpu", "--base-image", base_image, "--wheelhouse", WHEELHOUSE,
                        "--state-dir", tmp / "state", "--json", timeout=1200)
        assert built.returncode == 0, built.stdout + built.stderr
        report = json.loads((tmp / "state" / "reports" / f"{CELL_ID}-cpu.json").read_text())
        assert [t["status"] for t in report["tiers"]] == ["passed"]  # the smoke test ran behind the guard
        yield tag
    finally:
        engine.remove(tag, force=True)


def node_with_driver(root: Path, version: str) -> Path:
    """A fixture node whose driver/version.info is the knowledge base's sample at ``version``."""
    make_node(root, driver=DRIVER_INFO.replace("24.1.rc3", version), devices=0)
    return root / VERSION_INFO.lstrip("/")


@pytest.mark.engine
@pytest.mark.index
def test_the_twin_states_its_requirement_and_starts_through_the_guard(engine, twin):
    config = engine.client.images.get(twin).attrs["Config"]
    assert config["Entrypoint"] == ["/usr/local/bin/ascend-driver-guard"]
    assert f"ASCEND_REQUIRE_DRIVER={MINIMUM}" in config["Env"]
    assert config["Labels"]["io.ascend-build.validated"]  # sealed


@pytest.mark.engine
@pytest.mark.index
def test_below_the_minimum_the_guard_refuses_with_cause_and_fix(engine, twin, tmp_path):
    old = node_with_driver(tmp_path / "node", "24.1.rc3")
    result = engine.run(twin, COMMAND, mounts=[(str(old), VERSION_INFO, True)], timeout=120)
    assert result.exit_code == 78
    assert "the command ran" not in result.stdout
    lines = result.stderr.splitlines()
    assert lines[0] == (f"ascend-driver-guard: refused: this image needs NPU driver {MINIMUM} or newer; "
                        f"{VERSION_INFO} says 24.1.rc3")
    assert lines[1].startswith("  cause: The host's NPU driver is older than this CANN needs.")
    assert lines[2].startswith("  fix: Upgrade the host driver") and f"to at least {MINIMUM}" in lines[2]
    assert lines[3] == "  to start it anyway (unsafe): ASCEND_DRIVER_GUARD=off-unsafe"
    # the one override, said loudly
    forced = engine.run(twin, COMMAND, mounts=[(str(old), VERSION_INFO, True)],
                        env={"ASCEND_DRIVER_GUARD": "off-unsafe"}, timeout=120)
    assert forced.exit_code == 0 and "the command ran ['x']" in forced.stdout
    assert "the NPU driver is NOT checked" in forced.stderr


@pytest.mark.engine
@pytest.mark.index
def test_at_the_minimum_the_command_runs_and_without_a_driver_it_runs_with_one_line(engine, twin, tmp_path):
    at = node_with_driver(tmp_path / "node", "25.2.rc1")
    result = engine.run(twin, COMMAND, mounts=[(str(at), VERSION_INFO, True)], timeout=120)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "the command ran ['x']\n", "")
    bare = engine.run(twin, COMMAND, timeout=120)
    assert bare.exit_code == 0 and bare.stdout == "the command ran ['x']\n"
    assert bare.stderr.splitlines() == [
        f"ascend-driver-guard: no NPU driver found (no {VERSION_INFO}): running without the driver check; "
        f"this image needs driver {MINIMUM} or newer on an NPU node"]


# --- the rendered Pod under podman kube play -----------------------------------------------------

def driver_tree(root: Path, version: str) -> Path:
    """A fixture node with every file the Pod mounts from the node, and its NPU device files."""
    node_with_driver(root, version)
    make_node(root, driver=None, firmware=None, install=None, cann_cfg=None, devices=1, arch=None)
    for folder in ("usr/local/Ascend/driver/lib64", "usr/local/dcmi", "usr/local/Ascend/driver/topo"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for file in ("usr/local/bin/npu-smi", "etc/hccn.conf"):
        (root / file).parent.mkdir(parents=True, exist_ok=True)
        (root / file).write_text("")
    return root


def pod_manifest(name: str, image: str, root: Path) -> dict:
    """The Pod of `k8s job`'s manifest (its template), with the node's paths under ``root``: the
    hostPaths it mounts, and the device files the device plugin would inject (no plugin here)."""
    from builder.devices import control_devices, davinci
    from builder.k8s.job import job
    from builder.k8s.pod import PodSpec

    spec = PodSpec(image=image, chip="910b", arch="x86_64", npus=1, command=tuple(COMMAND), min_driver=MINIMUM,
                   chip_values=("910B3",), drivers=())
    template = job(name, spec, {})["spec"]["template"]
    pod = template["spec"]
    container = pod["containers"][0]
    for volume in pod["volumes"]:
        if "hostPath" in volume:
            volume["hostPath"]["path"] = str(root) + volume["hostPath"]["path"]
    for i, device in enumerate([davinci(0), *control_devices(root)]):
        pod["volumes"].append({"name": f"device-{i}", "hostPath": {"path": str(root) + device, "type": "File"}})
        container["volumeMounts"].append({"name": f"device-{i}", "mountPath": device})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **template["metadata"]}, "spec": pod}


@pytest.mark.engine
@pytest.mark.index
def test_the_rendered_pod_runs_under_podman_kube_play_and_the_guard_holds(engine, twin, registry, podman, tmp_path):
    """The twin pushed to the loopback registry, its Pod (from k8s job's template) played for real by
    podman, pulling by digest (plain HTTP: --tls-verify=false), on a fixture node whose driver is at
    the image's minimum (the command runs) and below it (the guard refuses; the pod's log says why)."""
    from builder.k8s.manifest_yaml import render

    ref = f"{registry.host}/ascend-build-test/guard-pod:{uuid.uuid4().hex[:8]}"
    engine.tag(engine.image_id(twin), ref)
    try:
        digest = engine.push(ref, username=registry.username, password=registry.password)
    finally:
        engine.untag(ref)
    image = f"{registry.host}/ascend-build-test/guard-pod@{digest}"
    outcomes = {}
    for case, version in (("at", "25.2.rc1"), ("below", "24.1.rc3")):
        name = f"guard-{case}"
        manifest = tmp_path / f"{case}.yaml"
        manifest.write_text(render(pod_manifest(name, image, driver_tree(tmp_path / case, version))))
        played = podman("kube", "play", "--tls-verify=false", "--creds", f"{registry.username}:{registry.password}",
                        str(manifest), timeout=600)
        assert played.returncode == 0, played.stdout + played.stderr
        waited = podman("wait", f"{name}-main", timeout=300)
        logs = podman("logs", f"{name}-main")
        outcomes[case] = (waited.stdout.strip(), logs.stdout, logs.stderr)
        inspected = podman("container", "inspect", "--format", "{{.ImageName}}", f"{name}-main")
        assert inspected.stdout.strip() == image  # pulled and run by digest
        podman("kube", "down", str(manifest))
    code, out, err = outcomes["at"]
    assert (code, out, err) == ("0", "the command ran ['x']\n", "")
    code, out, err = outcomes["below"]
    assert code == "78" and "the command ran" not in out
    assert err.splitlines()[0] == (f"ascend-driver-guard: refused: this image needs NPU driver {MINIMUM} or newer; "
                                   f"{VERSION_INFO} says 24.1.rc3")
    assert "fix: Upgrade the host driver" in err
