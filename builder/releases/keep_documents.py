"""Copy TorchNPU's published documents out of a clone of its repository into the fixtures folder,
each under the source line the generator reads (`published.source`), so the release watcher
and a maintainer keep the documents the same way and never retype one.

Which documents: for every TorchNPU release tag (``v<PTA>-pytorch<X>``, e.g.
``v26.1.0-pytorch2.7.1``), the release notes page of the first tag of that release (in
PyTorch order) that has one, at the paths the notes have lived at; and the compatibility
page (``COMPATIBILITY.en.md``) at the head of the branch given. A document already kept with
the same bytes is left alone, so a run over an unchanged repository writes nothing.

Example:
    >>> release_of("v26.1.0-beta.1-pytorch2.7.1"), release_of("v2.7.1-26.1.0")
    (('26.1.0-beta.1', (2, 7, 1)), None)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from builder import writes
from builder.errors import UserError

NOTES_PATHS = ("docs/zh/release_notes.md", "docs/zh/release_notes/release_notes.md")
COMPATIBILITY = "COMPATIBILITY.en.md"
_TAG = re.compile(r"v(\d+\.\d+\.\d+(?:-beta\.\d+)?)-pytorch(\d+(?:\.\d+)+)")


def release_of(tag: str) -> Optional[Tuple[str, Tuple[int, ...]]]:
    """(the TorchNPU release, the PyTorch version) a release tag names; None for any other ref."""
    m = _TAG.fullmatch(tag)
    return (m.group(1), tuple(int(p) for p in m.group(2).split("."))) if m else None


def _git(gitdir: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", "--git-dir", str(gitdir), *args], check=True, capture_output=True,
                              text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        stderr = getattr(exc, "stderr", "") or ""
        raise UserError(f"git {' '.join(args[:2])} in {gitdir} failed: {stderr.strip() or exc}",
                        fix="pass the .git folder (or bare clone) of TorchNPU's repository", exit_code=1) from None


def _blob(gitdir: Path, ref: str, path: str) -> Optional[bytes]:
    try:
        return subprocess.run(["git", "--git-dir", str(gitdir), "show", f"{ref}:{path}"], check=True,
                              capture_output=True, timeout=120).stdout
    except subprocess.CalledProcessError:
        return None  # not at that ref


def _header(repo: str, path: str, kind: str, ref: str, commit: str, date: str) -> str:
    return f"<!-- {repo}, {path} at {kind} {ref}, commit {commit} ({date}), verbatim below -->\n"


def keep(gitdir: Path, out: Path, repo: str = "Ascend/pytorch", branch: str = "master") -> List[str]:
    """Write every document the repository publishes into ``out`` (``<ref>/<file>``); the paths written."""
    firsts: Dict[str, Tuple[Tuple[int, ...], str]] = {}
    for tag in _git(gitdir, "tag", "--list").split():
        found = release_of(tag)
        if found and any(_blob(gitdir, tag, p) is not None for p in NOTES_PATHS):
            release, pytorch = found
            if release not in firsts or pytorch < firsts[release][0]:
                firsts[release] = (pytorch, tag)
    wanted = [("tag", tag, p) for _, tag in firsts.values() for p in NOTES_PATHS]
    wanted.append(("branch", branch, COMPATIBILITY))
    written = []
    for kind, ref, path in wanted:
        body = _blob(gitdir, ref, path)
        if body is None:
            continue
        commit, date = _git(gitdir, "log", "-1", "--format=%H %cs", f"{ref}^{{commit}}").split()
        text = _header(repo, path, kind, ref, commit, date).encode() + body
        target = out / ref / Path(path).name
        if not target.exists() or target.read_bytes() != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            writes.replace_file(target, text)
            written.append(str(target))
    return sorted(written)
