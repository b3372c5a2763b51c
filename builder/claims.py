"""One run at a time on what two runs must not write at once: a folder, a cell's state.

A claim is an exclusive ``flock`` on an open file or folder. The kernel drops it when the
process ends however it ends (SIGKILL included), so no stale lock can outlive a run and
block the next; and a second run never waits in silence: it is refused at once with a
message naming the run that holds the claim (its PID and command line, from /proc/locks).

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> with claim(folder, "writing into " + str(folder)):
    ...     pass
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from pathlib import Path
from typing import Iterator, Optional

from builder.errors import UserError

_LOCK_LINE = re.compile(r"^\d+:\s+(?:->\s+)?FLOCK\s+\S+\s+WRITE\s+(\d+)\s+([0-9a-f]+):([0-9a-f]+):(\d+)\s")


def holder(fd: int) -> str:
    """Who holds the flock on ``fd``'s file: ``pid N: its command line``, from /proc/locks."""
    st = os.fstat(fd)
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read(1 << 20).splitlines()
    except OSError:
        return "another process"
    for line in lines:
        m = _LOCK_LINE.match(line)
        if m and (int(m.group(2), 16), int(m.group(3), 16), int(m.group(4))) == want and int(m.group(1)) != os.getpid():
            return f"pid {m.group(1)}: {_command_of(int(m.group(1)))}"
    return "another process"


def _command_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read(4096).split(b"\0")
    except OSError:
        return "?"
    text = " ".join(a.decode("utf-8", "replace") for a in argv if a)
    return text[:300] or "?"


@contextlib.contextmanager
def claim(path: Path, doing: str, fix: str = "wait for it to finish (or stop it), then run again",
          folder: Optional[bool] = None) -> Iterator[None]:
    """Hold an exclusive claim on ``path`` (a folder, or a lock file created when missing)
    for the ``with`` block; raise `UserError` naming the holder if another run has it.

    Parameters
    ----------
    path: the folder claimed (opened as is), or the lock file (created, kept: removing a
        lock file would let two runs lock two different files of one name).
    doing: what the claim is for, as the refusal says it ("writing into dockerfiles").
    fix: the refusal's fix line.
    folder: whether ``path`` is a folder; by default, whether it is one now.
    """
    is_folder = Path(path).is_dir() if folder is None else folder
    # a lock file is opened for its flock alone: created when missing, never truncated or written,
    # never through a link (a link planted at its name makes the open fail: nothing is made elsewhere)
    flags = (os.O_RDONLY | os.O_DIRECTORY) if is_folder else (os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW)
    fd = os.open(path, flags | os.O_CLOEXEC, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"another ascend-build run is {doing} ({holder(fd)}); nothing was done here",
                            fix=fix, exit_code=1) from None
        yield
    finally:
        os.close(fd)  # drops the claim
