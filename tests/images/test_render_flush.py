"""render's write is one batch: every new file staged, one flush for all of them, then the renames
(a new cell folder staged whole and renamed in one step, a file of an existing one on its own).

The flushes are counted (os.fsync and writes' syncfs wrapped), their order against the
renames recorded, and a kill between writing and publishing simulated in-process (an
exception that is no OSError, so nothing is cleaned up: what a SIGKILL leaves). The real
SIGKILLs at every phase of a render are in tests/test_faults.py.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Dict, List

import pytest

from builder import writes
from builder.errors import UserError
from builder.images import matrix, render
from tests.support.faults import tree
from tests.support.matrix import SHIPPED_MATRIX


@pytest.fixture(scope="module")
def rendered() -> Dict[str, Dict[str, bytes]]:
    return render.render_all(matrix.load(SHIPPED_MATRIX).cells)


def _files(rendered: Dict[str, Dict[str, bytes]]) -> int:
    return sum(len(files) for files in rendered.values())


def _v2(rendered: Dict[str, Dict[str, bytes]]) -> Dict[str, Dict[str, bytes]]:
    """The same cells with every Dockerfile one line longer: one file per cell to replace."""
    return {cell: {name: data + b"# v2\n" if name == "Dockerfile" else data for name, data in files.items()}
            for cell, files in rendered.items()}


@pytest.fixture()
def events(monkeypatch) -> List[str]:
    """What the write does to the disk, in order: "fsync", "syncfs" and "rename" (os.replace)."""
    seen: List[str] = []
    fsync, replace, syncfs = os.fsync, os.replace, writes._syncfs

    def counted_fsync(fd):
        seen.append("fsync")
        fsync(fd)

    def counted_replace(*args, **kwargs):
        seen.append("rename")
        replace(*args, **kwargs)
    monkeypatch.setattr(os, "fsync", counted_fsync)
    monkeypatch.setattr(os, "replace", counted_replace)
    if syncfs is not None:
        def counted_syncfs(fd, folder):
            seen.append("syncfs")
            syncfs(fd, folder)
        monkeypatch.setattr(writes, "_syncfs", counted_syncfs)
    return seen


def test_rendering_every_cell_counts_one_flush_not_one_per_file(tmp_path, rendered, events):
    if writes._syncfs is None:
        pytest.skip("no syncfs here: the flush is an fsync per file (the next test)")
    assert _files(rendered) > 100 and len(rendered) > 10
    render.write(rendered, tmp_path / "out")
    assert events.count("fsync") == 0 and events.count("syncfs") == 1
    assert events.index("syncfs") < events.index("rename")  # the bytes are on disk before any name points at them
    assert events.count("rename") == len(rendered)  # each new cell folder renamed into place whole
    events.clear()
    render.write(_v2(rendered), tmp_path / "out")  # a re-render that replaces files: one flush again
    assert (events.count("fsync"), events.count("syncfs"), events.count("rename")) == (0, 1, len(rendered))
    assert events.index("syncfs") < events.index("rename")


def test_without_syncfs_every_file_is_fsynced_before_the_first_rename(tmp_path, rendered, events, monkeypatch):
    monkeypatch.setattr(writes, "_syncfs", None)
    render.write(rendered, tmp_path / "out")  # new cell folders: each file and each staged folder fsynced
    assert events.count("fsync") == _files(rendered) + len(rendered) and events.count("rename") == len(rendered)
    assert events.index("rename") == _files(rendered) + len(rendered)  # every fsync came first
    events.clear()
    render.write(_v2(rendered), tmp_path / "out")  # files replaced in existing folders: one fsync each
    assert events.count("fsync") == len(rendered) == events.count("rename")
    assert events.index("rename") == len(rendered)


def test_a_new_cell_folder_appears_whole_in_one_rename(tmp_path, rendered, monkeypatch):
    """Staged as .<cell>.ascend-build-tmp, flushed, then renamed: at the rename the staged
    folder already holds every file with its bytes, and the cell's name did not exist before."""
    out = tmp_path / "out"
    seen = {}
    replace = os.replace

    def looked(src, dst):
        src, dst = Path(src), Path(dst)
        seen[dst.name] = (src.name, os.path.lexists(dst), {p.name: p.read_bytes() for p in src.iterdir()})
        replace(src, dst)
    monkeypatch.setattr(os, "replace", looked)
    render.write(rendered, out)
    assert sorted(seen) == sorted(rendered)
    for cell, files in rendered.items():
        assert seen[cell] == (f".{cell}{writes.TMP_SUFFIX}", False, files)
    assert not [p for p in out.iterdir() if p.name.endswith(writes.TMP_SUFFIX)]


