"""aarch64 under emulation, end to end: the mission's own closure (CANN 7.0.RC1, torch 2.1.0,
Python 3.9) as an arm64 CPU twin, built and smoke-tested under qemu on an x86_64 host,
sealed, tagged, pushed to the loopback registry and pulled back by digest.

The cell's own base (Ubuntu 22.04 with conda) cannot be had here (no conda channel is
reachable), so the twin runs the cell's locked closure on Debian 11's Python 3.9: a
stand-in, which its tag (`-cpu-on-debian11`), labels and report say. The arm64 base image
is made by scripts/setup-engine.sh (debootstrap --arch=arm64, qemu-aarch64 with flag F).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from builder import vocabulary
from tests.support import locks
from tests.support import listing

CELL_ID = "cann7.0.rc1-910b-ubuntu22.04-py3.9-torch_npu2.1.0rc1-aarch64"
ARM64_BASE = "local/debian:11-arm64"
CLI = Path(sys.executable).with_name("ascend-build")
REPO_ROOT = Path(__file__).resolve().parents[2]
# The shipped cell, keys as in matrix/default.yaml (its lock is dockerfiles/<CELL_ID>/requirements.lock).
CELL = ["os: ubuntu22.04", "env: conda", "cann_source: installer", "cann: 7.0.RC1", "chip: 910b", "arch: aarch64",
        'python: "3.9"', "torch: 2.1.0", "torch_npu: 2.1.0rc1", "min_driver: 23.0.RC3"]


def arm64_ready(engine) -> str:
    if platform.machine() != "x86_64":
        return "runs on an x86_64 host (the arm64 build is native elsewhere)"
    entry = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")
    if not entry.is_file() or "flags: " not in entry.read_text() or "F" not in entry.read_text().split("flags: ")[1][:4]:
        return "qemu-aarch64 is not registered with flag F: run scripts/setup-engine.sh"
    if engine.architecture(ARM64_BASE) != "arm64":
        return f"no arm64 base image {ARM64_BASE}: run scripts/setup-engine.sh"
    return ""


@pytest.mark.engine
def test_the_mission_closure_as_an_arm64_twin_under_qemu(engine, registry, tmp_path):
    missing = arm64_ready(engine)
    if missing:
        pytest.fail(missing)  # setup-engine.sh makes all of it on the machines CI runs on
    repo = f"ascend-build-test/arm64-{uuid.uuid4().hex[:8]}"
    (tmp_path / "matrix.yaml").write_text("\n".join([f"image: {repo}", "cells:", "  - " + CELL[0]]
                                                     + ["    " + line for line in CELL[1:]]) + "\n")
    args = [str(CLI), "image", "--matrix", str(tmp_path / "matrix.yaml"), "--cell", CELL_ID, "--arch", "aarch64",
            "--twin-os", "debian11", "--base-image", ARM64_BASE, "--out", str(REPO_ROOT / "dockerfiles"),
            "--state-dir", str(tmp_path / "state"), "--push", registry.host, "--json", "-q"]
    env = {"PATH": "/usr/bin:/bin", "ASCEND_BUILD_REGISTRY_USER": registry.username,
           "ASCEND_BUILD_REGISTRY_PASSWORD": registry.password}
    result = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=2400,
                            env={**os.environ, **env})
    try:
        [out] = json.loads(result.stdout)
        assert out["status"] == "passed", f"{out['message']}\n{result.stderr[-3000:]}"
        assert {t["name"]: t["status"] for t in out["tiers"]} == {name: "passed" for name in vocabulary.tier_names()}
        release = f"{repo}:{CELL_ID}-cpu-on-debian11"
        pushed = f"{registry.host}/{release}"
        assert out["tags"] == [release, pushed] and set(out["digests"]) == {pushed}
        assert engine.image_id(f"{repo}:{CELL_ID}-cpu") is None  # never the cell's own twin tag

        labels = engine.labels(release)
        assert engine.architecture(release) == "arm64"
        assert labels[vocabulary.Label.ARCH] == "aarch64" and labels[vocabulary.Label.OS] == "debian11"
        assert labels[vocabulary.Label.VALIDATED_UNDER] == "qemu-user: aarch64 on an x86_64 host"
        assert labels[vocabulary.Label.STAND_IN].startswith("debian11 stands in for ubuntu22.04 with conda")
        assert labels[vocabulary.Label.LOCK] == "ok"
        report = json.loads(Path(out["report"]).read_text())
        assert report["emulated"] and report["stand_in"] and report["lock"] == "ok"
        assert report["base_image"]["id"] == engine.image_id(ARM64_BASE)

        # the closure is the cell's lock (minus torch_npu), in an arm64 userland
        locked = {e.name: e.version for e in locks.read(REPO_ROOT / "dockerfiles" / CELL_ID).without("torch-npu")}
        versions_tier = next(t for t in out["tiers"] if t["name"] == "versions")
        installed = dict(versions_tier["details"]["distributions"])
        assert installed.pop("pkg-resources", "0.0.0") == "0.0.0"  # Debian 11's venv leaves this record, no package
        assert installed == locked
        assert locked["numpy"].startswith("1.") and locked["torch"] == "2.1.0"
        train = next(t for t in out["tiers"] if t["name"] == "train")
        assert train["details"]["steps"] == 4 and train["details"]["losses"][-1] <= 0.7 * train["details"]["losses"][0]
        assert engine.run(release, ["uname", "-m"], timeout=120).stdout.strip() == "aarch64"

        # pushed and pulled back by digest: the same labels
        digest = out["digests"][pushed]
        engine.untag(pushed)
        ref = f"{registry.host}/{repo}@{digest}"
        engine.pull(ref, username=registry.username, password=registry.password)
        assert engine.labels(ref) == labels and engine.architecture(ref) == "arm64"
    finally:
        for img in listing.images(engine):
            for ref in img.tags + img.digests:
                if repo in ref:
                    try:
                        engine.untag(ref)
                    except Exception:  # best effort: the assertions above matter more
                        pass


@pytest.mark.engine
def test_an_arm64_npu_image_without_cann_fails_its_libraries_tier_and_gets_no_tag(engine, tmp_path):
    """The link check on the arch the clusters use: torch_npu 2.1.0rc1 for aarch64 (the mission
    cell's closure, on Debian 11 since conda cannot be had here), CANN "from" a base that has
    none. No NPU here: the static tiers run, and the libraries tier must name CANN's libraries."""
    missing = arm64_ready(engine)
    if missing:
        pytest.fail(missing)
    repo = f"ascend-build-test/arm64-npu-{uuid.uuid4().hex[:8]}"
    cell = ["cann: 7.0.RC1", "chip: 910b", "arch: aarch64", "os: debian11", "env: venv", 'python: "3.9"',
            "torch: 2.1.0", "torch_npu: 2.1.0rc1", "driver: 23.0.RC3", f"cann_source: {{image: {ARM64_BASE}}}"]
    (tmp_path / "matrix.yaml").write_text("\n".join([f"image: {repo}", "cells:", "  - " + cell[0]]
                                                     + ["    " + line for line in cell[1:]]) + "\n")
    cell_id = "cann7.0.rc1-910b-debian11-py3.9-torch_npu2.1.0rc1-aarch64"
    common = ["--matrix", str(tmp_path / "matrix.yaml"), "--out", str(tmp_path / "dockerfiles")]
    locked = subprocess.run([str(CLI), "lock", *common], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert locked.returncode == 0, locked.stderr
    result = subprocess.run([str(CLI), "image", *common, "--cell", cell_id, "--arch", "aarch64", "--variant", "npu",
                             "--state-dir", str(tmp_path / "state"), "--json", "-q"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=2400)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    [out] = json.loads(result.stdout)
    assert (out["variant"], out["status"], out["tags"]) == ("npu", "failed", []), out["message"]
    tiers = {t["name"]: t for t in out["tiers"]}
    assert list(tiers) == list(vocabulary.static_tiers())
    libraries = tiers["libraries"]
    assert libraries["status"] == "failed" and libraries["details"]["package"] == "torch_npu"
    for lib in ("libascendcl.so", "libhccl.so"):
        assert lib in libraries["details"]["missing"] and lib in libraries["summary"], libraries["summary"]
    assert "CANN 7.0.RC1 declared but no CANN version file found" in tiers["versions"]["summary"]
    assert any(p.endswith("/aarch64-linux/ascend_toolkit_install.info")
               for p in tiers["versions"]["details"]["cann_paths_looked_at"])
    assert engine.architecture(out["image_id"]) == "arm64"
    assert json.loads(Path(out["report"]).read_text())["emulated"] == "qemu-user: aarch64 on an x86_64 host"
    for suffix in ("", "-candidate"):
        assert engine.image_id(f"{repo}:{cell_id}{suffix}") is None
    assert engine.remove_if_unnamed(out["image_id"])  # the failed image is kept, unnamed, for a look: drop it
