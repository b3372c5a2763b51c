"""Faults without an engine: `render`, `lock` and `record` killed with SIGKILL, two runs on one
tree at once, and a disk that fills up (a real tmpfs of a few hundred KiB).

Every run is the real CLI in a process of its own (helpers_faults.Killable) killed with a
real signal; the tree is compared byte for byte before and after. The image pipeline's
faults (kills at each phase, two runs on one state folder, a full state folder) are in
tests/images/test_faults_e2e.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Dict, List, Union

import pytest

from builder import knowledge, writes
from builder.images import lock, matrix, relock
from builder.errors import UserError
from tests.support.faults import CannotMount, Killable, fill, small_fs, tree
from tests.support.matrix import SHIPPED_DOCKERFILES, SHIPPED_MATRIX

from tests.support import generated_matrix as generated

DEMO = "cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64"
TMP_NAME = writes.TMP_SUFFIX


def two_matrices(folder: Path, cells: int = 120) -> List[Path]:
    """The same ``cells`` generated cells under two image names: every manifest differs between them."""
    combos = generated.combinations()
    text = generated._yaml([generated._cell(i, k) for i, k in enumerate((combos * (cells // len(combos) + 1))[:cells])])
    paths = []
    for name in ("a", "b"):
        path = folder / f"{name}.yaml"
        path.write_text(f"image: fault-{name}/pytorch\n" + text)
        paths.append(path)
    return paths


def render_tree(matrix_file: Path, out: Path) -> Dict[str, str]:
    done = Killable(["render", "--matrix", matrix_file, "--out", out], out.parent).finish(300)
    assert done.returncode == 0, done.stderr[-2000:]
    return tree(out)


@pytest.fixture(scope="module")
def renders(tmp_path_factory):
    """The trees of matrix a and of matrix b, each rendered whole, and how long b took over a."""
    folder = tmp_path_factory.mktemp("renders")
    a, b = two_matrices(folder)
    tree_a = render_tree(a, folder / "out")
    started = time.monotonic()
    tree_b = render_tree(b, folder / "out")
    return a, b, tree_a, tree_b, time.monotonic() - started


def _staged(out: Path, paths: List[str]) -> bool:
    """Whether render staged the new bytes of one of ``paths`` (its temporary file exists)."""
    return any(os.path.lexists(writes.temporary_name(out / p)) for p in paths)


def _replaced(out: Path, inodes: Dict[str, int]) -> bool:
    """Whether render renamed a new file over one of ``inodes``'s paths."""
    return any(os.stat(out / p).st_ino != inode for p, inode in inodes.items())


@pytest.mark.parametrize("at", ["staging", "renaming", "timed"])
def test_render_killed_anywhere_leaves_each_file_old_or_new_and_the_rerun_completes(renders, tmp_path, at):
    """SIGKILL while render of matrix b over matrix a's tree stages its files (the first
    temporary file seen), while it renames them (the first file replaced), and at points
    spread over the run: every file is a's bytes or b's, never a prefix; the temporary files
    a kill leaves are the rerun's to take over; the rerun completes and `render --check` passes."""
    a, b, tree_a, tree_b, seconds = renders
    differ = [p for p in tree_a if tree_a[p] != tree_b.get(p)]
    mixed = 0
    for n, fraction in enumerate((0.5, 0.8, 0.95) if at == "timed" else (0, 0)):
        out = tmp_path / f"out{n}"
        assert render_tree(a, out) == tree_a
        inodes = {p: os.stat(out / p).st_ino for p in differ}
        run = Killable(["render", "--matrix", b, "--out", out], tmp_path)
        deadline = time.monotonic() + 120
        if at == "timed":
            time.sleep(seconds * fraction)
        while at != "timed" and run.proc.poll() is None and time.monotonic() < deadline:
            if (at == "staging" and _staged(out, differ)) or (at == "renaming" and _replaced(out, inodes)):
                break
        run.signal(signal.SIGKILL)
        assert run.finish(60).returncode in (-signal.SIGKILL, 0)
        now = tree(out)
        # what the kill left staged: files under a temporary name, and new cell folders staged whole
        leftovers = [p for p in now if any(part.endswith(TMP_NAME) for part in Path(p).parts)]
        for path, digest in now.items():
            if path not in leftovers:
                assert digest in (tree_a.get(path), tree_b.get(path)), f"{path} is neither a's nor b's"
        mixed += bool(leftovers) or (now != tree_a and now != tree_b)
        rerun = Killable(["render", "--matrix", b, "--out", out], tmp_path).finish(300)
        assert rerun.returncode == 0, rerun.stderr[-2000:]
        assert tree(out) == tree_b
        check = Killable(["render", "--check", "--matrix", b, "--out", out], tmp_path).finish(300)
        assert check.returncode == 0, check.stderr[-2000:]
    if at != "timed":
        assert mixed, f"no kill landed while render was {at}: the test proved nothing"


