"""Writing a file so that a kill, a full disk or a crash never leaves half of it.

The files ascend-build keeps as state or evidence (a lock, a run record, a smoke report,
an SBOM, render's files) are written whole under a temporary name beside their target
(`TMP_SUFFIX`, which `render` knows as its own leftover) and only then renamed or linked
into place: a reader sees the old bytes or the new ones, never a prefix (on a file system
without hard links, `create_file` writes in place: a kill mid-write may leave a prefix
there). A write that fails (no space left, no permission) removes its temporary file and
says which file system is full (`write_error`).

Why a reader sees old or new bytes, never a prefix: a kill (SIGKILL, OOM) stops the process,
not the kernel, so every byte written before it stays in the page cache and a rename is atomic:
the name points at the old file or the new one. A crash of the machine or a power cut can lose
what was not yet on disk, so a file's bytes are flushed before its name moves to it: after a
crash the name points at the old file, or at the new one with all its bytes. `replace_file` and
`create_file` flush each file (an fsync); a writer of many files (`render`) stages them all with
``sync=False``, flushes them in one `flush`, and only then renames them: the same order, one
flush instead of one per file. A folder that does not exist yet is staged whole
(`stage_folder`, filled with `stage_in`) and renamed into place in one step: a reader sees
no folder or all of its files. The folders are not flushed after the renames: after a crash
a name may still point at its old file, or a new folder still be under its temporary name (a
rerun writes it again), never at a half-written one.

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> replace_file(folder / "a.txt", b"one\\n"); (folder / "a.txt").read_bytes()
    b'one\\n'
    >>> create_file(folder / "a.txt", b"two\\n"), (folder / "a.txt").read_bytes()
    (False, b'one\\n')
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
from pathlib import Path
from typing import IO, Any, BinaryIO, Callable, Dict, Iterable, Optional, TextIO, Union, overload

from builder.errors import UserError

TMP_SUFFIX = ".ascend-build-tmp"


def temporary_name(path: Path) -> Path:
    """Where ``path``'s new bytes are staged: ``.<name>.ascend-build-tmp`` beside it."""
    return path.with_name(f".{path.name}{TMP_SUFFIX}")


def stage(path: Path, data: bytes, sync: bool = True, mode: int = 0o666) -> Path:
    """``data`` in a file of its own beside ``path``, under `temporary_name`; returns that name.

    The file is created exclusively and without following a link: a link put at that name
    makes the open fail, never redirects it. Whatever is there already (a run killed midway
    leaves its file; a link someone planted) is then removed (unlink removes a link, never
    what it points at) and the file created afresh. On a failed write (a full disk) the
    partial file is removed.

    ``sync``: the bytes are on disk (fsync) before this returns, so the caller may rename the
    file into place. With ``sync=False`` they may not be yet: the caller must `flush` every
    file it staged so before it renames any of them. ``mode``: the file's permissions from its
    creation on, less the umask (0o600: a private key is never readable by others, even half).
    """
    tmp = temporary_name(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(tmp, flags, mode)
    except FileExistsError:
        tmp.unlink()
        fd = os.open(tmp, flags, mode)
    _fill(fd, tmp, data, sync)
    return tmp


def stage_in(folder: Path, name: str, data: bytes) -> Path:
    """``data`` in a new file ``name`` of ``folder``, a folder `stage_folder` made for this run:
    created exclusively, without following a link, not flushed (the caller `flush`es the files
    and the folder before it renames the folder into place). Returns the file's path; a failed
    write removes the partial file."""
    path = folder / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    _fill(fd, path, data, False)
    return path


@overload
def stream_to(path: Path, encoding: None = None, mode: int = 0o666) -> BinaryIO: ...
@overload
def stream_to(path: Path, encoding: str, mode: int = 0o666) -> TextIO: ...


def stream_to(path: Path, encoding: Optional[str] = None, mode: int = 0o666) -> IO[Any]:
    """A new, empty file at ``path`` for a writer that writes as it goes (a build log, a
    download's partial file), open for writing: text in ``encoding`` when given, else bytes.

    Created exclusively and without following a link, as `stage` creates its files: whatever is
    at the name already (an earlier log, a link someone planted) is removed first (unlink removes
    a link, never what it points at; a folder there makes this fail). Not staged: a reader may see
    it half written, so it is for what is written as it goes, never for state or evidence (the
    caller renames a download into place once it is whole). ``mode``: less the umask.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, mode)
    except FileExistsError:
        os.unlink(path)
        fd = os.open(path, flags, mode)
    return os.fdopen(fd, "w", encoding=encoding) if encoding else os.fdopen(fd, "wb")


def stage_folder(folder: Path) -> Path:
    """A new, empty folder beside ``folder`` under `temporary_name`, to fill with `stage_in`
    and rename to ``folder`` in one step once flushed: a reader sees no folder, or all of it.

    What is at that name already (a run killed midway leaves its folder; a link someone
    planted) is removed first: a link is unlinked, never followed; a folder is removed with
    what is in it (`shutil.rmtree` unlinks the links inside it, never what they point at).
    """
    tmp = temporary_name(folder)
    if os.path.islink(tmp) or (os.path.lexists(tmp) and not os.path.isdir(tmp)):
        tmp.unlink()
    elif os.path.lexists(tmp):
        shutil.rmtree(tmp)
    tmp.mkdir()  # fails (FileExistsError) if anything was put there since: nothing is written through it
    return tmp


def _fill(fd: int, path: Path, data: bytes, sync: bool) -> None:
    """Write ``data`` to the new file ``fd`` (``path``) whole and close it; fsync first when
    ``sync``. On failure the file is removed."""
    try:
        try:
            view, written = memoryview(data), 0
            while written < len(view):  # os.write may write less than it was given
                written += os.write(fd, view[written:])
            if sync:
                os.fsync(fd)  # the bytes are on disk before the name points at them
        finally:
            os.close(fd)  # a file system that reports a failed write only here fails here too
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def flush(staged: Iterable[Path]) -> int:
    """Put the bytes of ``staged`` (files written by `stage` with ``sync=False`` or by
    `stage_in`, and the folders of `stage_folder`) on disk, in one pass; returns how many
    flushes that took.

    On Linux: one ``syncfs`` per file system they lie on, which writes out everything written
    there (data and folder entries) and waits for it; since Linux 5.8 it fails (an `OSError`
    here) when a write-back there failed and no other syncfs has reported it yet. Where there
    is no syncfs: an fsync of each file and folder given. Either way a caller renames nothing
    when this raises.
    """
    files = set(map(os.fspath, staged))
    if _syncfs is None:
        for path in sorted(files):
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return len(files)
    one_per_device: Dict[int, str] = {}
    for folder in sorted({os.path.dirname(path) for path in files}):
        one_per_device.setdefault(os.stat(folder).st_dev, folder)
    for folder in one_per_device.values():
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            _syncfs(fd, folder)
        finally:
            os.close(fd)
    return len(one_per_device)


def _load_syncfs() -> Optional[Callable[[int, str], None]]:
    """Linux's syncfs(2) through the C library, raising `OSError` on failure; None where there is none."""
    try:
        call = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    call.argtypes, call.restype = [ctypes.c_int], ctypes.c_int

    def syncfs(fd: int, folder: str) -> None:
        if call(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), folder)
    return syncfs