def test_a_link_planted_at_a_new_folders_temporary_name_is_never_written_through(tmp_path, rendered):
    """A link at .<cell>.ascend-build-tmp (to a folder elsewhere) is removed, not followed: the
    folder it points at gets nothing, and the cell folder is render's own."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    cell = sorted(rendered)[0]
    (out / f".{cell}{writes.TMP_SUFFIX}").symlink_to(elsewhere, target_is_directory=True)
    render.write(rendered, out)
    assert list(elsewhere.iterdir()) == []
    assert not (out / cell).is_symlink() and sorted(p.name for p in (out / cell).iterdir()) == sorted(rendered[cell])
    assert not list(out.glob(f"*{writes.TMP_SUFFIX}"))


def test_a_kill_between_writing_and_publishing_leaves_every_path_old_and_the_rerun_completes(tmp_path, rendered,
                                                                                          monkeypatch):
    """Killed after every new file is written and before the flush: no path has its new bytes
    nor half of them (each is as before, or absent for a cell that is new); the staged files
    are left, as a SIGKILL leaves them, and the next render takes them over."""
    out = tmp_path / "out"
    render.write(rendered, out)
    new_cell = sorted(rendered)[0]
    for path in (out / new_cell).iterdir():
        path.unlink()
    (out / new_cell).rmdir()
    before = tree(out)

    class Killed(BaseException):
        pass

    def killed(staged):
        raise Killed()
    monkeypatch.setattr(writes, "flush", killed)
    with pytest.raises(Killed):
        render.write(_v2(rendered), out)
    now = tree(out)
    leftovers = {p for p in now if any(part.endswith(writes.TMP_SUFFIX) for part in Path(p).parts)}
    assert {p: d for p, d in now.items() if p not in leftovers} == before
    assert not (out / new_cell).exists()  # the new cell: no folder, not half of one
    staged_folder = f".{new_cell}{writes.TMP_SUFFIX}"
    assert sorted(p for p in leftovers if p.startswith(staged_folder + "/")) == \
        sorted(f"{staged_folder}/{name}" for name in rendered[new_cell])  # staged whole, under its temporary name
    assert len(leftovers) == len(rendered) - 1 + len(rendered[new_cell])  # each Dockerfile, and the new cell's files
    monkeypatch.undo()
    render.write(_v2(rendered), out)
    assert render.stale(_v2(rendered), out) == []
    assert not list(out.rglob(f"*{writes.TMP_SUFFIX}"))


def test_a_flush_that_fails_publishes_nothing_and_says_so(tmp_path, rendered, monkeypatch):
    """A write-back error reported by the flush (EIO) stops the render before any rename:
    the tree is as it was, the staged files and the folders made for them gone."""
    out = tmp_path / "out"
    render.write(rendered, out)
    new_cell = sorted(rendered)[0]
    for path in (out / new_cell).iterdir():
        path.unlink()
    (out / new_cell).rmdir()
    before = tree(out)

    def failed(staged):
        raise OSError(errno.EIO, "Input/output error", str(out))
    monkeypatch.setattr(writes, "flush", failed)
    with pytest.raises(UserError) as refused:
        render.write(_v2(rendered), out)
    assert refused.value.message == f"cannot write {out}: Input/output error: nothing was changed"
    assert tree(out) == before and not (out / new_cell).exists()
