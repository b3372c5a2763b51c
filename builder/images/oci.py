"""The OCI standard labels only the build can know: when, from which source and revision.

The rendered Dockerfile's LABEL block carries what follows from the cell (``title``,
``description``, ``version`` and the ``io.ascend-build.*`` labels), so the same matrix
renders the same bytes. What differs per build comes in as ``--label`` at build time
(`build_labels`), and the seal step inherits it:

* ``CREATED`` (``created`` under the OCI prefix): now, RFC 3339 in UTC (``SOURCE_DATE_EPOCH`` when set, as
  reproducible builds expect);
* ``SOURCE`` and ``REVISION``: the repository the matrix file is in and
  its commit (``-dirty`` when tracked files changed), from GitHub Actions' variables when
  they are set, else from git; a URL's user and password are never kept;
* ``BASE_NAME``: the base image the build started from.

Example:
    >>> public_url("https://ci:s3cret@example.invalid/team/images.git")
    'https://example.invalid/team/images'
    >>> public_url("git@example.invalid:team/images.git")
    'https://example.invalid/team/images'
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple

from builder.errors import UserError
from builder.vocabulary import OCI_PREFIX

# Only the build knows these: kept out of vocabulary.Label, whose keys the rendered files (and the
# vocabulary.py copied into every image) carry, so adding one re-renders nothing.
CREATED = OCI_PREFIX + "created"
SOURCE = OCI_PREFIX + "source"
REVISION = OCI_PREFIX + "revision"
BASE_NAME = OCI_PREFIX + "base.name"
BASE_DIGEST = OCI_PREFIX + "base.digest"

_SCP_LIKE = re.compile(r"^(?:[A-Za-z0-9._-]+@)?([A-Za-z0-9.-]+):(?!//)(.+)$")  # git@host:org/repo.git


def public_url(remote: str) -> str:
    """A git remote as a browsable https URL without credentials ("" when it is no URL).

    Parameters
    ----------
    remote: what ``git remote get-url`` prints: https://[user[:password]@]host/path[.git],
        ssh://[user@]host/path or user@host:path.
    """
    remote = remote.strip()
    scp = _SCP_LIKE.match(remote)
    if scp and "://" not in remote:
        host, path = scp.groups()
    else:
        parts = urllib.parse.urlsplit(remote)
        if parts.scheme not in ("http", "https", "ssh", "git") or not parts.hostname:
            return ""
        try:
            port = parts.port
        except ValueError:  # past 65535, or not a number: no URL
            return ""
        host = parts.hostname + (f":{port}" if port and parts.scheme in ("http", "https") else "")
        path = parts.path
    path = path.strip("/")
    path = path[:-4] if path.endswith(".git") else path
    return f"https://{host}/{path}" if path else ""


def _git(folder: Path, *args: str) -> Optional[str]:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_head(folder: Path) -> Tuple[str, bool]:
    """The commit checked out where ``folder`` is and whether tracked files changed ("" when
    ``folder`` is in no git checkout).

    Parameters
    ----------
    folder: any folder inside the checkout.
    """
    commit = _git(folder, "rev-parse", "HEAD") or ""
    dirty = bool(commit and _git(folder, "status", "--porcelain", "--untracked-files=no"))
    return commit, dirty


def file_in_git(path: Path) -> Tuple[str, str]:
    """(commit, state) of the file ``path`` in the git checkout it is in, state one of:
    ``committed`` (as in the commit), ``modified`` (differs from it, staged or not),
    ``added`` (staged, in no commit yet), ``untracked``, ``ignored``; ("", "outside-git")
    when it is in no checkout (or git cannot say)."""
    folder = path.resolve().parent
    commit = _git(folder, "rev-parse", "HEAD") or ""
    if not commit:
        return "", "outside-git"
    status = _git(folder, "status", "--porcelain", "--ignored", "--", path.name)
    if status is None:
        return commit, "outside-git"
    code = status[:2]
    if not status:
        return commit, "committed"
    if code == "??":
        return commit, "untracked"
    if code == "!!":
        return commit, "ignored"
    if code[0] == "A":
        return commit, "added"
    return commit, "modified"


def repository_of(path: Path) -> Tuple[str, str]:
    """(the repository, the file's path in it) of ``path`` in a git checkout: the repository is the
    checkout's ``origin`` remote as `public_url` writes it, else the checkout's folder as a ``file:``
    URI; ("", "") when ``path`` is in no checkout (or git cannot say)."""
    resolved = path.resolve()
    top = _git(resolved.parent, "rev-parse", "--show-toplevel")
    if not top:
        return "", ""
    try:
        inside = resolved.relative_to(Path(top).resolve()).as_posix()
    except ValueError:
        return "", ""
    remote = public_url(_git(resolved.parent, "remote", "get-url", "origin") or "")
    return remote or Path(top).resolve().as_uri(), inside


def source_and_revision(folder: Path, env: Mapping[str, str] = os.environ) -> Tuple[str, str]:
    """Where the source of an image built from ``folder``'s matrix is, and its revision.

    Parameters
    ----------
    folder: the matrix file's folder.
    env: the environment (GitHub Actions sets GITHUB_SERVER_URL, GITHUB_REPOSITORY, GITHUB_SHA).
    """
    if env.get("GITHUB_REPOSITORY") and env.get("GITHUB_SHA"):
        server = env.get("GITHUB_SERVER_URL") or "https://github.com"
        return public_url(f"{server}/{env['GITHUB_REPOSITORY']}"), env["GITHUB_SHA"]
    commit, dirty = git_head(folder)
    remote = _git(folder, "remote", "get-url", "origin") if commit else None
    return public_url(remote or ""), commit + ("-dirty" if dirty else "") if commit else ""


def qualified(ref: str) -> str:
    """An image reference fully qualified as Docker reads it (its reference package's normalizing):
    no registry host named (a first component without ``.`` or ``:`` that is not ``localhost``)
    means ``docker.io``, where a one-component name is under ``library/``; a host as given stays.

    Example:
        >>> qualified("debian:12"), qualified("local/debian:12"), qualified("127.0.0.1:5000/team/img:t")
        ('docker.io/library/debian:12', 'docker.io/local/debian:12', '127.0.0.1:5000/team/img:t')
    """
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return ref
    return "docker.io/" + (ref if rest else "library/" + ref)


def created(env: Mapping[str, str] = os.environ, now: Optional[float] = None) -> str:
    """RFC 3339 UTC time of the build: ``SOURCE_DATE_EPOCH`` when set, else ``now``.

    Example:
        >>> created({"SOURCE_DATE_EPOCH": "1700000000"})
        '2023-11-14T22:13:20Z'
    """
    epoch = env.get("SOURCE_DATE_EPOCH", "").strip()
    moment = int(epoch) if epoch.isdigit() else int(time.time() if now is None else now)
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))
    except (OverflowError, OSError, ValueError):  # past what time_t holds
        raise UserError(f"SOURCE_DATE_EPOCH={epoch} is no date this machine can write", exit_code=2,
                        fix="set it to seconds since 1970 (`git log -1 --format=%ct`), or unset it") from None


def build_labels(matrix_file: str, base_image: str, env: Mapping[str, str] = os.environ,
                 base_digest: str = "") -> Dict[str, str]:
    """The labels listed above, for a build from ``matrix_file`` on
    ``base_image``; a value that cannot be known here is left out, never guessed.

    Parameters
    ----------
    matrix_file: the matrix file the cell was read from ("" when unknown: the current folder).
    base_image: the reference the build starts from (written fully qualified: `qualified`).
    base_digest: its registry manifest digest (``sha256:...``), "" when it has none (made locally).
    """
    source, revision = source_and_revision(Path(matrix_file).resolve().parent if matrix_file else Path.cwd(), env)
    labels = {CREATED: created(env), SOURCE: source, REVISION: revision, BASE_NAME: qualified(base_image),
              BASE_DIGEST: base_digest}
    return {k: v for k, v in labels.items() if v}
