"""What a run killed with SIGKILL leaves behind, named so that the next run can tell whose it was.

No ``finally`` survives SIGKILL. So every scratch thing a run makes outside its state folder
carries its owner in its name: a temporary folder is ``ascend-build-<kind>-<host>-<pid>-...``
(a build's image-ID folder, the build secrets with the mirror and CA settings), a temporary
image tag is ``ascend-build-candidate:<image>-<host>-<pid>`` (the seal's). `sweep_temp` and
`builder.engine.Engine.remove_orphans` remove those whose process on this host is gone; a
process alive (or a pid taken again since) keeps its things. ``<host>`` is 8 hex digits of the
host name's sha256, since a tag holds neither dots nor most of what a host name may.

Example:
    >>> mark = owner_mark()
    >>> orphaned("cafe-" + mark), orphaned(f"{host_mark()}-999999999"), orphaned("00000000-1")
    (False, True, False)
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

CANDIDATE_REPOSITORY = "ascend-build-candidate"  # the seal's temporary tag (`builder.images.smoke_run.seal`)
_OWNED = re.compile(r"([0-9a-f]{8})-([0-9]+)$")
_TEMP = re.compile(r"ascend-build-[a-z]+-([0-9a-f]{8}-[0-9]+)-")


def alive(pid: int) -> bool:
    """Whether a process of that pid exists on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:  # no pid is that large
        return False
    return True


def host_mark() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def owner_mark() -> str:
    """``<host>-<pid>`` of this process: the end of every name it gives a scratch thing."""
    return f"{host_mark()}-{os.getpid()}"


def owner(name: str) -> Optional[Tuple[str, int]]:
    """(host mark, pid) of the process whose mark ``name`` ends in; None when it ends in none."""
    found = _OWNED.search(name)
    return (found.group(1), int(found.group(2))) if found else None


def orphaned(name: str) -> bool:
    """Whether ``name`` ends in the mark of a process of this host that is gone."""
    mark = owner(name)
    return mark is not None and mark[0] == host_mark() and not alive(mark[1])


def temp_prefix(kind: str) -> str:
    """The prefix of a temporary folder of ``kind`` (``build``, ``secrets``) owned by this process."""
    return f"ascend-build-{kind}-{owner_mark()}-"


def candidate_tag(image_id: str) -> str:
    """The seal's temporary tag for a candidate image, owned by this process."""
    return f"{CANDIDATE_REPOSITORY}:{image_id.split(':')[-1][:20]}-{owner_mark()}"


def sweep_temp(folder: Optional[Path] = None) -> List[Path]:
    """Remove the temporary folders of ascend-build runs of this host that are gone; their paths."""
    root = Path(folder or tempfile.gettempdir())
    removed = []
    try:
        names = os.listdir(root)
    except OSError:
        return []
    for name in names:
        found = _TEMP.match(name)
        if found and orphaned(found.group(1)):
            shutil.rmtree(root / name, ignore_errors=True)
            removed.append(root / name)
    return removed