_syncfs = _load_syncfs()


def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole (staged, then renamed over the old file).

    Raises `UserError` (see `write_error`) when it cannot; the old file is then unchanged.
    """
    path = Path(path)
    try:
        os.replace(stage(path, data), path)
    except OSError as exc:
        temporary_name(path).unlink(missing_ok=True)
        raise write_error(exc, path) from None


def create_file(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` whole unless ``path`` exists (then False, nothing changed).

    Staged, then linked to its name (a link never replaces a file), so two writers never
    clobber each other and no one ever reads half a file. Raises `UserError` when it cannot.
    """
    path = Path(path)
    try:
        tmp = stage(path, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
            return _create_in_place(path, data)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise write_error(exc, path) from None
    return True


# A file system without hard links (FAT, some network and object-store mounts)
_NO_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS)


def _create_in_place(path: Path, data: bytes) -> bool:
    """`create_file` where links are not to be had: created exclusively and written in
    place; a failed write removes the partial file (a kill mid-write still could leave it)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return True


def free_bytes(path: Union[str, Path]) -> int:
    """Bytes free to us on the file system holding ``path`` (its nearest existing folder); -1 if unknown."""
    folder = Path(path)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return -1


def write_error(exc: OSError, path: Union[str, Path], unchanged: str = "what was there before is unchanged"
                ) -> UserError:
    """The `UserError` for a failed write of ``path``: a full disk says so, naming the path.

    Example:
        >>> print(write_error(OSError(errno.ENOSPC, "No space left on device"), "/x/y.lock"))  # doctest: +ELLIPSIS
        no space left on the file system of /x/y.lock (... bytes free): what was there before is unchanged
          fix: free space there (old build logs, `docker builder prune`) or write elsewhere, then run again
    """
    where = exc.filename2 or exc.filename or path  # a copy or rename names its source first, its target second
    staged = Path(where).name
    if staged.startswith(".") and staged.endswith(TMP_SUFFIX):  # `stage` failed: the user asked for its target
        where = Path(where).with_name(staged[1:-len(TMP_SUFFIX)])
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return UserError(f"no space left on the file system of {where} ({free_bytes(where)} bytes free): {unchanged}",
                         fix="free space there (old build logs, `docker builder prune`) or write elsewhere, "
                             "then run again", exit_code=1)
    return UserError(f"cannot write {where}: {exc.strerror or exc}: {unchanged}", exit_code=1,
                     fix="check that the folder is writable, on a regular file system")
