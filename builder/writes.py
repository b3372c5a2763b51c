"""Writing a file so that a kill, a full disk or a crash never leaves half of it.

The files ascend-build keeps as state or evidence (a lock, a run record, a smoke report,
an SBOM, render's files) are written whole under a temporary name beside their target
(`TMP_SUFFIX`, which `render` knows as its own leftover) and only then renamed or linked
into place: a reader sees the old bytes or the new ones, never a prefix (on a file system
without hard links, `create_file` writes in place: a kill mid-write may leave a prefix
there). A write that fails (no space left, no permission) removes its temporary file and
says which file system is full (`write_error`).

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> replace_file(folder / "a.txt", b"one\\n"); (folder / "a.txt").read_bytes()
    b'one\\n'
    >>> create_file(folder / "a.txt", b"two\\n"), (folder / "a.txt").read_bytes()
    (False, b'one\\n')
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Union

from builder.errors import UserError

TMP_SUFFIX = ".ascend-build-tmp"


def temporary_name(path: Path) -> Path:
    """Where ``path``'s new bytes are staged: ``.<name>.ascend-build-tmp`` beside it."""
    return path.with_name(f".{path.name}{TMP_SUFFIX}")


def stage(path: Path, data: bytes) -> Path:
    """``data`` in a file of its own beside ``path``, under `temporary_name`; returns that name.

    Whatever is at that name already is removed first (a run killed midway leaves its file
    there; unlink removes a link, never what it points at), then the file is created
    exclusively and without following a link: one put there meanwhile makes the open fail,
    never redirects it. On a failed write (a full disk) the partial file is removed.
    """
    tmp = temporary_name(path)
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())  # the bytes are on disk before the name points at them
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


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
