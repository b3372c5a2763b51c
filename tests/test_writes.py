"""builder.writes: staging without a flush each, and one flush per file system for a batch."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import List

import pytest

from builder import writes

needs_syncfs = pytest.mark.skipif(writes._syncfs is None, reason="no syncfs here")


def _count_syncfs(monkeypatch) -> List[str]:
    folders: List[str] = []
    real = writes._syncfs
    assert real is not None, "no syncfs on this system"

    def counted(fd, folder):
        folders.append(folder)
        real(fd, folder)
    monkeypatch.setattr(writes, "_syncfs", counted)
    return folders


def test_stage_without_sync_writes_the_bytes_and_never_fsyncs(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: pytest.fail("staged with sync=False, yet fsynced"))
    tmp = writes.stage(tmp_path / "a.txt", b"new\n", sync=False)
    assert tmp == writes.temporary_name(tmp_path / "a.txt") and tmp.read_bytes() == b"new\n"


def test_stage_replaces_a_planted_link_at_its_temporary_name_without_writing_through(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    target = tmp_path / "in" / "a.txt"
    target.parent.mkdir()
    writes.temporary_name(target).symlink_to(outside)
    tmp = writes.stage(target, b"new\n", sync=False)
    assert not tmp.is_symlink() and tmp.read_bytes() == b"new\n"
    assert outside.read_text() == "precious\n"


@needs_syncfs
def test_flush_counts_one_syncfs_for_many_files_in_many_folders_of_one_file_system(tmp_path, monkeypatch):
    staged = []
    for cell in range(20):
        (tmp_path / str(cell)).mkdir()
        staged += [writes.stage(tmp_path / str(cell) / f"f{i}", b"x", sync=False) for i in range(5)]
    folders = _count_syncfs(monkeypatch)
    assert writes.flush(staged) == 1 and len(folders) == 1


@needs_syncfs
def test_flush_syncs_each_file_system_once(tmp_path, monkeypatch):
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK) or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm, writable, on a file system of its own")
    other = shm / f"ascend-build-test-{os.getpid()}"
    other.mkdir()
    try:
        staged = [writes.stage(tmp_path / "a", b"x", sync=False), writes.stage(tmp_path / "b", b"x", sync=False),
                  writes.stage(other / "c", b"x", sync=False)]
        folders = _count_syncfs(monkeypatch)
        assert writes.flush(staged) == 2 and sorted(folders) == sorted([str(tmp_path), str(other)])
    finally:
        for path in other.iterdir():
            path.unlink()
        other.rmdir()


@needs_syncfs
def test_a_failing_syncfs_is_an_oserror_naming_the_folder():
    assert writes._syncfs is not None
    with pytest.raises(OSError) as failed:
        writes._syncfs(-1, "/some/folder")  # a bad descriptor: the C call fails, its errno comes through
    assert failed.value.errno == errno.EBADF and failed.value.filename == "/some/folder"


def test_without_syncfs_flush_fsyncs_each_file(tmp_path, monkeypatch):
    staged = [writes.stage(tmp_path / f"f{i}", b"x", sync=False) for i in range(7)]
    calls: List[int] = []
    fsync = os.fsync
    def counted(fd: int) -> None:
        calls.append(fd)
        fsync(fd)
    monkeypatch.setattr(os, "fsync", counted)
    monkeypatch.setattr(writes, "_syncfs", None)
    assert writes.flush(staged) == 7 and len(calls) == 7


def test_stage_writes_every_byte_when_the_os_takes_a_few_at_a_time(tmp_path, monkeypatch):
    write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: write(fd, bytes(data[:3])))  # a short write each time
    data = bytes(range(256)) * 4
    assert writes.stage(tmp_path / "a.bin", data, sync=False).read_bytes() == data


def test_a_failed_write_leaves_no_staged_file(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        writes.stage(tmp_path / "a.txt", b"new\n", sync=False)
    assert list(tmp_path.iterdir()) == []