def test_two_renders_into_one_tree_one_refuses_naming_the_other(renders, tmp_path):
    """Two renders started together into one tree: the one that claims it second is refused
    at once, naming the other's PID and command; the other completes; nothing is mixed."""
    a, b, tree_a, tree_b, _ = renders
    out = tmp_path / "out"
    for _ in range(3):  # both load the matrix first; they overlap unless the machine stalls one
        render_tree(a, out)
        runs = [Killable(["render", "--matrix", b, "--out", out], tmp_path) for _ in range(2)]
        done = [r.finish(300) for r in runs]
        if sorted(d.returncode for d in done) == [0, 1]:
            break
        assert [d.returncode for d in done] == [0, 0], [d.stderr[-2000:] for d in done]
    else:
        pytest.fail("the two renders never overlapped")
    refused, other = (1, 0) if done[1].returncode == 1 else (0, 1)
    stderr = done[refused].stderr
    assert f"another ascend-build run is writing into {out} (pid {runs[other].proc.pid}: " in stderr
    assert "render --matrix" in stderr and "nothing was done here" in stderr and "Traceback" not in stderr
    assert tree(out) == tree_b
    again = Killable(["render", "--matrix", b, "--out", out], tmp_path).finish(300)  # no stale claim
    assert again.returncode == 0 and "(0 path(s) changed)" in again.stdout


def _tree_copy(tmp_path: Path) -> Path:
    out = tmp_path / "dockerfiles"
    shutil.copytree(SHIPPED_DOCKERFILES, out, symlinks=True)
    return out


@pytest.mark.index
def test_lock_killed_while_resolving_leaves_no_half_lock_nor_claim_and_a_second_run_is_refused(tmp_path):
    """`lock` of the demo cell without its lock: SIGKILL on its "resolving" line leaves no lock
    and no temporary file; while one resolves, a second `lock` and a `render` of the tree are
    refused naming it; the rerun completes."""
    out = _tree_copy(tmp_path)
    (out / DEMO / lock.LOCK_FILE).unlink()
    before = tree(out)
    argv: List[Union[str, Path]] = ["lock", "--matrix", SHIPPED_MATRIX, "--out", out, "--cell", DEMO, "--wheelhouse",
                                    "/opt/wheels"]
    env = dict(os.environ, UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    run = Killable(argv, tmp_path, env)
    assert run.wait_for(r"resolving for"), run.finish().stderr
    other = Killable(argv, tmp_path, env).finish(120)
    render = Killable(["render", "--matrix", SHIPPED_MATRIX, "--out", out], tmp_path).finish(120)
    run.signal(signal.SIGKILL)
    assert run.finish(60).returncode == -signal.SIGKILL
    for refused in (other, render):
        assert refused.returncode == 1, refused.stderr
        assert f"another ascend-build run is writing into {out} (pid {run.proc.pid}: " in refused.stderr
    assert tree(out) == before
    rerun = Killable(argv, tmp_path, env).finish(900)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert (out / DEMO / lock.LOCK_FILE).is_file()
    assert not [p for p in out.rglob("*" + TMP_NAME)]


@pytest.mark.index
def test_sigterm_stops_lock_with_143_and_one_line(tmp_path):
    out = _tree_copy(tmp_path)
    (out / DEMO / lock.LOCK_FILE).unlink()
    run = Killable(["lock", "--matrix", SHIPPED_MATRIX, "--out", out, "--cell", DEMO, "--wheelhouse", "/opt/wheels"],
                   tmp_path, dict(os.environ, UV_CACHE_DIR=str(tmp_path / "uv-cache")))
    assert run.wait_for(r"resolving for"), run.finish().stderr
    run.signal(signal.SIGTERM)  # to the process group, as a CI runner or systemd stops a job: uv too
    done = run.finish(60)
    assert done.returncode == 143, done.stderr
    assert done.stderr.rstrip().splitlines()[-1] == "interrupted by SIGTERM"
    assert not (out / DEMO / lock.LOCK_FILE).exists()


def test_record_killed_anywhere_never_leaves_half_a_record(tmp_path):
    """Records are written whole (staged, then linked): killed at any point, every record
    present parses; the rerun adds one."""
    folder = tmp_path / "ckpt"
    for delay in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8):
        run = Killable(["record", folder, "--set", "model=x"], tmp_path)
        time.sleep(delay)
        run.signal(signal.SIGKILL)
        run.finish(60)
        for record in folder.glob("ascend-build-record*.json") if folder.exists() else ():
            json.loads(record.read_text())
    before = len(list(folder.glob("ascend-build-record*.json"))) if folder.exists() else 0
    assert Killable(["record", folder], tmp_path).finish(60).returncode == 0
    assert len(list(folder.glob("ascend-build-record*.json"))) == before + 1


