"""The free space a build needs is checked before its first step (issue 41, item 7): the state
folder's file system and the engine's data root, each a small tmpfs here (mounted as root; the
tests skip, saying so, where that is not allowed). The engine is the stand-in on loopback
(`tests/support/fake_engine.py`), answering ``docker info`` with a data root on this host; the
real docker SDK talks to it. A context file's size is that of a sparse file: counted, never written."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, List, Optional

import docker
import pytest
from tests.support.fake_engine import FakeEngine
from tests.support.faults import CannotMount, small_fs
from tests.support.matrix import SHIPPED_DOCKERFILES, SHIPPED_MATRIX

from builder.engine import Engine
from builder.errors import UserError
from builder.images import free_space, matrix, pipeline
from builder.images.prepare import Options, prepare
from builder.vocabulary import CPU

CELL = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
GiB = 1 << 30


@pytest.fixture
def fake() -> Iterator[FakeEngine]:
    stand_in = FakeEngine()
    yield stand_in
    stand_in.stop()


def _engine(fake: FakeEngine) -> Engine:
    return Engine(docker.DockerClient(base_url=fake.url, timeout=30), fake.url)


def _mounted(stack, size: str) -> Path:
    try:
        return stack.enter_context(small_fs(size))
    except CannotMount as why:
        pytest.skip(f"cannot mount a tmpfs here: {why}")


def _cell():
    return next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == CELL)


def _options(state: Path, wheelhouse: Optional[Path] = None) -> Options:
    return Options(variants=(CPU,), state_dir=state, locks_dir=SHIPPED_DOCKERFILES, allow_incomplete_lock=True,
                   wheelhouse=wheelhouse)


def _wheelhouse(folder: Path, size: int) -> Path:
    """A wheelhouse holding one wheel of ``size`` bytes, sparse: it takes no space."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "big-1.0-py3-none-any.whl", "wb") as fh:
        fh.truncate(size)
    return folder


def test_a_state_folder_without_room_refuses_the_image_before_its_build_and_tags_nothing(fake, monkeypatch, tmp_path):
    import contextlib

    built: List[tuple] = []
    monkeypatch.setattr(Engine, "build", lambda self, *args, **kwargs: built.append(args))  # a build is a failure here
    fake.data_root = str(tmp_path)  # the engine has room: only the state folder is short
    with contextlib.ExitStack() as stack:
        small = _mounted(stack, "1m")
        state = small / "state"
        lines: List[str] = []
        [out] = pipeline.run([_cell()], _options(state), _engine(fake), lines.append)
        leftover = sorted(p.name for p in state.iterdir())
    assert out.status == "error" and not out.tags and not built
    assert out.message.startswith(f"[{CELL}-cpu] not enough free space for this build on the file system of "
                                  f"the state folder {state}: "), out.message
    assert f"about {free_space.size(free_space.STATE_FLOOR)} needed" in out.message
    assert "nothing was built" in out.message and "--state-dir" in out.message
    assert not [r for r in fake.requests if r.startswith("POST")]  # no container, no tag, no push
    assert leftover == ["claims"]  # no log, context or report begun
    assert not [line for line in lines if "not checked" in line]  # the engine was checked, and had room


def test_an_engine_data_root_without_room_refuses_the_build(fake, tmp_path):
    import contextlib

    with contextlib.ExitStack() as stack:
        root = _mounted(stack, "64m")
        fake.data_root = str(root)
        options = _options(tmp_path / "state")
        job = prepare(_cell(), CPU, options)
        with pytest.raises(UserError) as refused:
            free_space.check(job, options, _engine(fake), lambda line: None)
    assert refused.value.message.startswith(
        f"[{job.name}] not enough free space for this build on the file system of the engine's data root {root}: "
        "64.0 MiB free, about 2.0 GiB needed"), refused.value.message
    assert "dockerd --data-root" in refused.value.fix and refused.value.exit_code == 1


