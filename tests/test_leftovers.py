"""What a run killed with SIGKILL leaves behind is swept by the next run: temporary folders (the
build secrets among them), the seal's temporary tags, and no `docker build` outlives its run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder import leftovers


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_the_folders_of_a_gone_run_of_this_host_are_swept_and_no_other(tmp_path):
    host, gone = leftovers.host_mark(), dead_pid()
    folders = {
        "gone-secrets": f"ascend-build-secrets-{host}-{gone}-abc",
        "gone-build": f"ascend-build-build-{host}-{gone}-xyz",
        "alive": f"ascend-build-secrets-{host}-{os.getpid()}-abc",
        "other-host": f"ascend-build-secrets-00000000-{gone}-abc",
        "not-ours": f"pip-build-{host}-{gone}-abc",
        "old-name": "ascend-build-secrets-k2j3",  # no owner in its name: not judged
    }
    for name in folders.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "buildenv").write_text("PIP_INDEX_URL=https://user:pw@mirror/simple\n")
    removed = leftovers.sweep_temp(tmp_path)
    assert sorted(p.name for p in removed) == sorted([folders["gone-secrets"], folders["gone-build"]])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        folders[k] for k in ("alive", "other-host", "not-ours", "old-name"))


def test_this_process_names_its_scratch_things_as_its_own():
    assert leftovers.temp_prefix("secrets").startswith(f"ascend-build-secrets-{leftovers.host_mark()}-{os.getpid()}-")
    tag = leftovers.candidate_tag("sha256:" + "ab" * 32)
    assert tag == f"ascend-build-candidate:{'ab' * 10}-{leftovers.host_mark()}-{os.getpid()}"
    assert not leftovers.orphaned(tag) and leftovers.orphaned(tag.rsplit("-", 1)[0] + f"-{dead_pid()}")


def test_the_secrets_folder_of_a_build_is_named_for_its_run(tmp_path, monkeypatch):
    from builder.images import stage

    class NoMirrors:
        mirrors = ()

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with stage.secrets(NoMirrors(), None) as files:
        assert files["buildenv"].parent.name.startswith(leftovers.temp_prefix("secrets"))


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/usr/bin/setpriv").exists(), reason="no setpriv (util-linux)")
def test_a_build_cli_dies_with_the_run_that_started_it_even_on_sigkill(tmp_path):
    """engine.build starts the docker CLI under `setpriv --pdeathsig TERM`: here a stand-in CLI
    (sleep) started the same way by a parent that is then killed with SIGKILL."""
    from builder.engine import _DIE_WITH_US

    assert _DIE_WITH_US[:3] == ["setpriv", "--pdeathsig", "TERM"]
    program = ("import subprocess, sys, time; p = subprocess.Popen(sys.argv[1:]); "
               "print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", program, *_DIE_WITH_US, "sleep", "60"], stdout=subprocess.PIPE,
                              text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    # setpriv asks for the signal (prctl) just before it execs the CLI: kill the parent before
    # that and nothing is asked yet, so wait until the stand-in runs (a window of a few
    # milliseconds in engine.build too, said on the reliability page)
    deadline = time.monotonic() + 10
    while _command(child) != "sleep" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _command(child) == "sleep"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:  # reaped by init once it died: gone from the table
            with open(f"/proc/{child}/stat") as stat:
                if stat.read().split(")")[-1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the stand-in build CLI outlived the run that started it")


@pytest.mark.engine
def test_the_seal_tag_of_a_gone_run_is_swept_and_a_live_runs_kept(engine, base_image):
    image = engine.image_id(base_image)
    assert image is not None
    gone = leftovers.candidate_tag(image).rsplit("-", 1)[0] + f"-{dead_pid()}"
    mine = leftovers.candidate_tag(image)
    for ref in (gone, mine):
        engine.tag(image, ref)
    try:
        engine.remove_orphans()
        assert engine.image_id(gone) is None, "the gone run's seal tag is left"
        assert engine.image_id(mine) == image, "a live run's seal tag was removed"
    finally:
        for ref in (gone, mine):
            if engine.image_id(ref):
                engine.untag(ref)


@pytest.mark.engine
def test_the_seal_check_counts_this_runs_and_ended_runs_tags_not_another_live_processs(engine, base_image):
    """What `temp_tags` (the seal-tag checks of the pipeline tests) counts: a tag of this process and
    of an ended one (a CLI run the test started), not one another live process holds while it seals
    (a benchmark or another suite on the same engine)."""
    from tests.support.pipeline import temp_tags

    image = engine.image_id(base_image)
    assert image is not None
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as other:
        base = leftovers.candidate_tag(image).rsplit("-", 1)[0]
        mine, ended, live = leftovers.candidate_tag(image), f"{base}-{dead_pid()}", f"{base}-{other.pid}"
        try:
            for ref in (mine, ended, live):
                engine.tag(image, ref)
            seen = temp_tags(engine)
            assert {mine, ended} <= seen and live not in seen
        finally:
            other.kill()
            for ref in (mine, ended, live):
                if engine.image_id(ref):
                    engine.untag(ref)
