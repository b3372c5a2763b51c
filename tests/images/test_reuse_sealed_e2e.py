"""Pushing means no rebuild (issue 26): `image --push` on an image already sealed under its
release tag (same cell, variant and content hash, passed) tags, pushes and attests that very
image without building or smoke-testing it again; and a seal that replaces an earlier one
under the same tag never leaves the earlier one unnamed (dangling, 1-2 GB each).

The candidate is a tiny real image carrying the cell's own labels (a real build of the cell
takes minutes and is covered by test_pipeline_e2e); seal, tag, push and the reuse decision
run on the real engine and a real registry on loopback.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import List

import pytest

from builder.images import prepare as jobs
from builder.images import image_run, matrix, pipeline
from builder.vocabulary import CPU, Label
from tests.support.matrix import REPO, SHIPPED_MATRIX
from tests.support import listing

pytestmark = pytest.mark.engine

DEMO = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
# Each test's images under a repository of its own: another test (another xdist worker, another
# run of the suite on the same engine) that untags what it made never takes away this one's.
REPOSITORY = "ascend-build-test-reuse-{token}/pytorch"


class NoBuild:
    """The real engine, except that building or running a container fails the test: the
    reuse must do neither."""

    def __init__(self, engine):
        self._engine = engine

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def build(self, *args, **kwargs):
        raise AssertionError("built again")

    def run(self, *args, **kwargs):
        raise AssertionError("smoke-tested again")


def passed_report(job: jobs.Job, seconds: float) -> dict:
    return {"schema": 1, "passed": True, "exit_code": 0, "device": "cpu", "host": {}, "cell": job.plan.cell_id,
            "tiers": [{"name": name, "status": "passed", "seconds": seconds} for name in job.smoke.tiers]}


@pytest.fixture
def sealed_setup(engine, base_image, tmp_path):
    repository = REPOSITORY.format(token=uuid.uuid4().hex[:12])
    cell = replace(next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == DEMO), image=repository)
    options = jobs.Options(variants=(CPU,), state_dir=tmp_path / "state", locks_dir=REPO / "dockerfiles",
                           base_image=base_image)  # on this engine: a build that starts passes its preflight
    job = jobs.prepare(cell, CPU, options)
    context = tmp_path / "candidate"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {base_image}\nRUN echo {tmp_path.name} > /candidate\n")
    made: List[str] = []

    def candidate() -> str:
        image_id = engine.build(context, labels=dict(job.image.labels), log_path=tmp_path / "candidate.log")
        made.append(image_id)
        return image_id

    yield cell, options, job, candidate, made
    for ref in [t for img in listing.images(engine) for t in img.tags if repository in t]:
        engine.untag(ref)
    for image_id in made:
        engine.remove_if_unnamed(image_id)


def seal_as_release(engine, job, options, candidate_id: str, seconds: float) -> image_run.Outcome:
    run = image_run.ImageRun.of(job, options, engine, lambda line: None, image_run.Outcome(job.plan.cell_id, CPU, image_id=candidate_id))
    run.report = passed_report(job, seconds)
    return image_run.conclude(run)


def dangling(engine) -> List[str]:
    return [img.id for img in listing.images(engine, filters={"dangling": True})]


def test_a_second_seal_under_the_same_tag_leaves_the_first_neither_named_nor_dangling(engine, sealed_setup):
    _, options, job, candidate, _ = sealed_setup
    first = seal_as_release(engine, job, options, candidate(), 1.0)
    assert first.status == "passed" and engine.image_id(job.ref) == first.image_id
    second = seal_as_release(engine, job, options, candidate(), 2.0)
    assert second.image_id != first.image_id and engine.image_id(job.ref) == second.image_id
    assert first.image_id not in dangling(engine)  # the shared engine's other dangling images are not ours
    assert engine.image_id(first.image_id) is None  # removed, not left unnamed


def test_push_of_an_image_sealed_already_pushes_it_without_building_or_testing_it(engine, registry, sealed_setup,
                                                                                  monkeypatch):
    cell, options, job, candidate, _ = sealed_setup
    sealed = seal_as_release(engine, job, options, candidate(), 1.0)
    monkeypatch.setenv("ASCEND_BUILD_REGISTRY_USER", registry.username)
    monkeypatch.setenv("ASCEND_BUILD_REGISTRY_PASSWORD", registry.password)
    said: List[str] = []
    out = image_run.build_one(cell, CPU, replace(options, push=registry.host), NoBuild(engine), said.append)  # type: ignore[arg-type]  # an Engine stand-in that refuses to build
    pushed = f"{registry.host}/{job.ref}"
    assert (out.status, out.image_id, out.tags) == ("passed", sealed.image_id, [job.ref, pushed]), out.message
    assert (out.build_seconds, out.smoke_seconds) == (0.0, 0.0)
    assert out.digests[pushed] in {d.split("@", 1)[1] for d in engine.repo_digests(pushed)}
    assert [t["name"] for t in out.tiers] == list(job.smoke.tiers)
    assert any("is this image sealed already" in line and "not built or smoke-tested again" in line for line in said)


def test_an_image_of_other_inputs_under_the_tag_is_built_again(engine, sealed_setup):
    cell, options, job, candidate, _ = sealed_setup
    seal_as_release(engine, job, options, candidate(), 1.0)
    other = replace(cell, env_vars=(("TEAM", "x"),))  # other inputs: another content hash, the same tag
    with pytest.raises(AssertionError, match="built again"):
        image_run.build_one(other, CPU, options, NoBuild(engine), lambda line: None)  # type: ignore[arg-type]  # an Engine stand-in that refuses to build


def test_a_sealed_image_whose_report_is_gone_is_built_again(engine, base_image, sealed_setup, tmp_path):
    cell, options, job, _, made = sealed_setup
    context = tmp_path / "no-report"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {base_image}\n")
    labels = {**dict(job.image.labels), Label.VALIDATED: "true"}  # labelled as sealed, but no report inside
    made.append(engine.build(context, labels=labels, log_path=tmp_path / "no-report.log"))
    engine.tag(made[-1], job.ref)
    assert image_run.already_sealed(job, engine) is None
    with pytest.raises(AssertionError, match="built again"):
        image_run.build_one(cell, CPU, options, NoBuild(engine), lambda line: None)  # type: ignore[arg-type]  # an Engine stand-in that refuses to build


def test_the_report_reused_is_the_one_the_sealed_image_carries(engine, sealed_setup):
    _, options, job, candidate, _ = sealed_setup
    seal_as_release(engine, job, options, candidate(), 7.5)
    report = image_run.already_sealed(job, engine)
    assert report is not None and [t["seconds"] for t in report["tiers"]] == [7.5] * len(job.smoke.tiers)
    assert json.loads(Path(options.state_dir / "reports" / f"{job.name}.json").read_text()) == report


def test_an_sbom_that_cannot_be_kept_fails_the_image_before_it_is_pushed(engine, registry, sealed_setup, monkeypatch):
    """The SBOM is written before tagging and pushing: a state folder that cannot hold it fails
    the image with "nothing was tagged" and that holds (no push of an image then left unattested)."""
    cell, options, job, candidate, _ = sealed_setup
    seal_as_release(engine, job, options, candidate(), 1.0)
    monkeypatch.setenv("ASCEND_BUILD_REGISTRY_USER", registry.username)
    monkeypatch.setenv("ASCEND_BUILD_REGISTRY_PASSWORD", registry.password)
    (options.state_dir / "sbom").write_text("a file where the sbom folder goes\n")
    [out] = pipeline.run([cell], replace(options, push=registry.host), NoBuild(engine), lambda line: None)  # type: ignore[arg-type]  # an Engine stand-in that refuses to build
    assert out.status == "error" and "nothing was tagged" in out.message, out.message
    assert engine.image_id(f"{registry.host}/{job.ref}") is None  # neither tagged for the registry nor pushed