def test_each_context_file_counts_four_times_in_the_engine_data_root(fake, tmp_path):
    """A data root of 12 GiB (a tmpfs holds only what is written into it): a 2 GiB wheel fits
    (2 GiB + 4 x 2 GiB), a 3 GiB one does not (2 GiB + 4 x 3 GiB)."""
    import contextlib

    with contextlib.ExitStack() as stack:
        root = _mounted(stack, "12g")
        fake.data_root = str(root)
        engine = _engine(fake)
        fits = _options(tmp_path / "state", _wheelhouse(tmp_path / "two", 2 * GiB))
        free_space.check(prepare(_cell(), CPU, fits), fits, engine, lambda line: None)
        too_big = _options(tmp_path / "state", _wheelhouse(tmp_path / "three", 3 * GiB))
        with pytest.raises(UserError) as refused:
            free_space.check(prepare(_cell(), CPU, too_big), too_big, engine, lambda line: None)
    assert "about 14.0 GiB needed" in refused.value.message
    assert f"{free_space.CONTEXT_FACTOR} x 3.0 GiB for 1 context file(s)" in refused.value.message


def test_a_context_file_on_another_file_system_counts_in_the_state_folder_and_a_linked_one_does_not(fake, tmp_path):
    """The context links a file on the state folder's file system and copies one from elsewhere."""
    import contextlib

    fake.data_root = str(tmp_path)
    engine = _engine(fake)
    with contextlib.ExitStack() as stack:
        small = _mounted(stack, "64m")
        elsewhere = _options(small / "state", _wheelhouse(tmp_path / "wheels", 100 << 20))
        with pytest.raises(UserError) as refused:
            free_space.check(prepare(_cell(), CPU, elsewhere), elsewhere, engine, lambda line: None)
        beside = _options(small / "state", _wheelhouse(small / "wheels", 40 << 20))  # sparse: fits on 64 MiB
        free_space.check(prepare(_cell(), CPU, beside), beside, engine, lambda line: None)
    assert "100.0 MiB of context files copied from other file systems" in refused.value.message
    assert f"the state folder {small / 'state'}: 64.0 MiB free" in refused.value.message


def test_state_folder_and_data_root_on_one_file_system_add_up(fake, tmp_path):
    import contextlib

    with contextlib.ExitStack() as stack:
        shared = _mounted(stack, f"{(2 << 10) + 8}m")  # the engine's floor and 8 MiB: less than the state's 16 MiB more
        fake.data_root = str(shared)
        options = _options(shared / "state")
        job = prepare(_cell(), CPU, options)
        with pytest.raises(UserError) as refused:
            free_space.check(job, options, _engine(fake), lambda line: None)
        fake.data_root = str(tmp_path)  # apart: each fits
        free_space.check(job, options, _engine(fake), lambda line: None)
    assert f"the state folder {shared / 'state'} and the engine's data root {shared}: " in refused.value.message


def test_an_engine_on_another_host_is_not_checked_and_the_run_says_so(fake, tmp_path):
    import contextlib

    with contextlib.ExitStack() as stack:
        fake.data_root = str(_mounted(stack, "1m"))  # a folder of that name here is not the engine's
        fake.host_name = "build-server-7"
        options = _options(tmp_path / "state")
        job = prepare(_cell(), CPU, options)
        lines: List[str] = []
        free_space.check(job, options, _engine(fake), lines.append)
    assert lines == [f"[{job.name}] the engine's free space is not checked: the engine at {fake.url} runs on "
                     "build-server-7, not on this host"]


def test_an_engine_reached_over_the_network_is_not_checked():
    remote = Engine(docker.DockerClient(base_url="tcp://10.0.0.9:2375", version="1.41"), "tcp://10.0.0.9:2375")
    assert remote.data_root() == (None, "the engine at tcp://10.0.0.9:2375 is not on this host")  # nothing asked
