"""The benchmarks' cold builds on the real engine (bench_build.let_go, Engine.build's no_cache): a
benchmark lets go of its own images only, never of one a test (or anyone) has named, since a
deterministic build of the same content has the same image ID; a cold build runs its steps again
without emptying the cache others use."""

from __future__ import annotations

import uuid

import docker
import pytest

from benchmarks.bench_build import let_go

pytestmark = pytest.mark.engine


def test_let_go_removes_an_unnamed_image_and_keeps_one_another_process_has_named(engine, base_image, tmp_path):
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image}\nLABEL bench.cold.test={uuid.uuid4().hex}\n")
    image = engine.build(tmp_path, log_path=tmp_path / "build.log")
    named = f"bench-cold-test:{uuid.uuid4().hex[:8]}"
    engine.tag(image, named)  # as a test suite on the same engine names the image it built
    try:
        let_go(engine, [image])
        assert engine.client.images.get(image).tags == [named]  # kept: someone names it
    finally:
        engine.untag(named)
    let_go(engine, [image, image])
    with pytest.raises(docker.errors.ImageNotFound):  # gone now that nothing names it
        engine.client.images.get(image)


def test_a_no_cache_build_runs_its_steps_again_and_leaves_the_cache_to_others(engine, base_image, tmp_path):
    """A cold build without emptying the shared cache: the same Dockerfile built again is the cached
    image; with no_cache its RUN runs again (other bytes, another ID); the cache still serves after."""
    marker = uuid.uuid4().hex
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image}\nRUN echo {marker} && head -c 16 /dev/urandom > /noise\n")
    first = engine.build(tmp_path, log_path=tmp_path / "1.log")
    cached = engine.build(tmp_path, log_path=tmp_path / "2.log")
    cold = engine.build(tmp_path, log_path=tmp_path / "3.log", no_cache=True)
    try:
        assert cached == first
        assert cold != first and "--no-cache" in (tmp_path / "3.log").read_text().splitlines()[0]
        assert engine.build(tmp_path, log_path=tmp_path / "4.log") in (first, cold)  # the cache still answers
    finally:
        let_go(engine, [first, cold])
