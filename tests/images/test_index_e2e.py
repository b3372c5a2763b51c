"""One reference for both arches, end to end: an image index pushed to the real loopback registry.

The arch images carry exactly the labels the pipeline writes (plan.labels plus the
seal's). An NPU image validated on a device cannot exist on this machine, so these
are `fake_npu`; they are built FROM the amd64 and arm64 base images with no RUN step,
so the arm64 one needs no emulation and each push is a few KB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import List

import pytest

from builder.images import matrix, pipeline, plan, publish, render
from builder.node.pull import listing
from builder.errors import UserError
from builder.registry import DOCKER_LIST, Registry
from builder.vocabulary import static_tiers, tier_names
from tests.support.node import SMI_910B3, make_node

SHIPPED_TIERS = tier_names()

CLI = str(Path(sys.executable).with_name("ascend-build"))
ROOT = Path(__file__).resolve().parents[2]
BASES = {"x86_64": ("local/debian:12", "linux/amd64"), "aarch64": ("local/debian:12-arm64", "linux/arm64")}


def cell_of(arch: str, **over) -> matrix.Cell:
    x86 = next(c for c in matrix.load(ROOT / "matrix").cells if c.cann == "8.0.RC3" and c.arch == "x86_64")
    return replace(x86, arch=arch, id=x86.id[: -len("x86_64")] + arch, **over)


def labels_of(cell: matrix.Cell, validated: bool = True, tiers=SHIPPED_TIERS) -> dict:
    labels = dict(plan.labels(cell, "npu", render.content_hash(cell)))
    if validated:
        labels.update({"io.ascend-build.validated": "true", "io.ascend-build.validated-device": "npu",
                       "io.ascend-build.validated-tiers": ",".join(tiers)})
    return labels


@pytest.fixture
def arch_images(engine, registry, tmp_path):
    """push(arch, validated=True, **cell_over) -> digest of <family>-<arch> in a fresh repository."""
    if engine.architecture(BASES["aarch64"][0]) != "arm64":
        pytest.fail("no arm64 base image: run scripts/setup-engine.sh")
    repository = f"ascend-build-test/index-{uuid.uuid4().hex[:8]}"
    refs = []

    def push(arch: str, validated: bool = True, tiers=SHIPPED_TIERS, **over) -> str:
        cell = cell_of(arch, **over)
        folder = tmp_path / f"ctx-{arch}-{uuid.uuid4().hex[:6]}"
        folder.mkdir()
        base, platform = BASES[arch]
        (folder / "Dockerfile").write_text(f"FROM {base}\n")
        image = engine.build(folder, labels=labels_of(cell, validated, tiers), log_path=folder / "build.log",
                             platform=platform)
        ref = f"{registry.host}/{repository}:{cell.id}"
        engine.tag(image, ref)
        refs.append(ref)
        return engine.push(ref, username=registry.username, password=registry.password)

    yield repository, push
    for ref in refs:
        engine.untag(ref)


@pytest.fixture
def creds(registry, monkeypatch):
    env = {"ASCEND_BUILD_REGISTRY_USER": registry.username, "ASCEND_BUILD_REGISTRY_PASSWORD": registry.password}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def family() -> str:
    return cell_of("x86_64").id[: -len("-x86_64")]


@pytest.mark.engine
def test_an_index_of_two_validated_arches_resolves_per_arch_on_pull_fake_npu(arch_images, registry, engine, creds,
                                                                              tmp_path):
    repository, push = arch_images
    digests = {arch: push(arch) for arch in ("x86_64", "aarch64")}
    done = subprocess.run([CLI, "index", f"{registry.host}/{repository}:{family()}", "--json"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **creds})
    assert done.returncode == 0, done.stderr
    [out] = json.loads(done.stdout)
    assert out["status"] == "passed" and out["arches"] == digests
    index_ref = f"{registry.host}/{repository}:{family()}"
    index_digest = out["digests"][index_ref]

    reg = Registry(registry.host)
    index = reg.manifest(repository, family())
    assert index.digest == index_digest and index.media_type == DOCKER_LIST
    assert [(m["platform"]["architecture"], m["digest"]) for m in index.data["manifests"]] == [
        ("arm64", digests["aarch64"]), ("amd64", digests["x86_64"])]

    for arch in ("x86_64", "aarch64"):
        info = reg.inspect(repository, family(), arch)
        assert info and info.digest == digests[arch]
        by_tag = {i.tag: i.digest for i in listing(reg, repository, arch)}
        assert by_tag[family()] == digests[arch]
        node = make_node(tmp_path / f"node-{arch}", arch=arch, smi=SMI_910B3)
        pulled = subprocess.run([CLI, "pull", "--cann", "8.0.RC3", "--registry", f"{registry.host}/{repository}",
                                 "--root", str(node), "--json"], capture_output=True, text=True, timeout=300,
                                env={**os.environ, **creds})
        assert pulled.returncode == 0, pulled.stderr
        assert json.loads(pulled.stdout)["digest"] == digests[arch]
        engine.untag(json.loads(pulled.stdout)["ref"])

    # this x86_64 engine, given the index, takes the amd64 image
    by_index = f"{registry.host}/{repository}@{index_digest}"
    engine.pull(by_index, username=registry.username, password=registry.password)
    assert engine.architecture(by_index) == "amd64" and engine.labels(by_index)["io.ascend-build.arch"] == "x86_64"
    engine.untag(by_index)


@pytest.mark.engine
def test_a_cann_only_cell_is_indexed_on_the_tiers_it_owes_fake_npu(arch_images, registry, creds):
    """A CANN-only image (no torch) is sealed on the static tiers: it has nothing to import or
    train. Those are all it owes, so both arches index; the same labels with torch are refused."""
    repository, push = arch_images
    digests = {arch: push(arch, tiers=static_tiers(), torch="", torch_npu="") for arch in ("x86_64", "aarch64")}
    done = subprocess.run([CLI, "index", f"{registry.host}/{repository}:{family()}", "--json"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **creds})
    assert done.returncode == 0, done.stderr
    [out] = json.loads(done.stdout)
    assert out["status"] == "passed" and out["arches"] == digests

    push("x86_64", tiers=static_tiers())  # with torch: import, device, train and collective are owed
    refused = subprocess.run([CLI, "index", f"{registry.host}/{repository}:{family()}"],
                             capture_output=True, text=True, timeout=300, env={**os.environ, **creds})
    assert refused.returncode == 1 and "import, device, train, collective missing" in refused.stderr


@pytest.mark.engine
def test_an_index_is_refused_when_one_arch_did_not_pass_fake_npu(arch_images, registry, creds):
    repository, push = arch_images
    push("x86_64")
    push("aarch64", validated=False)  # e.g. a -candidate pushed under the release tag by hand
    done = subprocess.run([CLI, "index", f"{registry.host}/{repository}:{family()}"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **creds})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"no index for {repository}:{family()}: every arch must have passed" in done.stderr
    assert f"{family()}-aarch64: it did not pass every tier (not validated: versions" in done.stderr
    assert family() not in Registry(registry.host).tags(repository)


@pytest.mark.engine
def test_an_index_is_refused_when_an_arch_is_missing_or_differs_fake_npu(arch_images, registry, creds):
    repository, push = arch_images
    push("x86_64")
    reg = Registry(registry.host)
    with pytest.raises(UserError) as absent:
        publish.publish(reg, repository, family(), "npu")
    assert f"{repository}:{family()}-aarch64 is not in {registry.host} (it failed, or was never pushed)" in str(absent.value)
    push("aarch64", torch="2.3.1")
    with pytest.raises(UserError) as differs:
        publish.publish(reg, repository, family(), "npu")
    assert f"{family()}-x86_64: io.ascend-build.torch is '2.4.0', {family()}-aarch64 has '2.3.1'" in str(differs.value)
    assert family() not in reg.tags(repository)


@pytest.mark.engine
def test_image_push_indexes_a_cell_once_its_last_arch_is_in_the_registry_fake_npu(arch_images, registry, creds):
    """`image --push` calls `indexes` with its outcomes; the other arch may come from another run."""
    repository, push = arch_images
    said: List[str] = []
    x86 = pipeline.Outcome(cell_of("x86_64").id, "npu", status="passed")
    x86.digests = {f"{registry.host}/{repository}:{cell_of('x86_64').id}": push("x86_64")}
    assert pipeline.indexes([x86], pipeline.Options(push=registry.host), said.append) == []
    assert said == [f"[{family()}] no index yet: aarch64 not in {registry.host}/{repository} "
                    "(no matrix read: every arch)"]

    arm_digest = push("aarch64")  # pushed by another run (e.g. the arm runner)
    [index] = pipeline.indexes([x86], pipeline.Options(push=registry.host), said.append)
    assert index.status == "passed", index.message
    assert index.arches == {"x86_64": list(x86.digests.values())[0], "aarch64": arm_digest}
    assert index.tags == [f"{registry.host}/{repository}:{family()}"]


@pytest.mark.engine
def test_index_tells_a_pushed_stand_in_twin_from_a_missing_one_under_its_own_title(engine, registry, creds, tmp_path):
    """The aarch64 twin was built on a stand-in OS (`--twin-os`), so it is pushed as
    <family>-aarch64-cpu-on-debian11, never as <family>-aarch64-cpu: the index is refused
    naming it as a stand-in, not as "failed, or was never pushed"; the table is the index's."""
    from builder.vocabulary import CPU, required_tiers, stand_in_tag

    repository = f"ascend-build-test/index-{uuid.uuid4().hex[:8]}"
    refs = []
    for arch, stand_in in (("x86_64", ""), ("aarch64", "built on debian11 as the OS of the cell cannot be had here")):
        cell = cell_of(arch)
        labels = dict(plan.labels(cell, CPU, render.content_hash(cell), stand_in=stand_in))
        labels.update({"io.ascend-build.validated": "true", "io.ascend-build.validated-device": "cpu",
                       "io.ascend-build.validated-tiers": ",".join(required_tiers(CPU, False))})
        folder = tmp_path / arch
        folder.mkdir()
        base, platform = BASES[arch]
        (folder / "Dockerfile").write_text(f"FROM {base}\n")
        image = engine.build(folder, labels=labels, log_path=folder / "build.log", platform=platform)
        tag = stand_in_tag(cell.id, "debian11") if stand_in else f"{cell.id}-cpu"
        refs.append(f"{registry.host}/{repository}:{tag}")
        engine.tag(image, refs[-1])
        engine.push(refs[-1], username=registry.username, password=registry.password)
    try:
        done = subprocess.run([CLI, "index", f"{registry.host}/{repository}:{family()}-cpu"], capture_output=True,
                              text=True, timeout=300, env={**os.environ, **creds, "COLUMNS": "200"})
    finally:
        for ref in refs:
            engine.untag(ref)
    assert done.returncode == 1
    assert (f"{repository}:{family()}-aarch64-cpu is not in {registry.host}: only the stand-in "
            f"{repository}:{family()}-aarch64-cpu-on-debian11 is (a twin built on another OS than the cell's, "
            "labelled as one), and a stand-in never enters the cell's index") in done.stderr
    assert "never pushed" not in done.stderr
    title, header = done.stdout.splitlines()[:2][0].strip(), done.stdout.splitlines()[2]
    assert title == "ascend-build index"
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == ["index", "status", "arches", "digest"]
