"""Copy Ascend's published documents out of a clone of their repository into the fixtures folder,
each under the source line the generator reads (`published.source`), so the release watcher and
a maintainer keep the documents the same way and never retype one.

Which documents (`SOURCES`, per kind of fixtures):

- ``ascend-pytorch`` (TorchNPU): for every release tag (``v<PTA>-pytorch<X>``, e.g.
  ``v26.1.0-pytorch2.7.1``), the release notes page of the first tag of that release (in
  PyTorch order) that has one, at the paths the notes have lived at; and the compatibility
  page (``COMPATIBILITY.en.md``) at the head of the branch.
- ``mind-cluster`` (MindCluster): the release notes at every release tag (``v26.1.0``,
  ``v26.0.0.beta.1``) and at the head of the branch.

A document already kept with the same bytes is left alone, so a run over an unchanged
repository writes nothing.

Example:
    >>> SOURCES["ascend-pytorch"].release_of("v26.1.0-beta.1-pytorch2.7.1"), SOURCES["ascend-pytorch"].release_of("v2.7.1-26.1.0")
    (('26.1.0-beta.1', (2, 7, 1)), None)
    >>> SOURCES["mind-cluster"].release_of("v26.0.0.beta.1"), SOURCES["mind-cluster"].release_of("v7.3.0.SPC1")
    (('26.0.0.beta.1', ()), None)
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from builder import writes
from builder.errors import UserError


@dataclass(frozen=True)
class Source:
    """Where one kind of document lives in its repository."""

    repo: str                      # as the source line names it
    tag: str                       # a release tag: group 1 the release, group 2 (optional) the PyTorch version
    notes: Tuple[str, ...]         # the paths the release notes have lived at, newest first
    on_branch: Tuple[str, ...]     # the files kept from the head of the branch

    def release_of(self, tag: str) -> Optional[Tuple[str, Tuple[int, ...]]]:
        """(the release, the PyTorch version or ()) a release tag names; None for any other ref."""
        m = re.fullmatch(self.tag, tag)
        if m is None:
            return None
        pytorch = m.group(2) if m.re.groups > 1 else None
        return m.group(1), tuple(int(p) for p in pytorch.split(".")) if pytorch else ()


SOURCES: Dict[str, Source] = {
    "ascend-pytorch": Source("Ascend/pytorch", r"v(\d+\.\d+\.\d+(?:-beta\.\d+)?)-pytorch(\d+(?:\.\d+)+)",
                             ("docs/zh/release_notes.md", "docs/zh/release_notes/release_notes.md"),
                             ("COMPATIBILITY.en.md",)),
    "mind-cluster": Source("Ascend/mind-cluster", r"v(\d+\.\d+\.\d+(?:\.beta\.\d+)?)", ("docs/zh/release_notes.md",),
                           ("docs/zh/release_notes.md",)),
}


def _git(gitdir: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", "--git-dir", str(gitdir), *args], check=True, capture_output=True,
                              text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        stderr = getattr(exc, "stderr", "") or ""
        raise UserError(f"git {' '.join(args[:2])} in {gitdir} failed: {stderr.strip() or exc}",
                        fix="pass the .git folder (or bare clone) of the document's repository", exit_code=1) from None


def _blob(gitdir: Path, ref: str, path: str) -> Optional[bytes]:
    try:
        return subprocess.run(["git", "--git-dir", str(gitdir), "show", f"{ref}:{path}"], check=True,
                              capture_output=True, timeout=120).stdout
    except subprocess.CalledProcessError:
        return None  # not at that ref


def _header(repo: str, path: str, kind: str, ref: str, commit: str, date: str) -> str:
    return f"<!-- {repo}, {path} at {kind} {ref}, commit {commit} ({date}), verbatim below -->\n"


def keep(gitdir: Path, out: Path, kind: str = "ascend-pytorch", branch: str = "master") -> List[str]:
    """Write every document of ``kind`` the repository publishes into ``out`` (``<ref>/<file>``); the paths written."""
    if kind not in SOURCES:
        raise UserError(f"no documents of a kind {kind!r} are kept from a repository",
                        fix=f"name one of {', '.join(SOURCES)}", exit_code=2)
    source = SOURCES[kind]
    firsts: Dict[str, Tuple[Tuple[int, ...], str]] = {}
    for tag in _git(gitdir, "tag", "--list").split():
        found = source.release_of(tag)
        if found and any(_blob(gitdir, tag, p) is not None for p in source.notes):
            release, pytorch = found
            if release not in firsts or pytorch < firsts[release][0]:
                firsts[release] = (pytorch, tag)
    wanted = [("tag", tag, path) for _, tag in firsts.values() for path in source.notes]
    wanted += [("branch", branch, path) for path in source.on_branch]
    written = []
    for ref_kind, ref, path in wanted:
        body = _blob(gitdir, ref, path)
        if body is None:
            continue
        commit, date = _git(gitdir, "log", "-1", "--format=%H %cs", f"{ref}^{{commit}}").split()
        text = _header(source.repo, path, ref_kind, ref, commit, date).encode() + body
        target = out / ref / Path(path).name
        if not target.exists() or target.read_bytes() != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            writes.replace_file(target, text)
            written.append(str(target))
    return sorted(written)
