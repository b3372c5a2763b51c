"""builder.writes: staging without a flush each, and one flush per file system for a batch."""

from __future__ import annotations

import errno
import re
import os
from pathlib import Path
from typing import List, Tuple

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


# --- stream_to: a file written as it goes, never through a link ----------------------------------


def test_stream_to_replaces_a_planted_link_and_an_old_file_without_writing_through(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    log = tmp_path / "build.log"
    log.symlink_to(outside)
    with writes.stream_to(log, encoding="utf-8") as fh:
        fh.write("line\n")
    assert outside.read_text() == "precious\n" and not log.is_symlink() and log.read_text() == "line\n"
    with writes.stream_to(log) as fh:  # an old file: written afresh, from empty
        fh.write(b"x")
    assert log.read_bytes() == b"x"


def test_stream_to_a_folder_fails_and_leaves_the_folder(tmp_path):
    (tmp_path / "log" / "kept").mkdir(parents=True)
    with pytest.raises(OSError):
        writes.stream_to(tmp_path / "log")
    assert (tmp_path / "log" / "kept").is_dir()


# --- the audit: every file builder/ writes goes through builder/writes.py ------------------------

# A write that does not go through builder/writes.py: open() in a writing mode, write_text and
# write_bytes, shutil's copies, os.open creating or writing, mkstemp and NamedTemporaryFile. Not
# flagged: renames and hard links (they replace a name, never write through a link at it) and
# private temporary folders (TemporaryDirectory, mkdtemp: made anew, nobody else's name in them).
BYPASS = re.compile(r"""\b(fd)?open\((?:[^)]*,\s*)?(mode=)?["'][wax+]|\.write_(text|bytes)\(|\bshutil\.copy|"""
                    r"""\bos\.open\([^)]*O_(WRONLY|RDWR|CREAT|APPEND)|\btempfile\.(mkstemp|NamedTemporaryFile)""")
# Where builder/ writes past writes.py, and why that is safe: (file, text on the line, why).
ALLOWED = [
    ("builder/images/lock.py", "write_text(", "uv's inputs, in a TemporaryDirectory made for this call"),
    ("builder/images/stage.py", "env_file.write_text(", "the build's secrets, in a private TemporaryDirectory"),
    ("builder/images/stage.py", "shutil.copy2(", "into a context folder this build just made, when a hard link fails"),
    ("builder/images/stage.py", "os.open(lock, os.O_RDWR", "a lock file for its flock: O_NOFOLLOW, never truncated"),
    ("builder/images/render.py", "os.O_WRONLY | os.O_APPEND", "a writability probe: opened and closed, nothing written"),
]
# Not scanned: builder/smoke/ runs inside images (the standard library only, its own temporary
# files), builder/templates/ are scripts a build context carries.
NOT_SCANNED = ("builder/smoke/", "builder/templates/", "builder/writes.py")


def _bypasses() -> List[Tuple[str, int, str]]:
    root = Path(__file__).resolve().parent.parent
    found = []
    for path in sorted((root / "builder").rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.startswith(NOT_SCANNED):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.strip()
            if code.startswith(("#", ">>>", "...")) or not BYPASS.search(code):
                continue
            found.append((name, number, code))
    return found


def test_every_file_builder_writes_goes_through_writes_or_is_allowed_saying_why():
    """issue 41: one link-refusing, exclusive writer for every file the tool writes. A new write
    past builder/writes.py fails here until it goes through it, or joins ALLOWED with its reason."""
    found = _bypasses()
    unexplained = [f"{name}:{number}: {code}" for name, number, code in found
                   if not any(name == file and text in code for file, text, _ in ALLOWED)]
    assert not unexplained, "writes past builder/writes.py (use writes.*, or add to ALLOWED saying why):\n" + \
        "\n".join(unexplained)
    stale = [(file, text) for file, text, _ in ALLOWED if not any(name == file and text in code for name, _, code in found)]
    assert not stale, f"ALLOWED entries that match no line any more (remove them): {stale}"


def test_the_audit_finds_each_kind_of_bypass():
    for line in ('with open(path, "w") as fh:', "out = open(p, 'wb')", 'p.write_text("x")', "p.write_bytes(b)",
                 "shutil.copyfile(a, b)", "fd = os.open(p, os.O_WRONLY | os.O_CREAT)", "tempfile.mkstemp(dir=d)",
                 'os.fdopen(fd, "w")', 'open(p, mode="a")', 'p.open("wb")'):
        assert BYPASS.search(line), line
    for line in ('open(p, "rb")', "os.open(p, os.O_RDONLY | os.O_NONBLOCK)", "tempfile.TemporaryDirectory()",
                 "os.replace(a, b)", "writes.replace_file(p, data)"):
        assert not BYPASS.search(line), line


# --- the surfaces that write through writes.*: a link planted at a name they write ---------------


@pytest.fixture
def outside(tmp_path) -> Path:
    """A file someone else owns, that a planted link points at: it must stay as it is."""
    path = tmp_path / "outside.txt"
    path.write_text("precious\n")
    return path


def test_a_download_never_writes_through_a_link_at_its_partial_file(tmp_path, outside):
    import hashlib
    from http.server import BaseHTTPRequestHandler

    from builder.images import fetch
    from tests.support import registry as hr

    body = b"wheel bytes\n" * 100

    class One(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server, port = hr.serve(One)
    try:
        target = tmp_path / "own-wheels" / "w-1.0-py3-none-any.whl"
        target.parent.mkdir()
        target.with_name(target.name + ".part").symlink_to(outside)
        got = fetch.download(f"http://127.0.0.1:{port}/w.whl", target, hashlib.sha256(body).hexdigest())
    finally:
        server.shutdown()
    assert got.read_bytes() == body and outside.read_text() == "precious\n"
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]


def test_a_link_at_a_context_lock_is_removed_never_followed_or_truncated(tmp_path, outside):
    from builder.images import stage

    contexts = tmp_path / "contexts"
    contexts.mkdir()
    (contexts / ".cpu-x86_64.lock").symlink_to(outside)
    with stage.claim(contexts, "x86_64", "cpu"):
        pass
    assert outside.read_text() == "precious\n" and not (contexts / ".cpu-x86_64.lock").is_symlink()


def test_a_link_at_a_claims_lock_file_is_refused_and_nothing_is_made_where_it_points(tmp_path):
    from builder import claims

    nowhere = tmp_path / "made-elsewhere"
    lock = tmp_path / "claims" / "cell.lock"
    lock.parent.mkdir()
    lock.symlink_to(nowhere)  # dangling: an open with O_CREAT through it would make the file there
    with pytest.raises(OSError):
        with claims.claim(lock, "building cell", folder=False):
            pass
    assert not nowhere.exists()


def test_the_nfd_feature_file_is_never_written_through_a_link_at_its_staged_name(tmp_path, outside):
    from builder.node import nfd

    target = tmp_path / "features.d" / "ascend-build"
    target.parent.mkdir()
    writes.temporary_name(target).symlink_to(outside)
    nfd.write_atomically(target, "feature=1\n")
    assert target.read_text() == "feature=1\n" and outside.read_text() == "precious\n"
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)  # read by nfd-worker and the runtime
    assert sorted(p.name for p in target.parent.iterdir()) == ["ascend-build"]


def test_a_knowledge_file_the_watcher_edits_is_never_written_through_a_link_at_its_staged_name(tmp_path, outside):
    from builder.releases import yaml_files

    target = tmp_path / "pairings.yaml"
    target.write_bytes(b"a: 1\n")
    target.chmod(0o640)
    writes.temporary_name(target).symlink_to(outside)
    yaml_files.replace_file(target, b"a: 2\n", expect=b"a: 1\n")
    assert target.read_bytes() == b"a: 2\n" and outside.read_text() == "precious\n"
    assert target.stat().st_mode & 0o777 == 0o640  # the file's mode kept