# --- disk full ---------------------------------------------------------------------------------


@pytest.fixture
def small(tmp_path):
    try:
        with small_fs("8m") as point:
            yield point
    except CannotMount as why:
        pytest.skip(f"cannot mount a tmpfs here: {why}")


def test_render_onto_a_full_disk_says_so_and_leaves_the_tree_as_it_was(small, tmp_path):
    matrix_file = tmp_path / "m.yaml"
    cells = matrix.load(SHIPPED_MATRIX).cells
    demo = SHIPPED_MATRIX.read_text()
    matrix_file.write_text(demo)
    out = small / "out"
    first = Killable(["render", "--matrix", matrix_file, "--out", out], tmp_path).finish(120)
    assert first.returncode == 0, first.stderr[-2000:]
    before = tree(out)
    fill(small)
    changed = SHIPPED_MATRIX.read_text().replace("image: ", "image: full-disk-", 1)
    assert changed != demo and len(cells) > 1
    matrix_file.write_text(changed)
    again = Killable(["render", "--matrix", matrix_file, "--out", out], tmp_path).finish(120)
    assert again.returncode == 1, again.stdout + again.stderr
    assert f"no space left on the file system of {out}/" in again.stderr
    assert "nothing was changed" in again.stderr and "Traceback" not in again.stderr
    assert tree(out) == before


def test_a_lock_written_onto_a_full_disk_fails_saying_so_and_keeps_the_old_lock(small):
    kb = knowledge.load()
    demo = next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == DEMO)
    out = small / "dockerfiles"
    (out / DEMO).mkdir(parents=True)
    old = (SHIPPED_DOCKERFILES / DEMO / lock.LOCK_FILE).read_bytes()
    (out / DEMO / lock.LOCK_FILE).write_bytes(old.replace(b"inputs:", b"inputs: stale", 1))
    before = tree(out)
    previous = lock.read(SHIPPED_DOCKERFILES / DEMO)

    def resolve(inputs, **_):  # the shipped lock, as uv would make it again: no network needed
        return previous
    fill(small)
    with pytest.raises(UserError) as full:
        relock.run([demo], kb, out, resolve=resolve)
    assert full.value.message.startswith(f"no space left on the file system of {out / DEMO / lock.LOCK_FILE}"), \
        full.value.message
    assert tree(out) == before


def test_record_onto_a_full_disk_fails_saying_so_and_leaves_no_partial_record(small, tmp_path):
    folder = small / "ckpt"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"w" * 1000)
    before = tree(folder)
    fill(small, keep=0)
    done = Killable(["record", folder, "--set", "model=x"], tmp_path).finish(60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert tree(folder) == before  # no empty or half record, no temporary file
    assert f"no space left on the file system of {folder}/" in done.stderr and "Traceback" not in done.stderr


def test_render_into_a_symlink_to_nothing_is_a_clear_error_and_makes_nothing(tmp_path):
    (tmp_path / "out").symlink_to(tmp_path / "nowhere")
    shipped = Path(__file__).resolve().parent.parent / "matrix"
    done = Killable(["render", "--matrix", shipped, "--out", tmp_path / "out"], tmp_path).finish(120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"cannot write {tmp_path / 'out'}: No such file or directory: nothing was written" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_lock_stopped_while_resolving_fetches_no_installer_and_writes_no_lock(tmp_path, monkeypatch):
    """Ctrl-C while uv resolves: the cell whose resolving ends afterwards neither downloads its
    CANN installers to record their sha256 (gigabytes, thrown away) nor writes its lock.

    uv "ends" once the run has taken the stop (its stop event is set), not after a fixed time: on
    a loaded machine the main thread may take longer than any such time to run its handler."""
    import threading
    import types

    stops: List[threading.Event] = []

    class Recorded(threading.Event):  # the run's stop event, seen by the stand-in for uv
        def __init__(self) -> None:
            super().__init__()
            stops.append(self)

    monkeypatch.setattr(relock, "threading", types.SimpleNamespace(Event=Recorded))
    kb = knowledge.load()
    demo = next(c for c in matrix.load(SHIPPED_MATRIX).cells if c.id == DEMO)  # its 9.1.0 installers: no sha256 known
    previous = lock.read(SHIPPED_DOCKERFILES / DEMO)
    fetched: List[str] = []

    def resolve(inputs, **_):  # uv, still running when Ctrl-C reaches the main thread
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)  # ident: set, the main thread runs
        assert len(stops) == 1 and stops[0].wait(300), "the run never took the Ctrl-C"
        return previous

    def fetch(url, **_):
        fetched.append(url)
        return "0" * 64, 1

    with pytest.raises(KeyboardInterrupt):
        relock.run([demo], kb, tmp_path, resolve=resolve, fetch=fetch)
    assert fetched == []
    assert not (tmp_path / DEMO / lock.LOCK_FILE).exists()
