"""`ascend-build image` killed at every phase, stopped by SIGTERM, run twice at once, and given
a full state folder: real CLI processes, real signals, the real engine, a real registry on loopback.

The cell is test_pipeline_e2e's CPU twin (the shipped Debian 12 cell, torch 2.13.0 from
/opt/wheels) tagged into a repository of this module alone, so BuildKit's cache makes each
build a few seconds. Each run is killed (SIGKILL to its whole process group, as a cancelled CI
job is) when its progress line for a phase appears on stderr: ``building``, ``smoke test``,
``sealing``, ``tagging``, ``pushing``, ``publishing the index``. The next run is the rerun of
the one before: it must get past the phase its predecessor died in.

What every kill must leave: no tag in the engine or the registry on an image that did not
pass (every tag of the repository names an image labelled validated), nothing of the run's
process group alive, no smoke container once the rerun started (`Engine.remove_orphans`),
and nothing that blocks the rerun.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Dict, List

import pytest

from builder import writes
from builder.registry import Registry
from tests.support.faults import CLI, CannotMount, Killable, put_stand_in_arm64, small_fs, unvalidated_tags
from tests.support.pipeline import CELL_ID, cli_env, drop_images, image_args, needs_build, write_matrix
from tests.support import listing

TOKEN = uuid.uuid4().hex[:10]
REPO = f"ascend-build-test/faults-{TOKEN}"
FAMILY = CELL_ID[: -len("-x86_64")]
PHASES = {  # phase -> the progress line it starts with
    "build": r"\] step \d+/\d+ ",
    "smoke": r"\] smoke test on cpu",
    "seal": r"\] sealing",
    "tag": r"\] tagging ",
    "push": r"\] pushing ",
}


@pytest.fixture(scope="module")
def images(engine):
    yield REPO
    drop_images(engine, REPO)


def _env(registry) -> Dict[str, str]:
    return cli_env(ASCEND_BUILD_REGISTRY_USER=registry.username, ASCEND_BUILD_REGISTRY_PASSWORD=registry.password)


def _client(registry) -> Registry:
    return Registry(registry.host, registry.username, registry.password)


def _registry_tags(registry, repository: str) -> List[str]:
    try:
        return _client(registry).tags(repository)
    except Exception:  # never pushed: the repository does not exist yet
        return []


def assert_only_validated_tags(engine, registry, repository: str) -> None:
    assert unvalidated_tags(engine, _client(registry), repository) == []


def _run(tmp: Path, state: Path, base_image: str, registry, *extra: str) -> Killable:
    matrix_file = write_matrix(tmp, REPO, arch="[x86_64, aarch64]")  # the index waits for the arm64 twin
    return Killable(image_args(matrix_file, state, base_image, "--variant", "cpu", "--push", registry.host,
                               *extra, as_json=True), tmp, _env(registry))


def _unsealed(engine) -> None:
    """Drop this module's images: an image sealed by an earlier test is reused as it is
    (`image_run.already_sealed`), never smoke-tested again, and these tests stop a smoke test.
    The BuildKit cache stays, so the rebuild takes seconds."""
    drop_images(engine, REPO)


def _orphans(engine) -> List:
    return listing.containers(engine, all=True, filters={"label": [
        "ascend-build.run=1", f"org.opencontainers.image.title={REPO}:{CELL_ID}-cpu"]})


@pytest.mark.engine
@needs_build
def test_image_killed_at_every_phase_tags_nothing_unvalidated_and_each_rerun_gets_further(
        engine, base_image, registry, images, tmp_path):
    state = tmp_path / "state"
    killed: Dict[str, float] = {}
    for phase, line in [*PHASES.items(), ("index", r"\] publishing the index ")]:
        if phase == "index":
            done = _run(tmp_path, state, base_image, registry).finish()
            assert done.returncode == 0, done.stderr[-3000:]
            assert "no index yet: aarch64" in done.stderr
            put_stand_in_arm64(_client(registry), REPO, FAMILY)
        run = _run(tmp_path, state, base_image, registry)
        assert run.wait_for(line), f"{phase}: the run ended before its line:\n{run.finish().stderr[-3000:]}"
        run.signal(signal.SIGKILL)
        killed[phase] = time.monotonic() - run.started
        assert run.finish(120).returncode == -signal.SIGKILL
        assert run.group_gone(), f"{phase}: a process of the killed run lives on"
        assert_only_validated_tags(engine, registry, REPO)
        # a kill may leave a staged file under its temporary name (the kill came mid-write), never a
        # prefix under a real name: every record, report and lock in the state folder reads whole
        for kept in state.rglob("*.json"):
            if not kept.name.endswith(writes.TMP_SUFFIX):
                json.loads(kept.read_text())
    final = _run(tmp_path, state, base_image, registry).finish()
    assert final.returncode == 0, final.stderr[-3000:]
    # ... and the rerun that writes those files again removes what the kills left staged
    assert not list(state.rglob(f"*{writes.TMP_SUFFIX}")), "a staged file of a killed run outlived the rerun"
    [twin, index] = json.loads(final.stdout)
    assert twin["status"] == "passed" and index["status"] == "passed", final.stdout
    pushed = f"{registry.host}/{REPO}:{CELL_ID}-cpu"
    assert twin["tags"] == [f"{REPO}:{CELL_ID}-cpu", pushed] and twin["digests"][pushed].startswith("sha256:")
    assert f"{FAMILY}-cpu" in _registry_tags(registry, REPO)
    assert_only_validated_tags(engine, registry, REPO)
    assert _orphans(engine) == [], "a smoke container of a killed run is left"
    # the seal's temporary tag a kill left names the killed run, and the rerun swept it
    candidate = json.loads((state / "reports" / f"{CELL_ID}-cpu.json").read_text())["candidate"]
    temp = f"ascend-build-candidate:{candidate.split(':')[-1][:20]}-"
    left = [ref for image in listing.images(engine, name="ascend-build-candidate") for ref in image.tags
            if ref.startswith(temp)]
    assert left == [], f"{left} left"
    assert set(killed) == {*PHASES, "index"}


@pytest.mark.engine
@needs_build
def test_sigterm_during_the_smoke_test_exits_143_saying_nothing_was_published(engine, base_image, registry,
                                                                              images, tmp_path):
    _unsealed(engine)
    run = _run(tmp_path, tmp_path / "state", base_image, registry)
    assert run.wait_for(PHASES["smoke"]), run.finish().stderr[-3000:]
    time.sleep(1)
    run.proc.send_signal(signal.SIGTERM)  # the CLI alone, as `docker stop` or a runner's first signal
    done = run.finish(120)
    assert done.returncode == 143, done.stderr[-3000:]
    last = done.stderr.rstrip().splitlines()[-1]
    assert last.startswith(f"interrupted by SIGTERM: published nothing; not finished: {CELL_ID} (cpu), no tag "
                           f'(stopped at "[{CELL_ID}-cpu] smoke test on cpu'), last
    assert "Traceback" not in done.stderr
    said = json.loads(done.stdout)  # --json: the interruption is JSON on stdout too, ending as stderr ends
    assert said["exit_code"] == 143 and said["error"].splitlines()[-1] == last
    assert _orphans(engine) == []  # the smoke container was removed by the run itself
    assert_only_validated_tags(engine, registry, REPO)


@pytest.mark.engine
@needs_build
def test_two_runs_of_one_image_on_one_state_folder_one_refused_naming_the_other(engine, base_image, registry,
                                                                               images, tmp_path):
    _unsealed(engine)
    state = tmp_path / "state"
    first = _run(tmp_path, state, base_image, registry)
    assert first.wait_for(r"building cpu image"), first.finish().stderr[-3000:]
    second = _run(tmp_path, state, base_image, registry).finish()
    done = first.finish()
    assert done.returncode == 0, done.stderr[-3000:]
    assert second.returncode == 1
    [refused] = json.loads(second.stdout)
    assert refused["status"] == "error"
    assert refused["message"].startswith(f"another ascend-build run is building {CELL_ID}-cpu with the state folder "
                                         f"{state} (pid {first.proc.pid}: "), refused["message"]
    assert json.loads(done.stdout)[0]["status"] == "passed"
    assert_only_validated_tags(engine, registry, REPO)


@pytest.mark.engine
@needs_build
def test_a_full_state_folder_fails_the_image_saying_so_and_tags_nothing(engine, base_image, registry, images,
                                                                        tmp_path):
    """The state folder on a 32 MiB tmpfs: the build context (the 190 MB torch wheel is copied
    there from another file system) would not fit, and the free space check refuses the image
    before its build. The engine's own data root is not filled here (it cannot be moved onto a
    small file system on this shared engine): tests/images/test_free_space.py checks it on a
    stand-in engine."""
    try:
        with small_fs("32m") as small:
            repo = f"{REPO}-full"
            matrix_file = write_matrix(tmp_path, repo)
            done = subprocess.run([str(CLI), *image_args(matrix_file, small / "state", base_image, "--variant", "cpu")],
                                  cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=900)
    except CannotMount as why:
        pytest.skip(f"cannot mount a tmpfs here: {why}")
    assert done.returncode == 1, done.stderr[-3000:]
    [outcome] = json.loads(done.stdout)
    assert outcome["status"] == "error" and outcome["tags"] == [], outcome
    assert (f"not enough free space for this build on the file system of the state folder {small}/state: "
            in outcome["message"]) and "nothing was built" in outcome["message"], outcome["message"]
    assert "Traceback" not in done.stderr
    assert not [t for img in listing.images(engine) for t in img.tags if repo in t]


@pytest.mark.engine
@needs_build
def test_two_runs_of_different_images_on_one_state_folder_both_reach_their_verdict(engine, base_image, registry,
                                                                                  images, tmp_path):
    """The twin and the cell's NPU image (on a base without CANN: it fails its static tiers by
    design) at once on one state folder: neither is refused, each reaches its own verdict,
    and both reports are whole."""
    _unsealed(engine)
    state = tmp_path / "state"
    twin = _run(tmp_path / "twin", state, base_image, registry)
    assert twin.wait_for(r"building cpu image"), twin.finish().stderr[-3000:]
    npu_matrix = write_matrix(tmp_path / "npu", f"{REPO}-npu", cann_source=f"{{image: {base_image}}}")
    npu = Killable(image_args(npu_matrix, state, base_image, "--variant", "npu"), tmp_path, cli_env()).finish()
    done = twin.finish()
    assert done.returncode == 0, done.stderr[-3000:]
    # the twin's outcome; an index follows it when an earlier test left an arm64 stand-in in the registry
    passed = json.loads(done.stdout)[0]
    [failed] = json.loads(npu.stdout)
    assert passed["status"] == "passed" and failed["status"] == "failed", (passed, failed["message"])
    assert "another ascend-build run" not in npu.stderr + npu.stdout
    for outcome in (passed, failed):
        assert json.loads(Path(outcome["report"]).read_text())["cell"] == CELL_ID
    assert not [t for img in listing.images(engine) for t in img.tags if f"{REPO}-npu" in t]
    assert_only_validated_tags(engine, registry, REPO)
